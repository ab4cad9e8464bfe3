"""Call a registered tool's handler for an account without the MCP transport, as the REST mirror does."""

from typing import Any

from asgiref.sync import async_to_sync
from pydantic import BaseModel

from accounts.models import User
from leroy.mcp.registry import direct_call, load_tools


def call_tool(user: User, name: str, args: BaseModel) -> Any:
    """The tool's answer (metered like any call), or the DomainError it refuses with."""
    spec = load_tools()[name]
    return async_to_sync(spec.handler)(direct_call(tool=name, user_id=user.pk, client_id="test"), args)
