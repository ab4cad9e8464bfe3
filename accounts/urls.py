from django.contrib.auth.views import LogoutView
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.generic import TemplateView

from accounts import oauth_views, views

app_name = "accounts"
urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path("signup/confirm/<uidb64>/<token>/", views.SignupConfirmView.as_view(), name="signup-confirm"),
    path("login/", views.EmailLoginView.as_view(), name="login"),
    path("logout/", LogoutView.as_view(), name="logout"),
    path("password-reset/", never_cache(views.PasswordResetView.as_view()), name="password-reset"),
    path(
        "password-reset/sent/",
        never_cache(TemplateView.as_view(template_name="accounts/password_reset_sent.html")),
        name="password-reset-done",
    ),
    path(
        "password-reset/<uidb64>/<token>/",
        never_cache(views.PasswordResetConfirmView.as_view()),
        name="password-reset-confirm",
    ),
    path(
        "password-reset/complete/",
        never_cache(TemplateView.as_view(template_name="accounts/password_reset_complete.html")),
        name="password-reset-complete",
    ),
    path("password/", views.PasswordChangeView.as_view(), name="password-change"),
    path("email/", views.email_change, name="email-change"),
    path("email/confirm/<str:token>/", views.EmailChangeConfirmView.as_view(), name="email-confirm"),
    path("", views.account, name="account"),
    path("clients/", views.clients, name="clients"),
    path("mcp/activate/", views.mcp_activate, name="mcp-activate"),
    path("keys/", views.api_key_create, name="api-key-create"),
    path("keys/<int:number>/revoke/", views.api_key_revoke, name="api-key-revoke"),
    path("clients/<str:client_id>/disconnect/", oauth_views.client_disconnect, name="oauth-client-disconnect"),
]
