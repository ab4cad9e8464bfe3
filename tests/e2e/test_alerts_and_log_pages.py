"""A person in Chromium: creates, pauses, resumes and deletes an alert rule; reads the publication log and checks
it with leroy-verify exactly as the page says."""

import shlex
import subprocess
import sys
from pathlib import Path

import httpx2
from playwright.sync_api import Page

from accounts.models import User
from alerts.models import AlertRule
from evidence.publication import services as log_services
from tests.e2e.conftest import log_in

RECEIVER = "127.0.0.1:9000"  # allow-listed below: a self-hosted receiver (nothing is delivered in this test)


def test_create_pause_resume_and_delete_an_alert_rule(person: Page, origin: str, alice: User, settings, shoot):
    settings.LEROY_WEBHOOK_ALLOW_HOSTS = [RECEIVER]
    log_in(person, origin, "alice@example.com")
    person.get_by_role("navigation", name="Main").get_by_role("link", name="Alerts").click()
    assert person.locator("#rules tbody").inner_text().strip() == "No alert rules yet."

    person.get_by_label("Name").fill("SPY dip wake")
    person.get_by_label("Every symbol the frame feed follows").check()
    person.get_by_label("Side").select_option("buy")
    person.get_by_label("Horizon minutes").select_option("30")
    person.get_by_label("Min match tier").select_option("3")
    person.get_by_label("HTTPS endpoint").fill(f"http://{RECEIVER}/hook")
    person.get_by_role("button", name="Create alert").click()

    rule = AlertRule.objects.get()
    secret = person.locator("#new-secret").inner_text().strip()
    assert secret.startswith("lr_whsec_") and secret.startswith(rule.secret_prefix)
    assert (rule.universe, rule.side, rule.horizon_minutes, rule.min_match_tier) == (True, "buy", 30, 3)
    row = person.locator("#rules tbody tr", has_text="SPY dip wake")
    assert "every followed symbol · buy · 30 min" in row.inner_text()
    assert row.locator("td.status-active").count() == 1
    shoot("alert-created")

    row.get_by_role("button", name="Pause").click()
    person.wait_for_url(origin + "/account/alerts/")
    assert person.locator("#new-secret").count() == 0  # shown once
    assert person.locator("#rules tbody tr td.status-paused").count() == 1
    rule.refresh_from_db()
    assert rule.status == "paused"

    person.get_by_role("button", name="Resume").click()
    person.wait_for_load_state()
    rule.refresh_from_db()
    assert rule.status == "active"

    person.once("dialog", lambda dialog: dialog.dismiss())
    person.get_by_role("button", name="Delete").click()
    assert AlertRule.objects.filter(status="active").count() == 1  # cancelled: nothing changed
    person.once("dialog", lambda dialog: dialog.accept())
    person.get_by_role("button", name="Delete").click()
    person.wait_for_url(origin + "/account/alerts/")
    assert person.locator("#rules tbody").inner_text().strip() == "No alert rules yet."
    assert AlertRule.objects.exclude(status="deleted").count() == 0
    shoot("alerts-empty")


def entry(n: int) -> dict[str, object]:
    return {"kind": "daily_answers_root", "day": f"2026-11-0{n}", "answer_count": n, "root_sha256": f"{n}" * 64}


def test_the_publication_log_page_shows_the_checkpoint_and_its_commands_verify(person: Page, origin: str, shoot):
    log_services.entries_append([entry(1), entry(2)])
    log_services.entries_append([entry(3)])

    person.goto(origin + "/")
    person.get_by_role("navigation", name="Main").get_by_role("link", name="Publication log").click()

    assert person.locator("#tree-size").inner_text() == "3"
    served = httpx2.get(origin + "/log/checkpoint").text
    assert person.locator("#checkpoint-note").inner_text().strip() == served.strip()
    assert [row.locator("td").first.inner_text() for row in person.locator("#log-entries tbody tr").all()] == [
        "2",
        "1",
        "0",
    ]
    assert "answers of 2026-11-03" in person.locator("#log-entries tbody tr").first.inner_text()
    shoot("publication-log")
    # Run the page's own first and third commands (the key pinned from the page) against the live log.
    first, _, third, *_ = [pre.inner_text() for pre in person.locator("#verify pre").all()]
    key = shlex.split(first)[-1]
    cli = str(Path(sys.executable).with_name("leroy-verify"))
    for command in (first, third.replace("KEY", shlex.quote(key))):
        argv = [cli, *shlex.split(command)[1:]]
        checked = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "3" in checked.stdout
