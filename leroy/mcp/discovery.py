"""Domain-level MCP discovery documents (/.well-known/mcp.json and /.well-known/mcp/server-card.json)."""

from importlib.metadata import version

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
