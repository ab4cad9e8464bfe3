"""OAuth 2.1 for /api/mcp: django-oauth-toolkit (stock models) plus the policy Leroy needs on top of it.

DOT issues, rotates and stores the tokens (as SHA-256 checksums only). This module adds what stock DOT lacks
(notes/oauth.md §2): exact RFC 8707 binding to `<origin>/api/mcp` (G1), a strict public-client registration
(G2), S256 only (G9), code replay revoking what the code issued (G4), refresh tokens dying 30 days after their
own issue (G7), disconnecting a client (G10), and the resource-server check the MCP transport calls.
Authorization codes are stored as SHA-256 hashes too (`Grant.code` holds the hash).
"""

import hashlib
import re
import unicodedata
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from confusable_homoglyphs import confusables
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.urls import reverse
from mcp.server.auth.provider import AccessToken as McpAccessToken
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauthlib.common import Request as OAuthlibRequest
from oauthlib.oauth2.rfc6749 import errors

from accounts.models import SCOPE_READ, SCOPE_WRITE, RedeemedCode, User
from accounts.services import AccountError
from leroy.clock import wall

CODE_CHALLENGE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # BASE64URL(SHA-256) without padding
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
REFRESH_TOKEN_LIFETIME = timedelta(days=30)
REDEEMED_CODE_KEPT = timedelta(hours=1)
LAST_USED_GRANULARITY = timedelta(seconds=60)
MAX_REDIRECT_URIS = 5
MAX_URI_LENGTH = 2000
MAX_CLIENT_NAME = 100
REGISTRABLE_GRANT_TYPES = frozenset({"authorization_code", "refresh_token"})


def mcp_resource() -> str:
    """The one resource every Leroy token is bound to (RFC 8707), e.g. https://leroy.example/api/mcp."""
    return settings.LEROY_PUBLIC_ORIGIN + settings.LEROY_MCP_PATH


def resource_metadata_url() -> str:
    """The RFC 9728 document for /api/mcp, named in every 401 challenge."""
    return settings.LEROY_PUBLIC_ORIGIN + reverse("oauth2_provider:oauth-resource-metadata")


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def canonical_uri(uri: str) -> str | None:
    """Scheme and host lower-cased and the default port dropped; None for anything but a plain http(s) URL."""
    if any(ch.isspace() for ch in uri) or "?" in uri or "#" in uri:
        return None
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in {"http", "https"} or not parts.hostname or "@" in parts.netloc:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host if port in (None, {"http": 80, "https": 443}[parts.scheme]) else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}{parts.path}"


def is_mcp_resource(values: list[str]) -> bool:
    """Exactly one resource, and it is ours: no parent, no trailing slash, no second audience."""
    return len(values) == 1 and canonical_uri(values[0]) == canonical_uri(mcp_resource())


def _latin_skeleton(text: str) -> str:
    """Each character replaced by its Latin look-alike (Unicode TR39 confusables), so `L\u0435roy` (Cyrillic
    \u0435) reads as `leroy`."""
    out = []
    for ch in unicodedata.normalize("NFKC", text):
        found = [] if ch.isascii() else confusables.is_confusable(ch, preferred_aliases=["latin"], greedy=True)
        homoglyphs = found[0]["homoglyphs"] if isinstance(found, list) and found else []
        glyphs = [g["c"] for g in homoglyphs if g["c"].isascii()]
        out.append(glyphs[0] if glyphs else ch)
    return "".join(out).casefold()


def imitates_leroy(name: str) -> bool:
    """A client calling itself Leroy, or a look-alike of it, is flagged on the consent page: Leroy never asks
    through a client."""
    return "leroy" in _latin_skeleton(name)


def invalid_target(request: OAuthlibRequest | None = None, state: str | None = None) -> errors.CustomOAuth2Error:
    return errors.CustomOAuth2Error(
        "invalid_target",
        description=f"The only resource this server issues tokens for is {mcp_resource()}.",
        request=request,
        state=state,
    )


class LeroyValidator(OAuth2Validator):
    """DOT's validator with Leroy's resource, PKCE, replay and lifetime rules."""

    def _create_authorization_code(
        self, request: OAuthlibRequest, code: dict[str, str], expires: datetime | None = None
    ) -> Grant:
        # Checked again here, not only before consent: the consent form's hidden fields can be tampered with.
        if request.code_challenge_method != "S256" or not CODE_CHALLENGE.match(request.code_challenge or ""):
            raise errors.InvalidRequestError(description="PKCE with code_challenge_method=S256 is required.")
        if not is_mcp_resource(list(getattr(request, "resource", None) or [])):
            raise invalid_target(request)
        request.resource = [mcp_resource()]
        # Only the code's hash is stored; the token endpoint hashes the presented code before DOT looks it up.
        return super()._create_authorization_code(request, {**code, "code": sha256_hex(code["code"])}, expires)

    def _check_and_set_request_resource(self, request: OAuthlibRequest) -> None:
        # DOT inherits or narrows the grant's resource; Leroy then demands exactly its own (code and refresh).
        super()._check_and_set_request_resource(request)
        if request.resource != [mcp_resource()]:
            raise invalid_target(request)

    def _create_refresh_token(
        self,
        request: OAuthlibRequest,
        refresh_token_code: str,
        access_token: AccessToken,
        previous_refresh_token: RefreshToken | None,
    ) -> RefreshToken:
        refresh_token = super()._create_refresh_token(request, refresh_token_code, access_token, previous_refresh_token)
        if request.grant_type == "authorization_code":
            # Remember which family this code started, so a replay of the code can revoke it.
            RedeemedCode.objects.create(
                code_sha256=request.code,  # already hashed by the token endpoint
                token_family=refresh_token.token_family,
                expires=wall() + REDEEMED_CODE_KEPT,
            )
        return refresh_token

    def validate_code(self, client_id: str, code: str, client: Application, request: OAuthlibRequest) -> bool:
        if super().validate_code(client_id, code, client, request):
            return True
        # A code presented twice was probably intercepted: revoke what its first redemption issued.
        redeemed = RedeemedCode.objects.filter(code_sha256=code, expires__gt=wall()).first()
        if redeemed is not None:
            RefreshToken.revoke_family(redeemed.token_family)
        return False

    def validate_refresh_token(
        self, refresh_token: str, client: Application, request: OAuthlibRequest, *args: Any, **kwargs: Any
    ) -> bool:
        if not super().validate_refresh_token(refresh_token, client, request, *args, **kwargs):
            return False
        instance: RefreshToken = request.refresh_token_instance
        # DOT measures the 30 days from the access token's expiry; Leroy's contract is 30 days from issue.
        return instance.created + REFRESH_TOKEN_LIFETIME > wall() and instance.user.is_active


def access_token_authenticate(*, raw: str) -> McpAccessToken | None:
    """The MCP principal for a live OAuth access token bound to /api/mcp, else None."""
    if not raw or len(raw) > 255:
        return None
    token = AccessToken.objects.select_related("application", "user").filter(token_checksum=sha256_hex(raw)).first()
    if token is None or token.user is None or token.application is None or not token.user.is_active:
        return None
    moment = wall()
    if token.expires <= moment or token.resource != [mcp_resource()]:
        return None
    scopes = [scope for scope in (SCOPE_READ, SCOPE_WRITE) if scope in token.scope.split()]
    if SCOPE_READ not in scopes:
        return None
    if moment - token.updated >= LAST_USED_GRANULARITY:
        # `updated` doubles as "last used" for the connected-clients list; written at most once a minute.
        AccessToken.objects.filter(pk=token.pk).update(updated=moment)
    return McpAccessToken(
        token=raw,
        client_id=f"oauth:{token.application.client_id}",
        subject=str(token.user_id),
        scopes=scopes,
        expires_at=int(token.expires.timestamp()),
        resource=mcp_resource(),
    )


class RegistrationError(Exception):
    """RFC 7591 §3.2.2 error: `code` is invalid_redirect_uri or invalid_client_metadata."""

    def __init__(self, code: str, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.description = description


@dataclass(frozen=True)
class RegisteredClient:
    application: Application
    metadata: dict[str, Any]  # the RFC 7591 response body


def _redirect_uri_problem(uri: object) -> str | None:
    if not isinstance(uri, str) or not uri:
        return "redirect_uris must be non-empty strings"
    if len(uri) > MAX_URI_LENGTH:
        return f"a redirect URI may be at most {MAX_URI_LENGTH} characters"
    if any(ch.isspace() or unicodedata.category(ch)[0] == "C" for ch in uri):
        return "a redirect URI may not contain whitespace or control characters"
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return f"{uri!r} is not a valid URL"
    if "#" in uri:
        return "a redirect URI may not contain a fragment"
    if "@" in parts.netloc:
        return "a redirect URI may not contain user information"
    if "*" in uri:
        return "a redirect URI may not contain a wildcard; register each exact URI"
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS:
        return None
    return "redirect URIs must use https, or http only to 127.0.0.1, [::1] or localhost"


def _client_name(raw: object) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise RegistrationError("invalid_client_metadata", "client_name must be a string")
    # Control, format (bidi overrides, zero-width) and private-use characters are dropped before display.
    cleaned = "".join(ch for ch in unicodedata.normalize("NFKC", raw) if unicodedata.category(ch)[0] != "C")
    name = " ".join(cleaned.split())
    if len(name) > MAX_CLIENT_NAME:
        raise RegistrationError("invalid_client_metadata", f"client_name may be at most {MAX_CLIENT_NAME} characters")
    return name


def _string_list(metadata: dict[str, Any], key: str, default: list[str]) -> list[str]:
    value = metadata.get(key, default)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise RegistrationError("invalid_client_metadata", f"{key} must be a list of strings")
    return value


@transaction.atomic
def oauth_client_register(*, metadata: object) -> RegisteredClient:
    """Register a public client (RFC 7591). Whatever authentication method is asked for, the client is public."""
    if not isinstance(metadata, dict):
        raise RegistrationError("invalid_client_metadata", "The registration request must be a JSON object")
    redirect_uris = metadata.get("redirect_uris")
    if not isinstance(redirect_uris, list) or not 1 <= len(redirect_uris) <= MAX_REDIRECT_URIS:
        raise RegistrationError("invalid_redirect_uri", f"redirect_uris must list 1 to {MAX_REDIRECT_URIS} URIs")
    for uri in redirect_uris:
        problem = _redirect_uri_problem(uri)
        if problem:
            raise RegistrationError("invalid_redirect_uri", problem)
    grant_types = _string_list(metadata, "grant_types", ["authorization_code"])
    if "authorization_code" not in grant_types or not set(grant_types) <= REGISTRABLE_GRANT_TYPES:
        raise RegistrationError(
            "invalid_client_metadata", "grant_types must be authorization_code, optionally with refresh_token"
        )
    if _string_list(metadata, "response_types", ["code"]) != ["code"]:
        raise RegistrationError("invalid_client_metadata", 'response_types must be ["code"]')
    scope = metadata.get("scope", SCOPE_READ)
    if not isinstance(scope, str) or not scope.split() or not set(scope.split()) <= set(settings.LEROY_OAUTH_SCOPES):
        raise RegistrationError("invalid_client_metadata", "scope may only name mcp:read and mcp:write")
    name = _client_name(metadata.get("client_name"))

    application = Application.objects.create(
        name=name,
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(redirect_uris),
        client_secret="",
        hash_client_secret=False,
        skip_authorization=False,
        registration_source=Application.RegistrationSource.DCR,
    )
    response: dict[str, Any] = {
        "client_id": application.client_id,
        "client_id_issued_at": int(application.created.timestamp()),
        "redirect_uris": redirect_uris,
        # What the client can use, which RFC 7591 §3.2.1 lets a server put in place of what was asked: every
        # client gets refresh tokens, and any scope its user grants on the consent page (MCP clients register with
        # the first challenge's mcp:read and step up to mcp:write on the same registration). Echoing a narrower
        # request would state a limit the token endpoint does not keep.
        "grant_types": sorted(REGISTRABLE_GRANT_TYPES, key=["authorization_code", "refresh_token"].index),
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "scope": f"{SCOPE_READ} {SCOPE_WRITE}",
    }
    if name:
        response["client_name"] = name
    return RegisteredClient(application=application, metadata=response)


def oauth_clients_collect_garbage() -> int:
    """Delete registrations that hold nothing after the grace period, and expired replay records."""
    cutoff = wall() - timedelta(hours=settings.LEROY_OAUTH_UNUSED_CLIENT_HOURS)
    RedeemedCode.objects.filter(expires__lte=wall()).delete()
    stale = Application.objects.filter(registration_source=Application.RegistrationSource.DCR, created__lt=cutoff)
    for model in (AccessToken, RefreshToken, Grant):
        stale = stale.filter(~Exists(model.objects.filter(application=OuterRef("pk"))))
    deleted, _ = stale.delete()
    return deleted


@transaction.atomic
def oauth_client_disconnect(*, user: User, client_id: str) -> Application:
    """Revoke every token family, access token and pending code `client_id` holds for `user`, at once. A client
    holding none for `user` (unknown, another account's, or disconnected already) is refused as not_found, in the
    same words whether or not it exists."""
    application = Application.objects.filter(client_id=client_id).first()
    if application is None or not (
        RefreshToken.objects.filter(user=user, application=application, revoked__isnull=True).exists()
        or AccessToken.objects.filter(user=user, application=application).exists()
        or Grant.objects.filter(user=user, application=application).exists()
    ):
        raise AccountError("not_found", "No such connected client.")
    _tokens_revoke(user, {"application": application})
    return application


@transaction.atomic
def oauth_clients_disconnect_all(*, user: User) -> None:
    """Disconnect every client of `user` (a password reset that ends every credential)."""
    _tokens_revoke(user, {})


def _tokens_revoke(user: User, where: dict[str, Any]) -> None:
    families: set[uuid.UUID] = set(
        RefreshToken.objects.filter(user=user, token_family__isnull=False, **where)
        .values_list("token_family", flat=True)
        .distinct()
    )
    for family in families:
        RefreshToken.revoke_family(family)
    RefreshToken.objects.filter(user=user, revoked__isnull=True, **where).update(revoked=wall())
    AccessToken.objects.filter(user=user, **where).delete()
    Grant.objects.filter(user=user, **where).delete()


@dataclass(frozen=True)
class ConnectedClient:
    client_id: str
    name: str
    redirect_host: str
    scopes: list[str]
    last_used_at: datetime  # the last MCP call or token refresh
    connected_at: datetime  # when the user consented to the grant still in use


def oauth_connected_clients(*, user: User) -> list[ConnectedClient]:
    """Every client holding a live access or refresh token for `user`, most recently used first."""
    moment = wall()
    access = AccessToken.objects.filter(user=user, application__isnull=False)
    refresh = RefreshToken.objects.filter(user=user, revoked__isnull=True, created__gt=moment - REFRESH_TOKEN_LIFETIME)
    live_ids = set(access.filter(expires__gt=moment).values_list("application_id", flat=True))
    live_ids |= set(refresh.values_list("application_id", flat=True))
    clients = []
    for application in Application.objects.filter(pk__in=live_ids):
        tokens = list(access.filter(application=application).values("scope", "updated", "created"))
        issued = list(refresh.filter(application=application).values_list("created", flat=True))
        families = refresh.filter(application=application).values_list("token_family", flat=True)
        # Rotation replaces refresh tokens; the family's first token dates the consent.
        first = RefreshToken.objects.filter(user=user, token_family__in=families).values_list("created", flat=True)
        scopes = {scope for token in tokens for scope in token["scope"].split()}
        clients.append(
            ConnectedClient(
                client_id=application.client_id,
                name=application.name,
                redirect_host=urlsplit(application.redirect_uris.split()[0]).hostname or "",
                scopes=[scope for scope in (SCOPE_READ, SCOPE_WRITE) if scope in scopes],
                last_used_at=max([token["updated"] for token in tokens] + issued),
                connected_at=min([*first, *(token["created"] for token in tokens)]),
            )
        )
    return sorted(clients, key=lambda client: client.last_used_at, reverse=True)
