"""An owner closes the account from Plan and billing: keys, OAuth clients and sessions end, the address is freed,
queued work stops; nothing changes on a wrong password, a wrong confirmation or a live Stripe subscription."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from accounts import services
from accounts.models import ApiKey, User
from billing.models import StripeCustomer
from leroy.clock import now

PASSWORD = "correct horse battery staple"
NEW = "a fresh long passphrase 42"
CLOSE = "/account/billing/close/"


@pytest.fixture
def signed_in(client: Client, owner: User) -> Client:
    client.force_login(owner)
    return client


def close(client: Client, password: str = PASSWORD, confirmation: str = "close my account"):
    form = {"password": password, "confirmation": confirmation}
    return client.post(CLOSE, form, REMOTE_ADDR="198.51.100.11", follow=True)


def test_the_close_page_needs_a_signed_in_browser_and_plan_and_billing_links_to_it(client, owner):
    assert client.get(CLOSE)["Location"] == "/account/login/?next=/account/billing/close/"
    client.force_login(owner)
    assert f'href="{CLOSE}"' in client.get(reverse("billing:plan")).content.decode()


def test_closing_ends_keys_oauth_clients_and_every_session_and_frees_the_address(owner, outsider, connect):
    from oauth2_provider.models import AccessToken, RefreshToken

    key = services.api_key_create(user=owner, name="agent").plaintext
    connect()
    kept = services.api_key_create(user=outsider, name="other account").plaintext
    here, elsewhere = Client(), Client()
    here.force_login(owner)
    elsewhere.force_login(owner)

    response = close(here)

    owner.refresh_from_db()
    assert response.redirect_chain == [("/", 302)]
    assert "Your account is closed." in response.content.decode()
    assert (owner.is_active, owner.has_usable_password()) == (False, False)
    assert re.fullmatch(rf"closed-{owner.pk}-[0-9a-f]{{16}}@closed\.invalid", owner.email)
    assert owner.closed_at is not None
    assert services.api_key_authenticate(plaintext=key) is None
    assert AccessToken.objects.filter(user=owner).count() == 0
    assert RefreshToken.objects.filter(user=owner, revoked__isnull=True).count() == 0
    assert services.api_key_authenticate(plaintext=kept) is not None
    for browser in (here, elsewhere):
        assert browser.get("/account/")["Location"] == "/account/login/?next=/account/"
    assert not Client().login(username="alice@example.com", password=PASSWORD)


def test_the_freed_address_signs_up_as_a_new_account(signed_in, owner, mailoutbox, django_capture_on_commit_callbacks):
    close(signed_in)

    with django_capture_on_commit_callbacks(execute=True):
        Client().post(reverse("accounts:signup"), {"email": "alice@example.com"})

    fresh = User.objects.get(email="alice@example.com")
    assert fresh.pk != owner.pk and fresh.is_active is False  # a new sign-up, waiting for its link
    assert [m.subject for m in mailoutbox] == ["Your Leroy account"]
    assert "/account/signup/confirm/" in mailoutbox[0].body


def test_a_closed_account_given_a_real_address_again_is_not_reopened_by_a_sign_up(
    signed_in, owner, mailoutbox, django_capture_on_commit_callbacks
):
    close(signed_in)
    User.objects.filter(pk=owner.pk).update(email="alice@example.com")  # an operator edits it back in the admin

    with django_capture_on_commit_callbacks(execute=True):
        Client().post(reverse("accounts:signup"), {"email": "alice@example.com"})

    owner.refresh_from_db()
    assert owner.is_active is False
    assert "/account/signup/confirm/" not in mailoutbox[0].body


@pytest.mark.parametrize(
    ("password", "confirmation", "error"),
    [
        ("not mine", "close my account", "Your password was entered incorrectly."),
        (PASSWORD, "close", "Type “close my account” exactly; nothing was closed."),
        (PASSWORD, "Close My Account", "Type “close my account” exactly; nothing was closed."),
    ],
    ids=["wrong-password", "wrong-confirmation", "other-case"],
)
def test_a_refused_close_changes_nothing(signed_in, owner, api_key, password, confirmation, error):
    response = close(signed_in, password, confirmation)

    owner.refresh_from_db()
    assert response.status_code == 200
    assert error in response.content.decode()
    assert (owner.is_active, owner.email, owner.closed_at) == (True, "alice@example.com", None)
    assert services.api_key_authenticate(plaintext=api_key) is not None


def test_five_wrong_passwords_lock_the_close_even_for_the_right_one(signed_in, owner):
    for _ in range(5):
        close(signed_in, password="guess")

    locked = close(signed_in)

    owner.refresh_from_db()
    assert locked.status_code == 429
    assert "Too many failed sign-ins" in locked.content.decode()
    assert owner.is_active is True


@pytest.mark.parametrize("status", ["active", "trialing", "past_due", "unpaid", "incomplete", "paused"])
def test_a_stripe_subscription_must_end_before_the_account_closes(signed_in, owner, status):
    StripeCustomer.objects.create(user=owner, customer_id="cus_1", subscription_id="sub_1", subscription_status=status)

    response = close(signed_in)

    owner.refresh_from_db()
    assert response.status_code == 409
    assert "This account has a Stripe subscription that has not ended. Cancel it first" in response.content.decode()
    assert (owner.is_active, owner.closed_at) == (True, None)


def test_an_ended_stripe_subscription_does_not_stop_the_close(signed_in, owner):
    StripeCustomer.objects.create(
        user=owner, customer_id="cus_1", subscription_id="sub_1", subscription_status="canceled"
    )

    close(signed_in)

    owner.refresh_from_db()
    assert owner.is_active is False


def test_the_close_form_requires_csrf(browser, owner):
    response = close(browser)

    owner.refresh_from_db()
    assert response.status_code == 403
    assert owner.is_active is True


def test_a_password_saved_from_a_form_read_before_the_close_does_not_reopen_it(owner):
    from accounts.forms import ChangePasswordForm

    form = ChangePasswordForm(
        User.objects.get(pk=owner.pk), {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW}
    )
    assert form.is_valid()  # the change read the account before the close committed
    services.account_close(user=owner)

    with pytest.raises(services.AccountError) as refused:
        form.save()

    owner.refresh_from_db()
    assert refused.value.code == "account_inactive"
    assert (owner.is_active, owner.has_usable_password()) == (False, False)
    assert owner.closed_at is not None


def test_a_password_change_refused_for_a_closed_account_says_so_and_revokes_nothing_more(
    signed_in, owner, api_key, monkeypatch
):
    from accounts import forms

    check = forms.ChangePasswordForm.clean_old_password

    def closed_meanwhile(self):
        checked = check(self)
        User.objects.filter(pk=owner.pk).update(is_active=False, closed_at=now())  # another request closed it
        return checked

    monkeypatch.setattr(forms.ChangePasswordForm, "clean_old_password", closed_meanwhile)
    response = signed_in.post(
        reverse("accounts:password-change"),
        {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW, "revoke_credentials": "on"},
    )

    owner.refresh_from_db()
    assert response.status_code == 409
    assert "This account is closed or suspended: its password was not changed." in response.content.decode()
    assert owner.check_password(PASSWORD)
    assert services.api_key_authenticate(plaintext=api_key) is None  # refused: the account is inactive
    assert ApiKey.objects.get(user=owner).revoked_at is None  # and nothing was revoked by the refused change


def test_a_second_close_changes_nothing(owner):
    services.account_close(user=owner)
    first = User.objects.values_list("email", "closed_at").get(pk=owner.pk)

    services.account_close(user=owner)

    assert User.objects.values_list("email", "closed_at").get(pk=owner.pk) == first


def test_a_sign_up_cannot_take_a_closed_accounts_kind_of_address(client, owner, mailoutbox):
    response = client.post(reverse("accounts:signup"), {"email": f"closed-{owner.pk}@closed.invalid"})

    assert "Enter an address that can receive mail." in response.content.decode()
    assert User.objects.count() == 1
    assert mailoutbox == []


def test_the_admin_cannot_reopen_a_closed_account(client, owner):
    services.account_close(user=owner)
    client.force_login(User.objects.create_superuser(email="admin@example.com", password="x-long-password"))

    page = client.get(reverse("admin:accounts_user_change", args=[owner.pk])).content.decode()

    assert 'name="is_active"' not in page
