"""The principal a tool call sees carries the account its API key's authentication already read."""

import pytest

from leroy.mcp import transport
from leroy.mcp.registry import ToolCall, direct_call

pytestmark = pytest.mark.django_db


async def _no_progress(progress, total, message):
    return None


def test_a_key_call_reads_its_account_once_at_authentication(owner, api_key, django_assert_num_queries):
    token = transport._authenticate(api_key)
    principal = transport.principal_of(token)
    call = ToolCall(tool="t", principal=principal, protocol_version=None, report_progress=_no_progress)

    with django_assert_num_queries(0):
        user = call.user()

    assert user.pk == owner.pk
    assert user.email == owner.email


def test_a_principal_without_the_account_reads_it(owner, django_assert_num_queries):
    call = direct_call(tool="t", user_id=owner.pk, client_id="direct")

    with django_assert_num_queries(1):
        assert call.user().pk == owner.pk
