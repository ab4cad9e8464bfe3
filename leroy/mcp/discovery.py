"""MCP discovery documents: /.well-known/mcp.json and /.well-known/mcp/server-card.json, and the MCP registry's
server.json (`manage.py server_json`)."""

from importlib.metadata import version
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from accounts import oauth
from leroy.mcp.registry import load_tools
from leroy.mcp.server import INSTRUCTIONS


@require_GET
def server_card(request: HttpRequest) -> JsonResponse:
    origin = settings.LEROY_PUBLIC_ORIGIN
    tools = [
        {
            "name": spec.name,
            "title": spec.title,
            "access": spec.access,
            "scope": spec.scope,
            "metering": spec.metering,
        }
        for spec in sorted(load_tools().values(), key=lambda s: s.name)
    ]
    card = {
        "name": "leroy",
        "title": "Leroy",
        "version": version("leroy"),
        "description": INSTRUCTIONS,
        "websiteUrl": origin,
        "endpoint": origin + settings.LEROY_MCP_PATH,
        "transport": {"type": "streamable-http", "stateless": True},
        "protocolVersions": ["2025-11-25", "2026-07-28"],
        "authentication": {
            "schemes": ["bearer"],
            "oauth": {
                "protected_resource_metadata": oauth.resource_metadata_url(),
                "authorization_server_metadata": origin + "/.well-known/oauth-authorization-server",
                "scopes": sorted(settings.LEROY_OAUTH_SCOPES),
            },
            "api_key": {
                "header": "Authorization: Bearer lr_live_...",
                "obtain_at": origin + reverse("accounts:account"),
            },
            "anonymous": "public tools only",
        },
        "rateLimits": {
            "per_credential_per_minute": settings.LEROY_RATE_LIMIT_PRINCIPAL_PER_MINUTE,
            "anonymous_per_address_per_minute": settings.LEROY_RATE_LIMIT_ANONYMOUS_PER_MINUTE,
        },
        "tools": tools,
        "researchBoundary": {"broker_write_authority": "none", "paper_trading": False, "live_order": False},
    }
    response = JsonResponse(card)
    response["Access-Control-Allow-Origin"] = "*"  # a public document; no credentials are involved
    return response


REGISTRY_SCHEMA = "https://static.modelcontextprotocol.io/schemas/2025-09-29/server.schema.json"
REGISTRY_DESCRIPTION = "Research-only market evidence and Backtrader backtests for trading agents; never places orders."


def registry_name(origin: str) -> str:
    """The registry's reverse-DNS name for this deployment: leroy.example.com serves com.example.leroy/leroy."""
    host = urlsplit(origin).hostname or "localhost"
    return ".".join(reversed(host.split("."))) + "/leroy"


def server_json() -> dict[str, Any]:
    """This deployment's entry for the MCP registry: one streamable-http remote with its authorization header
    (an OAuth access token, which clients obtain from the 401 challenge, or an API key from the account page)."""
    origin = settings.LEROY_PUBLIC_ORIGIN
    return {
        "$schema": REGISTRY_SCHEMA,
        "name": registry_name(origin),
        "description": REGISTRY_DESCRIPTION,
        "version": version("leroy"),
        "websiteUrl": origin + "/",
        "remotes": [
            {
                "type": "streamable-http",
                "url": origin + settings.LEROY_MCP_PATH,
                "headers": [
                    {
                        "name": "Authorization",
                        "description": (
                            "Optional for public tools. 'Bearer <OAuth access token>' (discovered from the 401 "
                            f"challenge at {oauth.resource_metadata_url()}) or 'Bearer lr_live_...', an API key "
                            f"created at {origin + reverse('accounts:account')}."
                        ),
                        "isRequired": False,
                        "isSecret": True,
                        "placeholder": "Bearer lr_live_...",  # server.json's field: the hint an empty input shows
                    }
                ],
            }
        ],
    }
