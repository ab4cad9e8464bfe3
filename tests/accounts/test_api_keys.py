import threading
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.conf import settings
from django.db import connection
from django.urls import reverse

from accounts import services
from accounts.models import ApiKey, User
from tests.migrating import migrate_forward, model_before


def test_key_has_prefix_and_32_random_bytes(owner):
    issued = services.api_key_create(user=owner, name="agent")

    assert issued.plaintext.startswith("lr_live_")
    assert len(issued.plaintext) == len("lr_live_") + 43  # token_urlsafe(32)
    assert issued.api_key.scopes == "mcp:read"


def test_write_scope_only_when_asked(owner):
    issued = services.api_key_create(user=owner, name="agent", write=True)

    assert issued.api_key.scope_list == ["mcp:read", "mcp:write"]


def test_keys_cannot_be_created_before_mcp_is_activated(db):
    user = services.user_create(email="new@example.com", password="x-very-long-password")

    with pytest.raises(services.AccountError) as error:
        services.api_key_create(user=user, name="agent")

    assert error.value.code == "mcp_not_activated"
    assert ApiKey.objects.exists() is False


def test_eleventh_active_key_is_refused_and_nothing_is_created(owner):
    for index in range(10):
        services.api_key_create(user=owner, name=f"k{index}")

    with pytest.raises(services.AccountError) as error:
        services.api_key_create(user=owner, name="k10")

    assert error.value.code == "too_many_keys"
    assert ApiKey.objects.filter(user=owner).count() == 10


def test_revoked_keys_free_a_slot(owner):
    issued = [services.api_key_create(user=owner, name=f"k{index}") for index in range(10)]
    services.api_key_revoke(user=owner, number=issued[0].api_key.number)

    services.api_key_create(user=owner, name="replacement")

    assert ApiKey.objects.filter(user=owner, revoked_at__isnull=True).count() == 10


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(settings.LEROY_TEST_DATABASE != "PostgreSQL", reason="row-lock race needs PostgreSQL")
def test_concurrent_creations_never_exceed_ten_active_keys():
    owner = services.user_create(email="racer@example.com", password="x-very-long-password")
    services.mcp_activate(user=owner)
    barrier = threading.Barrier(14)
    outcomes: list[str] = []

    def create(index: int) -> None:
        barrier.wait()
        try:
            services.api_key_create(user=owner, name=f"k{index}")
            outcomes.append("created")
        except services.AccountError as error:
            outcomes.append(error.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(index,)) for index in range(14)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["created"] * 10 + ["too_many_keys"] * 4
    assert ApiKey.objects.filter(user=owner, revoked_at__isnull=True).count() == 10


def test_authenticate_returns_the_matching_active_key(owner, api_key):
    assert services.api_key_authenticate(plaintext=api_key).user == owner


def test_authenticate_refuses_unknown_revoked_and_inactive(owner, api_key):
    key_row = ApiKey.objects.get(user=owner)
    tampered = api_key[:-1] + ("A" if api_key[-1] != "A" else "B")

    assert services.api_key_authenticate(plaintext=tampered) is None
    assert services.api_key_authenticate(plaintext="lr_live_") is None
    services.api_key_revoke(user=owner, number=key_row.number)
    assert services.api_key_authenticate(plaintext=api_key) is None


def test_authenticate_refuses_keys_of_deactivated_users(owner, api_key):
    User.objects.filter(pk=owner.pk).update(is_active=False)

    assert services.api_key_authenticate(plaintext=api_key) is None


def test_revoking_another_accounts_key_is_refused_and_changes_nothing(owner, outsider, api_key):
    key_row = ApiKey.objects.get(user=owner)

    with pytest.raises(services.AccountError) as error:
        services.api_key_revoke(user=outsider, number=key_row.number)

    assert error.value.code == "not_found"
    assert ApiKey.objects.get(pk=key_row.pk).revoked_at is None


def test_revoking_a_revoked_key_is_refused_and_keeps_when_it_was_revoked(owner, api_key):
    key_row = ApiKey.objects.get(user=owner)
    with time_machine.travel(datetime(2026, 8, 1, 12, tzinfo=UTC), tick=False):
        services.api_key_revoke(user=owner, number=key_row.number)

    with pytest.raises(services.AccountError) as error:
        services.api_key_revoke(user=owner, number=key_row.number)

    assert (error.value.code, error.value.message) == ("already_revoked", "agent was already revoked.")
    assert ApiKey.objects.get(pk=key_row.pk).revoked_at == datetime(2026, 8, 1, 12, tzinfo=UTC)


def test_last_used_at_is_written_at_most_once_a_minute(owner, api_key):
    start = datetime(2026, 8, 3, 14, 0, tzinfo=UTC)
    with time_machine.travel(start, tick=False):
        services.api_key_authenticate(plaintext=api_key)
    with time_machine.travel(start + timedelta(seconds=59), tick=False):
        services.api_key_authenticate(plaintext=api_key)
    assert ApiKey.objects.get(user=owner).last_used_at == start
    with time_machine.travel(start + timedelta(seconds=60), tick=False):
        services.api_key_authenticate(plaintext=api_key)
    assert ApiKey.objects.get(user=owner).last_used_at == start + timedelta(seconds=60)


def test_each_account_numbers_its_own_keys_and_a_number_revokes_only_the_callers_key(owner, outsider):
    # The table's own ids counted every account's keys, and the account page's revoke links showed them.
    services.mcp_activate(user=outsider)
    first, second = services.api_key_create(user=owner, name="a"), services.api_key_create(user=owner, name="b")
    theirs = services.api_key_create(user=outsider, name="c")

    with pytest.raises(services.AccountError) as error:
        services.api_key_revoke(user=outsider, number=2)
    services.api_key_revoke(user=outsider, number=1)

    assert [first.api_key.number, second.api_key.number, theirs.api_key.number] == [1, 2, 1]
    assert error.value.code == "not_found"
    assert list(ApiKey.objects.filter(user=owner).values_list("revoked_at", flat=True)) == [None, None]
    assert ApiKey.objects.get(pk=theirs.api_key.pk).revoked_at is not None


@pytest.mark.django_db(transaction=True)
def test_migrating_numbers_each_accounts_existing_keys_from_one_in_the_order_they_were_made(owner, outsider):
    old = model_before(("accounts", "0003_apikey_last4"), "ApiKey")
    made = [
        old.objects.create(user_id=user.pk, name=name, prefix=name, key_hash=name * 64, scopes="mcp:read").pk
        for user, name in [(owner, "a"), (outsider, "b"), (owner, "c"), (owner, "d"), (outsider, "e")]
    ]
    migrate_forward(("accounts", "0004_apikey_numbers"))

    numbered = ApiKey.objects.filter(pk__in=made).order_by("pk").values_list("name", "number")
    assert list(numbered) == [("a", 1), ("b", 1), ("c", 2), ("d", 3), ("e", 2)]


def test_the_admin_shows_a_keys_number_but_cannot_change_it(client, owner, api_key):
    client.force_login(User.objects.create_superuser(email="admin@example.com", password="x-long-password"))
    key_row = ApiKey.objects.get(user=owner)

    response = client.post(
        reverse("admin:accounts_apikey_change", args=[key_row.pk]),
        {"number": 7, "revoked_at_0": "", "revoked_at_1": ""},
    )

    assert response.status_code == 302
    assert ApiKey.objects.get(pk=key_row.pk).number == 1
