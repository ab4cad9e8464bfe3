"""The typed REST API (`/api/v1/`): one NinjaAPI, a router per app, the same schemas and services as the MCP tools.

Only the Django session of a signed-in account authenticates here, with CSRF on unsafe methods. API keys and OAuth
access tokens are accepted at /api/mcp alone: a request presenting any Authorization header is refused, even when it
also carries a session.
"""

from typing import Any

from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.errors import HttpError
from ninja.renderers import JSONRenderer
from ninja.security import SessionAuth
from pydantic import BaseModel
from pydantic_core import to_json

BEARER_REFUSED = "API keys and OAuth tokens are accepted only at /api/mcp; sign in to use the REST API."


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    """The same machine-readable refusal an MCP tool returns in band."""

    error: ErrorDetail


ERROR_STATUSES = frozenset({400, 402, 404, 409, 503})


def refuse_bearer(request: HttpRequest) -> None:
    """For public routes (no session needed): a presented credential is still refused, never ignored."""
    if "authorization" in request.headers:
        raise HttpError(401, BEARER_REFUSED)


class AccountSession(SessionAuth):
    """The signed-in account's session cookie; CSRF is checked on unsafe methods by SessionAuth itself."""

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        refuse_bearer(request)
        return super().authenticate(request, key)


class PydanticJSONRenderer(JSONRenderer):
    """Bodies in pydantic's JSON mode, byte for byte what the MCP tools send (Django's encoder would cut datetimes
    to milliseconds), so a REST answer hashes to its receipt as the MCP answer does."""

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> Any:
        return to_json(data, fallback=str)


api = NinjaAPI(
    title="Leroy",
    version="1",
    description="Research-only evidence and backtesting: the REST mirror of Leroy's MCP tools.",
    auth=AccountSession(),
    urls_namespace="api-v1",
    renderer=PydanticJSONRenderer(),
)
api.add_router("/evidence/", "evidence.api.router")
