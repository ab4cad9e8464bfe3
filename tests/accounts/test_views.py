import pytest
from django.test import Client
from django.urls import reverse

from accounts import services
from accounts.models import ApiKey, User

PASSWORD = "correct horse battery staple"


@pytest.fixture
def signed_in(client: Client, owner: User) -> Client:
    client.force_login(owner)
    return client


def test_signup_creates_the_account_and_signs_in(client, db):
    response = client.post(reverse("accounts:signup"), {"email": "Bob@Example.com", "password": PASSWORD})

    assert response.status_code == 302
    assert response["Location"] == reverse("accounts:account")
    user = User.objects.get()
    assert user.email == "bob@example.com"
    assert user.mcp_activated_at is None
    assert client.get(reverse("accounts:account")).status_code == 200


def test_signup_with_a_taken_email_creates_nothing(client, owner):
    response = client.post(reverse("accounts:signup"), {"email": "ALICE@example.com", "password": PASSWORD})

    assert response.status_code == 200
    assert "already exists" in response.content.decode()
    assert User.objects.count() == 1


def test_signup_refuses_weak_passwords(client, db):
    response = client.post(reverse("accounts:signup"), {"email": "bob@example.com", "password": "123"})

    assert response.status_code == 200
    assert User.objects.exists() is False


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

    assert response.status_code == 400
    assert "Activate MCP" in response.content.decode()
    assert ApiKey.objects.exists() is False


def test_activation_then_key_shown_once(client, db):
    user = services.user_create(email="bob@example.com", password=PASSWORD)
    client.force_login(user)

    client.post(reverse("accounts:mcp-activate"))
    response = client.post(reverse("accounts:api-key-create"), {"name": "agent", "write": "on"})

    assert response.status_code == 201
    assert response["Cache-Control"] == "no-store"
    page = response.content.decode()
    start = page.index("lr_live_", page.index('id="new-key"'))
    plaintext = page[start : start + 51]
    key_row = ApiKey.objects.get(user=user)
    assert key_row.scope_list == ["mcp:read", "mcp:write"]
    assert services.api_key_authenticate(plaintext=plaintext) == key_row
    assert plaintext not in client.get(reverse("accounts:account")).content.decode()


def test_revoke_takes_effect_immediately(signed_in, owner, api_key):
    key_row = ApiKey.objects.get(user=owner)

    response = signed_in.post(reverse("accounts:api-key-revoke", args=[key_row.pk]))

    assert response.status_code == 302
    assert services.api_key_authenticate(plaintext=api_key) is None


def test_revoke_of_another_accounts_key_changes_nothing(client, owner, outsider, api_key):
    client.force_login(outsider)
    key_row = ApiKey.objects.get(user=owner)

    client.post(reverse("accounts:api-key-revoke", args=[key_row.pk]))

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
