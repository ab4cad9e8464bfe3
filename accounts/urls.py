from django.contrib.auth.views import LogoutView
from django.urls import path

from accounts import oauth_views, views

app_name = "accounts"
urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path("login/", views.EmailLoginView.as_view(), name="login"),
    path("logout/", LogoutView.as_view(), name="logout"),
    path("", views.account, name="account"),
    path("mcp/activate/", views.mcp_activate, name="mcp-activate"),
    path("keys/", views.api_key_create, name="api-key-create"),
    path("keys/<int:key_id>/revoke/", views.api_key_revoke, name="api-key-revoke"),
    path("clients/<str:client_id>/disconnect/", oauth_views.client_disconnect, name="oauth-client-disconnect"),
]
