"""A signed-in account changes its password: the current one checked under the sign-in lockout, other browsers
signed out, MCP credentials revoked only when asked."""

import pytest
from django.test import Client
from django.urls import reverse

from accounts import services
from accounts.models import ApiKey, User

PASSWORD = "correct horse battery staple"
NEW = "a fresh long passphrase 42"


@pytest.fixture
def signed_in(client: Client, owner: User) -> Client:
    client.force_login(owner)
    return client


def change(client: Client, old: str = PASSWORD, **extra: str):
    form = {"old_password": old, "new_password1": NEW, "new_password2": NEW}
    return client.post(reverse("accounts:password-change"), form | extra, REMOTE_ADDR="198.51.100.7", follow=True)


def test_the_password_page_needs_a_signed_in_browser(client, owner):
    response = client.get(reverse("accounts:password-change"))

    assert response.status_code == 302
    assert response["Location"] == "/account/login/?next=/account/password/"


def test_every_signed_in_page_links_to_the_password_page(signed_in):
    page = signed_in.get(reverse("accounts:account")).content.decode()

    assert '<a href="/account/password/">Change password</a>' in page


def test_a_change_keeps_this_browser_signed_in_and_signs_every_other_one_out(signed_in, owner):
    other = Client()
    other.force_login(owner)

    response = change(signed_in)

    owner.refresh_from_db()
    assert owner.check_password(NEW)
    assert response.redirect_chain == [("/account/", 302)]
    assert "Your password is changed. Other signed-in browsers are signed out." in response.content.decode()
    assert signed_in.get(reverse("accounts:account")).status_code == 200
    assert other.get(reverse("accounts:account"))["Location"] == "/account/login/?next=/account/"


def test_a_change_keeps_api_keys_and_oauth_clients_unless_asked(signed_in, owner, connect):
    from oauth2_provider.models import AccessToken

    key = services.api_key_create(user=owner, name="agent").plaintext
    connect()

    change(signed_in)

    assert services.api_key_authenticate(plaintext=key) is not None
    assert AccessToken.objects.filter(user=owner).count() == 1


def test_a_change_that_asks_for_it_revokes_every_api_key_and_oauth_client_of_this_account_only(
    signed_in, owner, outsider, connect
):
    from oauth2_provider.models import AccessToken, RefreshToken

    keys = [services.api_key_create(user=owner, name=name).plaintext for name in ("one", "two")]
    connect()
    kept = services.api_key_create(user=outsider, name="other account").plaintext

    page = change(signed_in, revoke_credentials="on").content.decode()

    assert "Revoked 2 API key(s) and disconnected every OAuth client." in page
    assert [services.api_key_authenticate(plaintext=key) for key in keys] == [None, None]
    assert AccessToken.objects.filter(user=owner).count() == 0
    assert RefreshToken.objects.filter(user=owner, revoked__isnull=True).count() == 0
    assert services.api_key_authenticate(plaintext=kept) is not None


def test_a_wrong_current_password_changes_and_revokes_nothing(signed_in, owner, api_key):
    response = change(signed_in, old="not my password", revoke_credentials="on")

    owner.refresh_from_db()
    assert response.status_code == 200
    assert "Your old password was entered incorrectly." in response.content.decode()
    assert owner.check_password(PASSWORD)
    assert services.api_key_authenticate(plaintext=api_key) is not None


def test_a_weak_new_password_changes_and_revokes_nothing(signed_in, owner, api_key):
    response = change(signed_in, new_password1="password", new_password2="password", revoke_credentials="on")

    owner.refresh_from_db()
    assert response.status_code == 200
    assert "This password is too common." in response.content.decode()
    assert owner.check_password(PASSWORD)
    assert ApiKey.objects.filter(user=owner, revoked_at__isnull=True).count() == 1


def test_five_wrong_current_passwords_lock_the_change_even_for_the_right_one(signed_in, owner):
    for _ in range(5):
        assert change(signed_in, old="guess").status_code == 200

    locked = change(signed_in)

    owner.refresh_from_db()
    assert locked.status_code == 429
    assert "Too many failed sign-ins for this address" in locked.content.decode()
    assert owner.check_password(PASSWORD)


def test_wrong_current_passwords_count_toward_the_sign_in_lockout(signed_in, owner):
    for _ in range(5):
        change(signed_in, old="guess")

    attempt = Client().post("/account/login/", {"username": "alice@example.com", "password": PASSWORD})

    assert attempt.status_code == 429


def test_the_password_change_form_requires_csrf(owner):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)

    response = change(browser)

    owner.refresh_from_db()
    assert response.status_code == 403
    assert owner.check_password(PASSWORD)


def test_a_right_current_password_with_a_refused_new_one_is_no_failed_sign_in(signed_in, owner):
    for _ in range(6):
        change(signed_in, new_password1="password", new_password2="password")

    response = change(signed_in)

    owner.refresh_from_db()
    assert response.redirect_chain == [("/account/", 302)]
    assert owner.check_password(NEW)
