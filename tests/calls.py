"""Call a registered tool's handler for an account without the MCP transport, as the REST mirror does."""

from typing import Any

from pydantic import BaseModel

from accounts.models import User
from leroy.mcp.registry import call_for


def call_tool(user: User, name: str, args: BaseModel) -> Any:
    """The tool's answer (metered like any call), or the DomainError it refuses with."""
    return call_for(user_id=user.pk, tool=name, args=args)
