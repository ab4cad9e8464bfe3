import pytest
from django.test import Client
from django.urls import reverse

from alerts import services
from alerts.models import AlertRule, Attempt
from tests.alerts.conftest import make_rule
from tests.alerts.receiver import verify

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(client: Client, owner) -> Client:
    client.force_login(owner)
    return client


def form(url: str, **fields) -> dict:
    return {
        "name": "wake", "symbols": "", "universe": "on", "side": "buy", "horizon_minutes": "15",
        "min_active_signals": "1", "min_match_tier": "2", "endpoint_url": url, **fields,
    }  # fmt: skip


def test_the_page_needs_a_login_and_is_linked_from_the_account(client, owner):
    assert client.get(reverse("alerts:alerts"))["Location"].startswith(reverse("accounts:login"))

    client.force_login(owner)
    assert reverse("alerts:alerts") in client.get(reverse("accounts:account")).content.decode()
    assert client.get(reverse("alerts:alerts")).status_code == 200


def test_creating_a_rule_redirects_and_shows_its_secret_once(signed_in, receiver):
    created = signed_in.post(reverse("alerts:create"), form(receiver.url()))

    rule = AlertRule.objects.get()
    assert (created.status_code, created["Location"]) == (303, reverse("alerts:alerts"))
    assert "no-store" in created["Cache-Control"]
    shown = signed_in.get(reverse("alerts:alerts"))
    secret = shown.context["secret"]
    assert "no-store" in shown["Cache-Control"]
    assert secret in shown.content.decode() and shown.context["secret_rule"] == rule
    assert (rule.universe, rule.min_match_tier, rule.endpoint_url) == (True, 2, receiver.url())
    assert secret not in signed_in.get(reverse("alerts:alerts")).content.decode()
    signed_in.post(reverse("alerts:test", args=[rule.public_id]))
    assert verify(secret, receiver.requests[0])


def test_a_reload_after_creating_cannot_create_a_second_rule(signed_in, receiver):
    created = signed_in.post(reverse("alerts:create"), form(receiver.url()), follow=True)

    assert created.redirect_chain == [(reverse("alerts:alerts"), 303)]
    assert created.request["REQUEST_METHOD"] == "GET"  # a reload repeats this GET, not the POST
    assert AlertRule.objects.count() == 1


def test_a_secret_cookie_is_shown_only_while_it_is_the_rules_secret_and_only_to_its_owner(
    signed_in, outsider, receiver
):
    signed_in.post(reverse("alerts:create"), form(receiver.url()))
    rule = AlertRule.objects.get()
    stale = signed_in.cookies["leroy_new_alert_secret"].value
    first = signed_in.get(reverse("alerts:alerts")).context["secret"]

    signed_in.post(reverse("alerts:rotate", args=[rule.public_id]))
    rotated = signed_in.get(reverse("alerts:alerts")).context["secret"]
    signed_in.cookies["leroy_new_alert_secret"] = stale
    replayed = signed_in.get(reverse("alerts:alerts"))
    stranger = Client()
    stranger.force_login(outsider)
    stranger.cookies["leroy_new_alert_secret"] = stale

    assert rotated != first and rotated.startswith(AlertRule.objects.get().secret_prefix)
    assert "secret" not in replayed.context and first not in replayed.content.decode()  # rolled: never shown again
    assert "secret" not in stranger.get(reverse("alerts:alerts")).context


def test_an_unsafe_endpoint_is_refused_on_the_page_and_nothing_is_created(signed_in):
    response = signed_in.post(reverse("alerts:create"), form("https://127.0.0.1/hook"))

    assert response.status_code == 200  # the form again with the refusal, as Django re-renders a failed form
    assert "must name a host, not an IP address" in response.content.decode()
    assert AlertRule.objects.exists() is False


def test_a_form_with_invalid_fields_is_shown_again_with_its_errors_and_creates_nothing(signed_in):
    response = signed_in.post(reverse("alerts:create"), form("https://hooks.example.com/x", name="", min_win_rate="2"))

    assert response.status_code == 200
    assert response.context["form"].errors == {
        "name": ["This field is required."],
        "min_win_rate": ["Ensure this value is less than or equal to 1."],
    }
    assert "Ensure this value is less than or equal to 1." in response.content.decode()
    assert AlertRule.objects.exists() is False


def test_pause_resume_test_redeliver_and_delete_from_the_page(signed_in, owner, receiver):
    rule, _ = make_rule(owner, receiver.url(), name="<script>alert(1)</script>")

    signed_in.post(reverse("alerts:pause", args=[rule.public_id]))
    paused = AlertRule.objects.get().status
    signed_in.post(reverse("alerts:resume", args=[rule.public_id]))
    signed_in.post(reverse("alerts:test", args=[rule.public_id]))
    delivery = rule.deliveries.get()
    signed_in.post(reverse("alerts:redeliver", args=[delivery.public_id]))
    page = signed_in.get(reverse("alerts:alerts")).content.decode()
    signed_in.post(reverse("alerts:delete", args=[rule.public_id]))

    assert paused == "paused"
    assert delivery.public_id in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    assert list(Attempt.objects.values_list("trigger", flat=True)) == []  # deleted with the rule
    assert len(receiver.requests) == 2
    assert AlertRule.objects.exists() is False


def test_another_accounts_rule_cannot_be_touched_from_the_page(signed_in, outsider, receiver):
    theirs, _ = make_rule(outsider, receiver.url(), name="theirs")
    delivery = services.send_test_event(user=outsider, alert_id=theirs.public_id)

    page = signed_in.get(reverse("alerts:alerts")).content.decode()
    for action in ("pause", "delete", "test", "rotate"):
        signed_in.post(reverse(f"alerts:{action}", args=[theirs.public_id]))
    signed_in.post(reverse("alerts:redeliver", args=[delivery.public_id]))

    after = AlertRule.objects.get(pk=theirs.pk)
    assert "theirs" not in page and delivery.public_id not in page
    assert (after.status, after.secret_ciphertext) == ("active", theirs.secret_ciphertext)
    assert Attempt.objects.count() == 1
    assert len(receiver.requests) == 1


def test_the_reason_for_an_automatic_pause_is_shown(signed_in, owner, receiver):
    rule, _ = make_rule(owner, receiver.url())
    reason = "Paused automatically: 10 deliveries in a row failed (last: HTTP 500)."
    AlertRule.objects.filter(pk=rule.pk).update(status="paused", status_reason=reason)

    assert reason in signed_in.get(reverse("alerts:alerts")).content.decode()


def test_the_page_bounds_the_minimum_of_active_signals_by_the_registered_strategies(signed_in):
    from evidence.memory.strategies import STRATEGIES

    count = len(STRATEGIES)
    response = signed_in.post(reverse("alerts:create"), form("https://hooks.example.com/x",
                                                             min_active_signals=str(count + 1)))  # fmt: skip

    assert response.status_code == 200
    assert response.context["form"].errors == {
        "min_active_signals": [f"Ensure this value is less than or equal to {count}."]
    }
    assert AlertRule.objects.exists() is False


def test_the_page_refuses_a_name_holding_a_bidi_override_as_the_tool_does(signed_in):
    response = signed_in.post(reverse("alerts:create"), form("https://hooks.example.com/x", name="rule\u202eevil"))

    assert response.status_code == 200
    assert response.context["form"].errors == {"name": ["must not contain bidirectional control characters"]}
    assert AlertRule.objects.exists() is False


def test_the_page_refuses_a_name_with_no_visible_character_as_the_tool_does(signed_in):
    response = signed_in.post(reverse("alerts:create"), form("https://hooks.example.com/x", name="\u200b"))

    assert response.status_code == 200
    assert response.context["form"].errors == {"name": ["must not be blank"]}
    assert AlertRule.objects.exists() is False
