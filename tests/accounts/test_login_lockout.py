"""Sign-in lockout per submitted address and per client address, with the same answer for unknown addresses."""

import re

import pytest
from django.test import Client

PASSWORD = "correct horse battery staple"


def attempt(client: Client, email: str, password: str, address: str = "198.51.100.1"):
    return client.post("/account/login/", {"username": email, "password": password}, REMOTE_ADDR=address)


@pytest.mark.django_db
def test_five_wrong_passwords_lock_the_account_even_for_the_right_password(client: Client, owner):
    for _ in range(5):
        assert attempt(client, "alice@example.com", "wrong").status_code == 200

    locked = attempt(client, "ALICE@example.com", PASSWORD)

    assert locked.status_code == 429
    assert "Too many failed sign-ins" in locked.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_an_unknown_address_locks_the_same_way(client: Client):
    for _ in range(5):
        attempt(client, "nobody@example.com", "wrong")

    assert attempt(client, "nobody@example.com", "wrong").status_code == 429


@pytest.mark.django_db
def test_a_success_clears_the_accounts_count(client: Client, owner):
    for _ in range(4):
        attempt(client, "alice@example.com", "wrong")
    assert attempt(client, "alice@example.com", PASSWORD).status_code == 302
    client.logout()

    for _ in range(4):
        attempt(client, "alice@example.com", "wrong")

    assert attempt(client, "alice@example.com", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_one_network_guessing_many_addresses_is_locked_out(client: Client, owner, settings):
    for i in range(settings.LEROY_LOGIN_FAILURES_PER_ADDRESS):
        attempt(client, f"guess{i}@example.com", "wrong")

    assert attempt(client, "alice@example.com", PASSWORD).status_code == 429
    assert attempt(client, "alice@example.com", PASSWORD, address="203.0.113.9").status_code == 302


@pytest.mark.django_db
def test_the_admin_sign_in_is_the_account_sign_in_with_its_lockout(client: Client, owner):
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    for _ in range(5):
        attempt(client, "alice@example.com", "wrong")

    admin_form = client.post("/admin/login/?next=/admin/", {"username": "alice@example.com", "password": PASSWORD})
    locked = attempt(client, "alice@example.com", PASSWORD)

    assert (admin_form.status_code, admin_form["Location"]) == (302, "/account/login/?next=/admin/")
    assert locked.status_code == 429
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_staff_reach_the_admin_through_the_account_sign_in_and_others_are_refused(client: Client, owner, outsider):
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])

    anonymous = client.get("/admin/", follow=True)
    signed_in = attempt(client, "alice@example.com", PASSWORD)
    staff = client.get("/admin/login/?next=/admin/")
    client.force_login(outsider)
    refused = client.get("/admin/login/?next=/admin/")

    assert anonymous.redirect_chain[-1] == ("/account/login/?next=/admin/", 302)
    assert (signed_in.status_code, staff.status_code, staff["Location"]) == (302, 302, "/admin/")
    assert client.get("/admin/").status_code == 302  # not staff: admin sends it to its sign-in...
    assert refused.status_code == 403  # ...which refuses it instead of sending it round again


@pytest.mark.django_db
def test_an_address_typed_with_capitals_signs_in_to_its_account(client: Client, owner):
    assert attempt(client, "Alice@Example.COM", PASSWORD).status_code == 302
    assert client.session["_auth_user_id"] == str(owner.pk)


@pytest.mark.django_db
def test_a_password_reset_ends_the_accounts_lockout(
    client: Client, owner, mailoutbox, django_capture_on_commit_callbacks
):
    for _ in range(5):
        attempt(client, "alice@example.com", "wrong")
    with django_capture_on_commit_callbacks(execute=True):  # the reset mail is sent by a task, once the request commits
        client.post("/account/password-reset/", {"email": "alice@example.com"})
    [link] = re.findall(r"http://\S+/account/password-reset/\S+", mailoutbox[0].body)
    form = client.get(link.removeprefix("http://127.0.0.1:8000"), follow=True)
    new = "another horse battery staple"
    client.post(form.redirect_chain[-1][0], {"new_password1": new, "new_password2": new})

    assert attempt(client, "alice@example.com", new).status_code == 302


@pytest.mark.django_db
def test_attempts_in_flight_together_are_counted_before_any_password_is_checked(client: Client, owner):
    from accounts import throttle

    # five attempts sent together, none of them judged yet
    allowed = [throttle.login_attempt(email="alice@example.com", address=f"198.51.100.{i}") for i in range(6)]

    assert allowed == [True] * 5 + [False]
    assert attempt(client, "alice@example.com", PASSWORD, address="203.0.113.77").status_code == 429


@pytest.mark.django_db
def test_a_right_password_takes_its_attempt_back_from_its_client_address(client: Client, owner, settings):
    for _ in range(settings.LEROY_LOGIN_FAILURES_PER_ADDRESS + 2):
        assert attempt(client, "alice@example.com", PASSWORD).status_code == 302
        client.logout()

    assert attempt(client, "alice@example.com", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_with_redis_down_a_wrong_password_is_answered_and_the_lockout_holds_in_the_process(redis_down, owner):
    browser = Client(raise_request_exception=False)
    for _ in range(5):
        assert attempt(browser, "alice@example.com", "wrong").status_code == 200

    locked = attempt(browser, "alice@example.com", PASSWORD)

    assert locked.status_code == 429
    assert "_auth_user_id" not in browser.session
