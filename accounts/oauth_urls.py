"""The OAuth routes, under DOT's namespace: its metadata views reverse `oauth2_provider:<name>`.

Only what Leroy serves is mounted: no root protected-resource document (it would advertise a resource that is
not the origin, RFC 9728 §3.3), no introspection, device flow, OIDC or RFC 7592 management.
"""

from django.conf import settings
from django.urls import path

from accounts import oauth_views

app_name = "oauth2_provider"
urlpatterns = [
    path(
        ".well-known/oauth-authorization-server",
        oauth_views.McpServerMetadataView.as_view(),
        name="oauth-server-metadata",
    ),
    path(
        ".well-known/oauth-protected-resource" + settings.LEROY_MCP_PATH,
        oauth_views.McpResourceMetadataView.as_view(),
        name="oauth-resource-metadata",
    ),
    path("oauth/authorize/", oauth_views.McpAuthorizationView.as_view(), name="authorize"),
    path("oauth/token/", oauth_views.McpTokenView.as_view(), name="token"),
    # Clients POST to the metadata's URL, but some drop the slash, and a 301 would turn their POST into a GET.
    path("oauth/token", oauth_views.McpTokenView.as_view(), name="token-no-slash"),
    path("oauth/revoke/", oauth_views.McpRevokeTokenView.as_view(), name="revoke-token"),
    path("oauth/register/", oauth_views.register, name="dcr-register"),
]
