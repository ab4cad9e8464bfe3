from django.contrib import admin
from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt

from accounts.views import admin_login
from leroy.api import api, route_not_found
from leroy.mcp.discovery import server_card
from leroy.ops import healthz, metrics_view, readyz
from leroy.views import landing

urlpatterns = [
    path("", landing, name="home"),
    path("account/alerts/", include("alerts.urls")),
    path("account/", include("accounts.urls")),
    path("account/", include("backtests.urls")),
    path("account/", include("evidence.urls")),
    path("admin/login/", admin_login, name="admin-login"),  # before admin's own: the account sign-in's lockout
    path("admin/", admin.site.urls),
    path("", include("billing.urls")),
    path("", include("accounts.oauth_urls")),
    path(".well-known/mcp.json", server_card, name="mcp-json"),
    path(".well-known/mcp/server-card.json", server_card, name="mcp-server-card"),
    path("healthz", healthz, name="healthz"),
    path("", include("evidence.publication.urls")),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    # Any path under /api/v1/ naming no route, the root included (ninja's root view only raises Http404): a JSON
    # 404, whatever the method. The root's pattern comes first, shadowing ninja's, which is kept for its reverse().
    path("api/v1/", csrf_exempt(route_not_found), {"path": ""}),
    path("api/v1/", api.urls),
    re_path(r"^api/v1/(?P<path>.*)$", csrf_exempt(route_not_found)),
]
