from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest
from oauth2_provider import admin as oauth_admin
from oauth2_provider.models import AccessToken, Grant, RefreshToken

from accounts.models import ApiKey, RedeemedCode, User
from leroy.admin import ReadOnlyAdmin


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    ordering = ["email"]
    list_display = ["email", "is_staff", "is_active", "mcp_activated_at", "date_joined", "closed_at"]
    search_fields = ["email"]
    readonly_fields = ["closed_at"]  # set by the owner's close, never by hand

    def get_readonly_fields(self, request: HttpRequest, obj: User | None = None) -> list[str]:
        # A closed account stays closed: "active" would reopen it (its rules evaluated, its jobs run again).
        closed = obj is not None and obj.closed_at is not None
        return [*self.readonly_fields, *(["is_active"] if closed else [])]

    fieldsets = (
        (None, {"fields": ("email", "password")}),
        ("MCP", {"fields": ("mcp_activated_at",)}),
        ("Permissions", {"fields": ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")}),
        ("Dates", {"fields": ("last_login", "date_joined", "closed_at")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("email", "password1", "password2")}),)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "number", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["scopes"]
    search_fields = ["user__email", "name", "prefix"]
    readonly_fields = ["user", "number", "name", "prefix", "last4", "key_hash", "scopes", "created_at", "last_used_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # keys are issued by the owner (shown once) or by `manage.py issue_api_key`


class _ReadOnlyTokenAdmin:
    """Issued credentials are facts: staff may view and revoke them, never edit them."""

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        opts = self.opts  # type: ignore[attr-defined]
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")


class OAuthAccessTokenAdmin(_ReadOnlyTokenAdmin, oauth_admin.AccessTokenAdmin):
    list_display = ("pk", "user", "application", "scope", "expires", "updated")

    @admin.action(description="Revoke selected access tokens (and their refresh tokens)", permissions=["revoke"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[AccessToken]) -> None:
        super().revoke_tokens(request, queryset)


class OAuthRefreshTokenAdmin(_ReadOnlyTokenAdmin, oauth_admin.RefreshTokenAdmin):
    list_display = ("pk", "user", "application", "token_family", "created", "revoked")
    list_filter = ("application", "revoked")

    @admin.action(description="Revoke selected refresh tokens (and their access tokens)", permissions=["revoke"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[RefreshToken]) -> None:
        super().revoke_tokens(request, queryset)


class OAuthGrantAdmin(_ReadOnlyTokenAdmin, oauth_admin.GrantAdmin):
    pass


# DOT registers its own admins on import; Leroy's read-only ones replace them.
admin.site.unregister([AccessToken, RefreshToken, Grant])
admin.site.register(AccessToken, OAuthAccessTokenAdmin)
admin.site.register(RefreshToken, OAuthRefreshTokenAdmin)
admin.site.register(Grant, OAuthGrantAdmin)


@admin.register(RedeemedCode)
class RedeemedCodeAdmin(ReadOnlyAdmin):
    """Hashes of spent authorization codes, kept until expiry so a replay can revoke what the code issued."""

    list_display = ["code_sha256", "token_family", "expires"]
