import re
import time

import pytest
from django.contrib.auth.tokens import default_token_generator
from django.core.mail.backends import locmem
from django.test import Client
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from accounts import services
from accounts.models import ApiKey, User

PASSWORD = "correct horse battery staple"


@pytest.fixture
def signed_in(client: Client, owner: User) -> Client:
    client.force_login(owner)
    return client


def signup_link(message) -> str:
    [link] = re.findall(r"http://\S+/account/signup/confirm/\S+", message.body)
    return link.removeprefix("http://127.0.0.1:8000")


def test_signup_mails_a_link_that_sets_the_password_activates_and_signs_in(
    client, db, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):  # account mails are sent by a task, once the request commits
        response = client.post(reverse("accounts:signup"), {"email": "Bob@Example.com"})

    assert response.status_code == 200
    assert "Check your e-mail" in response.content.decode()
    user = User.objects.get()
    assert (user.email, user.is_active, user.has_usable_password()) == ("bob@example.com", False, False)
    [message] = mailoutbox
    assert message.to == ["bob@example.com"]
    link = signup_link(message)
    form_page = client.get(link, follow=True)
    assert "Choose your password" in form_page.content.decode()
    done = client.post(form_page.redirect_chain[-1][0], {"new_password1": PASSWORD, "new_password2": PASSWORD})
    assert done.status_code == 302
    assert done["Location"] == reverse("accounts:account")
    user.refresh_from_db()
    assert user.is_active is True
    assert user.check_password(PASSWORD)
    assert client.get(reverse("accounts:account")).status_code == 200
    assert "no longer works" in client.get(link, follow=True).content.decode()  # the link works once


def test_signup_with_a_taken_email_answers_the_same_and_mails_the_owner_a_reminder(
    client, owner, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        fresh = client.post(reverse("accounts:signup"), {"email": "newbie@example.com"}).content.decode()
        taken = client.post(reverse("accounts:signup"), {"email": "ALICE@example.com"}).content.decode()

    assert taken == fresh.replace("newbie@example.com", "alice@example.com")
    assert User.objects.count() == 2
    reminder = mailoutbox[1]
    assert reminder.to == ["alice@example.com"]
    assert "already has an account" in reminder.body
    assert "/account/signup/confirm/" not in reminder.body
    owner.refresh_from_db()
    assert owner.check_password(PASSWORD)


def test_a_suspended_account_is_not_reopened_by_signing_up_again_nor_its_old_link(
    client, owner, mailoutbox, django_capture_on_commit_callbacks
):
    key = services.api_key_create(user=owner, name="agent").plaintext
    User.objects.filter(pk=owner.pk).update(is_active=False)  # the operator suspends it (admin's "active")
    owner.refresh_from_db()
    uid, token = urlsafe_base64_encode(force_bytes(owner.pk)), default_token_generator.make_token(owner)
    stale = reverse("accounts:signup-confirm", kwargs={"uidb64": uid, "token": token})  # a link made for it

    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("accounts:signup"), {"email": "alice@example.com"})
    page = client.get(stale, follow=True).content.decode()

    note = mailoutbox[-1]
    assert "suspended" in note.body
    assert "/account/signup/confirm/" not in note.body
    assert "no longer works" in page
    owner.refresh_from_db()
    assert (owner.is_active, owner.check_password(PASSWORD)) == (False, True)
    assert services.api_key_authenticate(plaintext=key) is None


def test_signup_link_refuses_weak_passwords_and_leaves_the_account_inactive(
    client, db, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("accounts:signup"), {"email": "bob@example.com"})
    form_page = client.get(signup_link(mailoutbox[0]), follow=True)

    response = client.post(form_page.redirect_chain[-1][0], {"new_password1": "123", "new_password2": "123"})

    assert response.status_code == 200
    assert User.objects.get().is_active is False


def test_inactive_accounts_cannot_log_in(client, db, mailoutbox):
    client.post(reverse("accounts:signup"), {"email": "bob@example.com"})

    response = client.post(reverse("accounts:login"), {"username": "bob@example.com", "password": ""})

    assert response.status_code == 200
    assert "_auth_user_id" not in client.session


def test_login_and_logout(client, owner):
    response = client.post(reverse("accounts:login"), {"username": "alice@example.com", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get(reverse("accounts:account")).status_code == 200

    client.post(reverse("accounts:logout"))
    assert client.get(reverse("accounts:account")).status_code == 302


def test_account_page_requires_login(client, db):
    response = client.get(reverse("accounts:account"))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("accounts:login"))


def test_key_creation_before_activation_is_refused(client, db):
    user = services.user_create(email="bob@example.com", password=PASSWORD)
    client.force_login(user)

    response = client.post(reverse("accounts:api-key-create"), {"name": "agent"})

    assert response.status_code == 200  # the page again with the refusal, as Django re-renders a failed form
    assert "Activate MCP" in response.content.decode()
    assert ApiKey.objects.exists() is False


def test_a_key_form_with_invalid_fields_is_shown_again_with_its_errors_and_creates_nothing(client, db):
    user = services.user_create(email="bob@example.com", password=PASSWORD)
    services.mcp_activate(user=user)
    client.force_login(user)

    response = client.post(reverse("accounts:api-key-create"), {"name": "x" * 101})

    assert response.status_code == 200
    assert response.context["form"].errors == {"name": ["Ensure this value has at most 100 characters (it has 101)."]}
    assert "Ensure this value has at most 100 characters (it has 101)." in response.content.decode()
    assert ApiKey.objects.exists() is False


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("\u200b", "must not be blank"),
        ("\u202e", "must not be blank"),
        ("agent\u202egnp.exe", "must not contain bidirectional control characters"),
        ("\u2067agent", "must not contain bidirectional control characters"),
    ],
)
def test_a_key_name_nobody_can_read_as_written_is_refused_and_creates_nothing(client, db, name, problem):
    user = services.user_create(email="bob@example.com", password=PASSWORD)
    services.mcp_activate(user=user)
    client.force_login(user)

    response = client.post(reverse("accounts:api-key-create"), {"name": name})

    assert response.status_code == 200
    assert response.context["form"].errors == {"name": [problem]}
    assert ApiKey.objects.exists() is False


def test_activation_then_key_shown_once_after_the_redirect(client, db):
    user = services.user_create(email="bob@example.com", password=PASSWORD)
    client.force_login(user)

    client.post(reverse("accounts:mcp-activate"))
    created = client.post(reverse("accounts:api-key-create"), {"name": "agent", "write": "on"})
    assert created.status_code == 303
    assert created["Location"] == reverse("accounts:account")
    response = client.get(created["Location"])

    assert "no-store" in response["Cache-Control"]
    page = response.content.decode()
    start = page.index("lr_live_", page.index('id="new-key"'))
    plaintext = page[start : start + 51]
    key_row = ApiKey.objects.get(user=user)
    assert key_row.scope_list == ["mcp:read", "mcp:write"]
    assert services.api_key_authenticate(plaintext=plaintext) == key_row
    assert plaintext not in client.get(reverse("accounts:account")).content.decode()


def test_revoke_takes_effect_immediately(signed_in, owner, api_key):
    key_row = ApiKey.objects.get(user=owner)

    response = signed_in.post(reverse("accounts:api-key-revoke", args=[key_row.number]))

    assert response.status_code == 302
    assert services.api_key_authenticate(plaintext=api_key) is None


def test_revoking_a_revoked_key_again_says_it_was_already_revoked_and_changes_nothing(signed_in, owner, api_key):
    key_row = ApiKey.objects.get(user=owner)
    first = signed_in.post(reverse("accounts:api-key-revoke", args=[key_row.number]), follow=True)
    revoked_at = ApiKey.objects.get(pk=key_row.pk).revoked_at

    response = signed_in.post(reverse("accounts:api-key-revoke", args=[key_row.number]), follow=True)

    assert [str(message) for message in first.context["messages"]] == ["Revoked agent."]
    assert [str(message) for message in response.context["messages"]] == ["agent was already revoked."]
    assert ApiKey.objects.get(pk=key_row.pk).revoked_at == revoked_at


def test_revoke_of_another_accounts_key_changes_nothing(client, owner, outsider, api_key):
    client.force_login(outsider)
    key_row = ApiKey.objects.get(user=owner)

    client.post(reverse("accounts:api-key-revoke", args=[key_row.number]))

    assert ApiKey.objects.get(pk=key_row.pk).revoked_at is None


def test_key_forms_require_csrf(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)

    response = client.post(reverse("accounts:api-key-create"), {"name": "agent"})

    assert response.status_code == 403
    assert ApiKey.objects.exists() is False


def test_bearer_credentials_do_not_open_account_pages(client, api_key):
    response = client.get(reverse("accounts:account"), HTTP_AUTHORIZATION=f"Bearer {api_key}")

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("accounts:login"))


def test_signup_emails_to_one_address_stop_at_the_hourly_limit_and_the_refusal_sends_nothing(
    client, db, settings, mailoutbox, django_capture_on_commit_callbacks
):
    settings.LEROY_EMAILS_PER_ADDRESS_PER_HOUR = 2
    with django_capture_on_commit_callbacks(execute=True):
        answers = [client.post(reverse("accounts:signup"), {"email": "victim@example.com"}) for _ in range(3)]
        other = client.post(reverse("accounts:signup"), {"email": "someone@example.com"})

    assert [a.status_code for a in answers] == [200, 200, 429]
    assert 1 <= int(answers[2]["Retry-After"]) <= 3600
    assert "Too many e-mails were requested" in answers[2].content.decode()
    assert [m.to for m in mailoutbox] == [["victim@example.com"], ["victim@example.com"], ["someone@example.com"]]
    assert other.status_code == 200


def test_one_client_can_request_only_so_many_emails_to_any_addresses(
    client, db, settings, mailoutbox, django_capture_on_commit_callbacks
):
    settings.LEROY_EMAILS_PER_CLIENT_PER_HOUR = 2
    with django_capture_on_commit_callbacks(execute=True):
        statuses = [
            client.post(reverse("accounts:signup"), {"email": f"n{i}@example.com"}).status_code for i in range(3)
        ]
        reset = client.post(reverse("accounts:password-reset"), {"email": "n0@example.com"})
        elsewhere = Client(REMOTE_ADDR="198.51.100.9").post(reverse("accounts:signup"), {"email": "n2@example.com"})

    assert statuses == [200, 200, 429]
    assert reset.status_code == 429  # password-reset links count against the same limit
    assert elsewhere.status_code == 200
    assert [m.to for m in mailoutbox] == [["n0@example.com"], ["n1@example.com"], ["n2@example.com"]]
    assert User.objects.filter(email="n2@example.com").count() == 1  # made by the allowed request only


def test_the_email_limit_answers_the_same_for_an_existing_account(
    client, owner, settings, mailoutbox, django_capture_on_commit_callbacks
):
    settings.LEROY_EMAILS_PER_ADDRESS_PER_HOUR = 1
    with django_capture_on_commit_callbacks(execute=True):
        for email in ("alice@example.com", "ghost@example.com"):
            client.post(reverse("accounts:password-reset"), {"email": email})
    known = client.post(reverse("accounts:password-reset"), {"email": "alice@example.com"})
    unknown = client.post(reverse("accounts:password-reset"), {"email": "ghost@example.com"})

    assert (known.status_code, unknown.status_code) == (429, 429)
    page = [re.sub(r'name="csrfmiddlewaretoken" value="\w+"', "", r.content.decode()) for r in (known, unknown)]
    assert page[0].replace("alice@", "ghost@") == page[1].replace("alice@", "ghost@")
    assert [m.to for m in mailoutbox] == [["alice@example.com"]]


def test_the_account_page_names_keys_by_their_number_in_the_account(signed_in, owner, outsider):
    services.mcp_activate(user=outsider)
    services.api_key_create(user=outsider, name="theirs")
    services.api_key_create(user=owner, name="mine")

    page = signed_in.get(reverse("accounts:account")).content.decode()

    assert 'action="/account/keys/1/revoke/"' in page
    assert "/account/keys/2/revoke/" not in page


def test_the_login_form_names_its_fields_for_password_managers_and_a_failure_blames_only_the_password(client, owner):
    page = client.get(reverse("accounts:login")).content.decode()
    response = client.post(reverse("accounts:login"), {"username": "ALICE@example.com", "password": "wrong"})

    assert 'autocomplete="username"' in page
    assert 'autocomplete="current-password"' in page
    assert "Please enter a correct email and password. Note that the password is case-sensitive." in (
        response.content.decode()
    )


def test_every_page_starts_with_a_link_past_the_navigation_and_names_its_action_columns(client, owner):
    services.mcp_activate(user=owner)
    services.api_key_create(user=owner, name="agent")
    client.force_login(owner)

    page = client.get(reverse("accounts:account")).content.decode()

    body = page[page.index("<body>") :]
    assert body.startswith('<body>\n<a class="skip" href="#content">Skip to content</a>')
    assert '<main id="content">' in page
    assert "<th>Last used</th><th>Actions</th></tr></thead>" in page


@pytest.mark.parametrize("target", ["foo", "account", "admin:index", "/account/x\r\nX-Injected: 1", "\n/account/"])
def test_a_next_that_is_not_a_url_on_this_site_is_dropped_not_a_server_error(signed_in, target):
    response = signed_in.get(reverse("accounts:signup"), {"next": target})

    assert (response.status_code, response["Location"]) == (302, reverse("accounts:account"))


def test_a_signup_link_never_carries_a_next_with_a_line_break(
    client, db, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            reverse("accounts:signup") + "?next=%2Faccount%2Fx%0D%0AX-Injected%3A+1", {"email": "bob@example.com"}
        )

    [message] = mailoutbox
    assert "next=" not in signup_link(message)
    assert "X-Injected" not in message.body


@pytest.mark.parametrize("target", ["foo", "/account/x\r\nX: 1"])
def test_admin_sign_in_with_a_next_that_is_not_a_url_goes_to_the_admin(client, owner, target):
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    client.force_login(owner)

    response = client.get("/admin/login/", {"next": target})

    assert (response.status_code, response["Location"]) == (302, "/admin/")


SLOW_SECONDS = 3.0  # far above a request's own time on a loaded machine, which once passed 1.9 s cold


class SlowMailServer(locmem.EmailBackend):
    """The outbox behind a mail server that takes seconds to answer, as a distant SMTP server may."""

    def send_messages(self, messages):
        time.sleep(SLOW_SECONDS)
        return super().send_messages(messages)


@pytest.fixture
def slow_mail(settings) -> None:
    settings.MAILERS = {"default": {"BACKEND": "tests.accounts.test_views.SlowMailServer"}}


@pytest.mark.parametrize(
    ("page", "email", "mailed"),
    [
        ("accounts:password-reset", "alice@example.com", "Reset your Leroy password"),
        ("accounts:password-reset", "ghost@example.com", None),
        ("accounts:signup", "alice@example.com", "Your Leroy account"),
        ("accounts:signup", "newbie@example.com", "Your Leroy account"),
    ],
    ids=["reset-account", "reset-no-account", "signup-account", "signup-no-account"],
)
def test_account_mails_are_sent_by_a_task_so_the_request_never_waits_for_the_mail_server(
    client, owner, slow_mail, mailoutbox, django_capture_on_commit_callbacks, page, email, mailed
):
    client.get(reverse(page))  # the process's first request loads what every later one reuses: not timed
    # when the page is posted
    with django_capture_on_commit_callbacks(execute=False) as after_commit:
        started = time.monotonic()
        response = client.post(reverse(page), {"email": email})
        took = time.monotonic() - started

    # then it answered without calling the mail server ...
    assert response.status_code in (200, 302)
    assert took < SLOW_SECONDS
    assert mailoutbox == []
    # ... and the task the request left for after its commit sends the mail, if any
    for callback in after_commit:
        callback()
    assert [(m.to, m.subject) for m in mailoutbox] == ([([email], mailed)] if mailed else [])


def test_a_reset_mail_the_task_sends_carries_a_working_link_to_the_public_origin(
    client, owner, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("accounts:password-reset"), {"email": "ALICE@example.com"})

    [message] = mailoutbox
    [link] = re.findall(r"http://\S+/account/password-reset/\S+", message.body)
    assert link.startswith("http://127.0.0.1:8000/account/password-reset/")
    assert message.from_email == "Leroy <no-reply@leroy.local>"
    assert (
        "Choose a new password" in client.get(link.removeprefix("http://127.0.0.1:8000"), follow=True).content.decode()
    )


def test_with_the_broker_down_an_account_mail_is_sent_by_the_request_rather_than_lost(
    client, db, broker_down, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("accounts:signup"), {"email": "newbie@example.com"})

    assert response.status_code == 200
    assert [m.to for m in mailoutbox] == [["newbie@example.com"]]


def reset_password(user: User, **extra: str):
    """Follow a reset link for `user` in a fresh browser and choose a new password there."""
    browser = Client()
    uid, token = urlsafe_base64_encode(force_bytes(user.pk)), default_token_generator.make_token(user)
    page = browser.get(reverse("accounts:password-reset-confirm", kwargs={"uidb64": uid, "token": token}), follow=True)
    chosen = {"new_password1": "a fresh long passphrase 42", "new_password2": "a fresh long passphrase 42"}
    return browser.post(page.redirect_chain[-1][0], chosen | extra, follow=True)


def test_a_reset_that_asks_for_it_revokes_every_api_key_and_oauth_client(owner, connect, outsider):
    from oauth2_provider.models import AccessToken, RefreshToken

    keys = [services.api_key_create(user=owner, name=f"agent {i}").plaintext for i in range(2)]
    connect()
    kept = services.api_key_create(user=outsider, name="other account").plaintext

    page = reset_password(owner, revoke_credentials="on").content.decode()

    assert "Revoked 2 API key(s) and disconnected every OAuth client." in page
    assert [services.api_key_authenticate(plaintext=key) for key in keys] == [None, None]
    assert ApiKey.objects.filter(user=owner, revoked_at__isnull=True).count() == 0
    assert AccessToken.objects.filter(user=owner).count() == 0
    assert RefreshToken.objects.filter(user=owner, revoked__isnull=True).count() == 0
    assert services.api_key_authenticate(plaintext=kept) is not None


def test_a_reset_that_does_not_ask_keeps_keys_and_clients(owner, connect):
    from oauth2_provider.models import AccessToken, RefreshToken

    key = services.api_key_create(user=owner, name="agent").plaintext
    connect()

    page = reset_password(owner).content.decode()

    assert "Password changed" in page
    assert services.api_key_authenticate(plaintext=key) is not None
    assert AccessToken.objects.filter(user=owner).count() == 1
    assert RefreshToken.objects.filter(user=owner, revoked__isnull=True).count() == 1


def test_a_reset_refused_for_a_weak_password_revokes_nothing(owner, connect):
    from oauth2_provider.models import AccessToken

    key = services.api_key_create(user=owner, name="agent").plaintext
    connect()

    page = reset_password(owner, new_password2="something else", revoke_credentials="on").content.decode()

    assert "Choose a new password" in page
    assert services.api_key_authenticate(plaintext=key) is not None
    assert AccessToken.objects.filter(user=owner).count() == 1


def test_account_mails_are_plain_text_an_address_with_a_quote_is_written_as_typed(
    client, db, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("accounts:signup"), {"email": "o'hara@example.com"})

    [message] = mailoutbox
    assert "create a Leroy account for o'hara@example.com." in message.body
    assert "&#x27;" not in message.body
