from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from accounts import services
from accounts.models import ApiKey, User


def run(*args: str) -> str:
    out = StringIO()
    call_command("issue_api_key", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_create_user_activates_mcp_and_prints_the_key_last(db):
    key = run("ops@example.com", "--create-user").strip().splitlines()[-1]

    user = User.objects.get(email="ops@example.com")
    assert user.mcp_activated_at is not None
    assert services.api_key_authenticate(plaintext=key).user == user
    assert ApiKey.objects.get(user=user).scopes == "mcp:read"


def test_write_flag_adds_write_scope(owner):
    key = run("alice@example.com", "--write").strip().splitlines()[-1]

    assert services.api_key_authenticate(plaintext=key).scope_list == ["mcp:read", "mcp:write"]


def test_unknown_user_without_create_flag_creates_nothing(db):
    with pytest.raises(CommandError):
        run("ghost@example.com")

    assert User.objects.exists() is False
    assert ApiKey.objects.exists() is False
