"""Tools registered only by the test settings, to exercise the transport without product tools."""

from pydantic import BaseModel, Field

from accounts.models import User
from leroy.mcp.registry import ToolCall, ToolFailure, tool
from leroy.schemas import ToolArgs


class EchoArgs(ToolArgs):
    text: str = Field(min_length=1, max_length=200, description="Text to echo back")


class EchoOut(BaseModel):
    text: str
    protocol_version: str | None


@tool(
    name="probe_echo", title="Echo", args=EchoArgs, output=EchoOut, access="public", scope="mcp:read", metering="free"
)
async def probe_echo(call: ToolCall, args: EchoArgs) -> EchoOut:
    """Echo the text (public)."""
    if args.text == "fail":
        raise ToolFailure("probe_failed", "The probe was asked to fail.", hint="send other text")
    return EchoOut(text=args.text, protocol_version=call.protocol_version)


class NoArgs(ToolArgs):
    pass


class WhoAmIOut(BaseModel):
    email: str
    client_id: str
    scopes: list[str]


@tool(
    name="probe_whoami",
    title="Who am I",
    args=NoArgs,
    output=WhoAmIOut,
    access="subscriber",
    scope="mcp:read",
    metering="free",
)
async def probe_whoami(call: ToolCall, args: NoArgs) -> WhoAmIOut:
    """The calling account (subscriber)."""
    assert call.principal is not None
    user = await User.objects.aget(pk=call.principal.user_id)
    return WhoAmIOut(email=user.email, client_id=call.principal.client_id, scopes=sorted(call.principal.scopes))


@tool(
    name="probe_write",
    title="Write probe",
    args=NoArgs,
    output=WhoAmIOut,
    access="subscriber",
    scope="mcp:write",
    metering="free",
    read_only=False,
)
async def probe_write(call: ToolCall, args: NoArgs) -> WhoAmIOut:
    """Needs mcp:write."""
    return await probe_whoami(call, args)
