"""A person in Chromium: the landing page, sign-up by e-mail, keys, password reset, lockout, usage."""

import json
import re
from concurrent.futures import ThreadPoolExecutor

import anyio
import httpx2
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Page

from accounts.models import ApiKey, User
from billing.models import Plan, UsageEvent
from tests.e2e.conftest import PASSWORD, Watch, log_in


def link_in(message, path: str) -> str:
    [link] = re.findall(rf"http://\S+{re.escape(path)}\S+", message.body)
    return link


def test_landing_page_explains_leroy_with_prices_from_the_plan_rows(person: Page, origin: str, shoot):
    Plan.objects.filter(code="pro").update(included_lookups=2_500)

    response = person.goto(origin + "/")

    assert response is not None and response.status == 200
    assert person.url == origin + "/"  # a page, not a redirect to the login form
    assert "Research only." in person.locator("#boundary").inner_text()
    pricing = person.locator(".plan")
    assert pricing.count() == Plan.objects.count()
    assert "2500 evidence lookups a month" in pricing.filter(has_text="Pro").inner_text()
    assert origin + "/api/mcp" in person.locator("#connect + ol").inner_text()
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    shoot("landing")
    person.get_by_role("link", name="Create a free account").click()
    assert person.url == origin + "/account/signup/"


def test_sign_up_activate_mcp_create_a_key_reload_and_revoke(person: Page, origin: str, mailoutbox, shoot):
    person.goto(origin + "/")
    person.get_by_role("navigation").get_by_role("link", name="Sign up").click()
    person.get_by_label("Email").fill("bob@example.com")
    person.get_by_role("button", name="Sign up").click()
    assert "Check your e-mail" in person.locator("h1").inner_text()
    person.goto(link_in(mailoutbox[0], "/account/signup/confirm/"))
    person.locator("#id_new_password1").fill(PASSWORD)
    person.locator("#id_new_password2").fill(PASSWORD)
    person.get_by_role("button", name="Create account").click()
    person.wait_for_url(origin + "/account/")

    person.get_by_role("button", name="Activate MCP").click()
    person.get_by_label("Name").fill("laptop agent")
    assert person.get_by_label(re.compile("Also allow mcp:write")).is_checked() is False  # read-only by default
    person.get_by_role("button", name="Create key").click()
    person.wait_for_url(origin + "/account/")
    plaintext = person.locator("#new-key").inner_text().strip()
    shoot("new-key")
    person.context.grant_permissions(["clipboard-read", "clipboard-write"])
    person.get_by_role("button", name="Copy key").click()
    assert person.evaluate("navigator.clipboard.readText()") == plaintext
    generic = json.loads(person.locator("#snippet-generic").inner_text())
    assert generic["mcpServers"]["leroy"]["headers"]["Authorization"] == f"Bearer {plaintext}"
    key = ApiKey.objects.get()
    row = person.locator("#keys tbody tr")
    assert f"lr_live_{key.prefix}…{plaintext[-4:]}" in row.inner_text()
    assert "mcp:read" in row.inner_text() and "mcp:write" not in row.inner_text()
    # The curl snippet's request, as a terminal would send it.
    listed = httpx2.post(
        origin + "/api/mcp",
        headers={
            "Authorization": f"Bearer {plaintext}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
        content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
    )
    assert listed.status_code == 200, listed.text

    person.reload()
    assert ApiKey.objects.count() == 1
    assert person.locator("#new-key").count() == 0  # shown once
    assert plaintext not in person.content()

    person.once("dialog", lambda dialog: dialog.accept())
    person.get_by_role("button", name="Revoke").click()
    person.wait_for_load_state()
    assert "Revoked laptop agent." in person.locator(".messages").inner_text()
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_revoke_asks_first_and_cancel_keeps_the_key(person: Page, origin: str, alice: User):
    from accounts import services

    services.api_key_create(user=alice, name="keep me")
    log_in(person, origin, "alice@example.com")

    person.once("dialog", lambda dialog: dialog.dismiss())
    person.get_by_role("button", name="Revoke").click()

    assert ApiKey.objects.get().revoked_at is None
    assert person.url == origin + "/account/"


def test_password_reset_link_sets_a_new_password(person: Page, origin: str, alice: User, mailoutbox):
    person.goto(origin + "/account/login/")
    person.get_by_role("link", name="Forgot your password?").click()
    person.get_by_label("Email").fill("alice@example.com")
    person.get_by_role("button", name="Send reset link").click()
    sent = person.locator("#reset-sent").inner_text()
    person.go_back()
    person.get_by_label("Email").fill("nobody@example.com")
    person.get_by_role("button", name="Send reset link").click()
    assert person.locator("#reset-sent").inner_text() == sent  # same answer for an unknown address
    [message] = mailoutbox
    assert message.to == ["alice@example.com"]

    person.goto(link_in(message, "/account/password-reset/"))
    person.locator("#id_new_password1").fill("a brand new passphrase")
    person.locator("#id_new_password2").fill("a brand new passphrase")
    person.get_by_role("button", name="Set password").click()
    assert "Password changed" in person.locator("h1").inner_text()
    log_in(person, origin, "alice@example.com", "a brand new passphrase")
    person.wait_for_url(origin + "/account/")
    alice.refresh_from_db()
    assert alice.check_password("a brand new passphrase")


def test_a_signed_in_person_changes_the_password_from_the_footer_link(person: Page, origin: str, alice: User):
    log_in(person, origin, "alice@example.com")
    person.wait_for_url(origin + "/account/")
    person.get_by_role("link", name="Change password").click()
    person.get_by_label("Old password").fill(PASSWORD)
    person.locator("#id_new_password1").fill("a brand new passphrase")
    person.locator("#id_new_password2").fill("a brand new passphrase")
    person.get_by_role("button", name="Change password").click()

    person.wait_for_url(origin + "/account/")
    assert "Your password is changed." in person.locator(".messages").inner_text()
    alice.refresh_from_db()
    assert alice.check_password("a brand new passphrase")


def test_a_signed_in_person_moves_the_account_to_a_new_address_by_its_link(
    person: Page, origin: str, alice: User, mailoutbox
):
    log_in(person, origin, "alice@example.com")
    person.wait_for_url(origin + "/account/")
    person.get_by_role("link", name="Change e-mail").click()
    person.get_by_label("New e-mail address").fill("alice@new.example")
    person.get_by_label("Current password").fill(PASSWORD)
    person.get_by_role("button", name="Send confirmation link").click()
    assert "A link is on its way to alice@new.example." in person.locator("#email-change-sent").inner_text()
    [message] = mailoutbox

    person.goto(link_in(message, "/account/email/confirm/"))
    person.get_by_role("button", name="Use alice@new.example").click()

    person.wait_for_url(origin + "/account/")
    assert "This account now uses alice@new.example." in person.locator(".messages").inner_text()
    alice.refresh_from_db()
    assert alice.email == "alice@new.example"


def test_repeated_wrong_passwords_lock_the_account_even_for_the_right_one(
    person: Page, origin: str, alice: User, watch: Watch
):
    watch.allow("the server responded with a status of 429")  # the locked-out answer, expected here
    for _ in range(5):
        log_in(person, origin, "alice@example.com", "wrong password")
        assert "Please enter a correct email and password" in person.content()

    log_in(person, origin, "alice@example.com")

    assert "Too many failed sign-ins" in person.locator("#locked").inner_text()
    assert person.url.startswith(origin + "/account/login/")
    assert person.goto(origin + "/account/").url.startswith(origin + "/account/login/")  # still signed out


def metered_calls(origin: str, key: str, sides: list[str]) -> None:
    async def run() -> None:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
            McpClient(streamable_http_client(origin + "/api/mcp", http_client=http)) as mcp,
        ):
            for side in sides:
                result = await mcp.call_tool("probe_metered", {"side": side})
                assert result.is_error is False, result

    # Playwright's loop owns this thread; the SDK gets its own.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, run).result(timeout=60)


def test_usage_meter_and_table_follow_metered_calls(person: Page, origin: str, alice: User, shoot):
    from accounts import services

    key = services.api_key_create(user=alice, name="agent").plaintext
    log_in(person, origin, "alice@example.com")
    person.get_by_role("link", name="Usage").click()
    assert person.locator("#lookup-meter").get_attribute("value") == "0"
    assert person.locator("#usage-notice").count() == 0

    metered_calls(origin, key, ["buy", "both", "sell"] + ["buy"] * 77)  # 81 of the Free plan's 100
    person.reload()

    assert UsageEvent.objects.filter(user=alice).count() == 80
    assert person.locator("#lookup-meter").get_attribute("value") == "81"
    assert person.locator("#used").inner_text() == "81"
    assert "81 %" in person.locator("#usage-notice").inner_text()
    assert person.locator("#calls").inner_text() == "80"
    assert person.locator("#recent-calls tbody tr").count() == 20
    assert "probe_metered" in person.locator("#recent-calls tbody tr").first.inner_text()
    bars = person.locator("#daily-chart rect.bar")
    assert sum(int(bars.nth(i).get_attribute("data-value") or 0) for i in range(bars.count())) == 81
    shoot("usage")


def test_plan_page_without_stripe_keys_says_ledger_only(person: Page, origin: str, alice: User, shoot):
    log_in(person, origin, "alice@example.com")
    person.get_by_role("link", name="Plan and billing").click()

    assert person.locator("#current-plan").inner_text() == "Free"
    assert "ledger-only" in person.locator("#ledger-only").inner_text()
    assert person.get_by_role("button", name=re.compile("Stripe")).count() == 0
    assert person.locator("#credits-remaining").inner_text() == "1000"
    shoot("plan")


def test_a_form_submitted_twice_goes_once(person: Page, origin: str, alice: User):
    log_in(person, origin, "alice@example.com")
    person.wait_for_url(origin + "/account/")
    person.get_by_label("Name").fill("clicked twice")

    # The page's own handler sees each submission first; this one, added after it, records whether the page let
    # the submission go and then holds it, so both clicks land while the first would still be on its way.
    went = person.evaluate(
        """() => {
            const went = [];
            document.addEventListener("submit", (event) => {
                went.push(!event.defaultPrevented);
                event.preventDefault();
            });
            const button = document.querySelector('form[action$="/account/keys/"] button[type=submit]');
            button.click();
            button.click();
            return went;
        }"""
    )

    assert went == [True, False]
    assert ApiKey.objects.exists() is False
