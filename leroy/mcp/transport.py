"""The HTTP edge in front of the MCP SDK: CORS, method gate, bearer auth, rate limits and tool access.

Django middleware does not run on /api/mcp (it is dispatched in asgi.py), so everything a browser agent or an
unauthenticated caller needs answered at the HTTP level is answered here, before the SDK sees the request.
"""

import contextvars
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError
from django.urls import reverse
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.types import Prompt
from pydantic import PrivateAttr
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from accounts import oauth
from accounts import services as account_services
from billing import selectors as billing_selectors
from leroy import charged, metrics
from leroy.errors import DATABASE_RETRY_AFTER, DomainError, database_unavailable
from leroy.mcp import calllog
from leroy.mcp.registry import REGISTRY, Principal, ToolSpec
from leroy.ratelimit import rate_limit_retry_after
from leroy.schemas import TOO_DEEP, NestedTooDeep, arguments_refused, json_loads, repeated_names

logger = logging.getLogger(__name__)

ALLOWED_HEADERS = "Authorization, Content-Type, Accept, MCP-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID"
EXPOSED_HEADERS = "WWW-Authenticate, Retry-After, MCP-Protocol-Version, Mcp-Session-Id, X-Request-Id"
PROTOCOL_VERSIONS = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}
MODERN = "2026-07-28"


def bearer_challenge(*, error: str | None = None, description: str | None = None, scope: str = "mcp:read") -> str:
    """A `WWW-Authenticate` value for /api/mcp; `resource_metadata` is where OAuth clients start (RFC 9728)."""
    parts = ['Bearer realm="leroy"']
    if error:
        parts.append(f'error="{error}"')
    if description:
        parts.append(f'error_description="{description}"')
    parts.append(f'resource_metadata="{oauth.resource_metadata_url()}"')
    parts.append(f'scope="{scope}"')
    return ", ".join(parts)


def subscription_required(spec: ToolSpec) -> tuple[dict[str, Any], str]:
    """The structured payload and challenge for an anonymous call of a subscriber tool (reads the plans: sync)."""
    origin = settings.LEROY_PUBLIC_ORIGIN
    challenge = bearer_challenge(description=f"{spec.name} requires a Leroy API key or OAuth access token")
    payload = {
        "error": {
            "code": "subscription_required",
            "message": (
                f"{spec.name} needs a Leroy account. Connect with OAuth (your client discovers it from this "
                "challenge), or sign up, activate MCP on the account page and send "
                "'Authorization: Bearer lr_live_...' with each request."
            ),
            "tool": spec.name,
            "sign_up_url": origin + reverse("accounts:signup"),
            "account_url": origin + reverse("accounts:account"),
            "pricing": billing_selectors.plan_pricing(),
            "free_alternatives": sorted(s.name for s in REGISTRY.values() if s.access == "public"),
        }
    }
    return payload, challenge


def insufficient_scope(spec: ToolSpec) -> tuple[dict[str, Any], str]:
    description = f"{spec.name} requires the {spec.scope} scope"
    challenge = bearer_challenge(error="insufficient_scope", description=description, scope="mcp:read mcp:write")
    payload = {
        "error": {
            "code": "insufficient_scope",
            "message": f"{description}; create a key with mcp:write on the account page or re-authorize.",
            "tool": spec.name,
            "required_scope": spec.scope,
        }
    }
    return payload, challenge


def error_result(payload: dict[str, Any], challenge: str | None = None) -> dict[str, Any]:
    """A CallToolResult dict with `isError` carrying a structured payload (and the client challenge)."""
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": payload["error"]["message"]}],
        "structuredContent": payload,
        "isError": True,
    }
    if challenge:
        result["_meta"] = {"mcp/www_authenticate": [challenge]}
    return result


class KeyAccessToken(AccessToken):
    """An API key's token, carrying the account its authentication read (active), so a tool call does not read it
    again."""

    _account: Any = PrivateAttr(default=None)


def principal_of(token: AccessToken | None) -> Principal | None:
    if token is None or token.subject is None:
        return None
    account = token._account if isinstance(token, KeyAccessToken) else None
    if account is not None and str(account.pk) != token.subject:
        account = None
    raw = token.token
    return Principal(
        user_id=int(token.subject),
        client_id=token.client_id,
        scopes=frozenset(token.scopes),
        account=account,
        authenticates=lambda: (again := _authenticate(raw)) is not None and again.subject == token.subject,
    )


# The request's MCP-Protocol-Version header, for the handlers whose answer differs by era (set for every request).
PROTOCOL_VERSION: contextvars.ContextVar[str | None] = contextvars.ContextVar("leroy_mcp_protocol", default=None)
# A prompt's (required, accepted) argument names.
PromptArguments = tuple[frozenset[str], frozenset[str]]
# Counted against the caller's per-minute limit: a tool call, and a resource read or prompt (each answered by the
# tool that answers the same question, so limited alike).
RATE_LIMITED = frozenset({"tools/call", "resources/read", "prompts/get"})


def _authenticate(raw: str) -> AccessToken | None:
    """An API key (`lr_live_…`) or an OAuth access token bound to this resource; None for anything else."""
    if not raw.startswith(account_services.KEY_PREFIX):
        return oauth.access_token_authenticate(raw=raw)
    api_key = account_services.api_key_authenticate(plaintext=raw)
    if api_key is None:
        return None
    token = KeyAccessToken(
        token=raw, client_id=f"apikey:{api_key.pk}", subject=str(api_key.user_id), scopes=api_key.scope_list
    )
    token._account = api_key.user  # selected with the key
    return token


def _header(scope: Scope, name: bytes) -> str | None:
    values = [v for k, v in scope["headers"] if k == name]
    return values[0].decode("latin-1") if values else None


async def _respond(
    send: Send, status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> None:
    raw = json.dumps(body).encode() if body is not None else b""
    header_list = [(k.lower().encode(), v.encode("latin-1")) for k, v in (headers or {}).items()]
    if body is not None:
        header_list.append((b"content-type", b"application/json"))
    header_list.append((b"content-length", str(len(raw)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": header_list})
    await send({"type": "http.response.body", "body": raw})


async def _invalid_params(scope: Scope, send: Send, request_id: Any, error: dict[str, Any]) -> None:
    """A -32602 (invalid params) error, with the status the SDK answers it with: 400 at 2026-07-28, else 200."""
    status = 400 if _header(scope, b"mcp-protocol-version") == MODERN else 200
    await _respond(send, status, {"jsonrpc": "2.0", "id": request_id, "error": error})


def _with_cors(send: Send, origin: str | None) -> Send:
    if origin is None:
        return send

    async def cors_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            replaced = {b"access-control-allow-origin", b"access-control-allow-credentials", b"vary"}
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in replaced]
            headers += [
                (b"access-control-allow-origin", origin.encode("latin-1")),
                (b"access-control-expose-headers", EXPOSED_HEADERS.encode()),
                (b"vary", b"Origin"),
            ]
            message = {**message, "headers": headers}
        await send(message)

    return cors_send


class BodyTooLarge(Exception):
    pass


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class InvalidMessage(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def parse_message(body: bytes) -> Any:
    """The JSON-RPC message, or InvalidMessage for a body no handler should see (never a traceback)."""
    try:
        message = json_loads(body)  # each object remembers a name given twice (the SDK's parser keeps the last)
    except NestedTooDeep:  # before it costs anything; the REST mirror refuses the same bodies (leroy.api)
        raise InvalidMessage(-32600, f"Invalid Request: {TOO_DEEP}") from None
    except ValueError:
        raise InvalidMessage(-32700, "Parse error: the body is not JSON") from None
    if problem := _not_one_message(message):
        raise InvalidMessage(-32600, f"Invalid Request: {problem}")
    if repeated := _repeated_outside_arguments(message):
        # The SDK would read the last of each (a tools/list that ends a tools/call, another tool's name, another id):
        # the message is no one Request object (JSON-RPC 2.0 §5.1), whatever protocol era it comes in.
        names = ", ".join(repeated)
        raise InvalidMessage(
            -32600, f"Invalid Request: {names} given more than once (a name may appear once in a JSON object)"
        )
    return message


def _not_one_message(message: Any) -> str | None:
    """What keeps `message` from being one JSON-RPC 2.0 request, notification or response (JSON-RPC 2.0 §4, §5; an
    MCP request id is never null), said in a line; None when it is one. Checked here for both eras: the SDK's
    2025-11-25 path answered these with -32602 and its model's validation dump."""
    if isinstance(message, list):
        return "a batch (an array of messages) is not accepted: send one message per request"
    if not isinstance(message, dict):
        return "a message is a JSON object"
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "method" in message:
        if not isinstance(message["method"], str):
            return "method must be a string"
        if "id" in message and message["id"] is None:
            return "id must not be null (a notification has no id)"
    elif "id" not in message or ("result" in message) == ("error" in message):
        return "a message without a method is a response: an id and either a result or an error"
    return None


def _repeated_outside_arguments(message: Any) -> list[str]:
    """The names `message` gives more than once, but for those inside a tool call's arguments: the tool's own parser
    refuses those in band, as `invalid_arguments`, as it does every misfit argument."""
    call = isinstance(message, dict) and message.get("method") == "tools/call"
    return sorted(name for name in repeated_names(message) if not (call and name.startswith("params.arguments.")))


def _misread_by_sdk(arguments: Any) -> bool:
    """Whether a tools/call's arguments are ones the SDK would misread or refuse out of band."""
    return arguments is not None and (not isinstance(arguments, dict) or bool(repeated_names(arguments)))


def _id_of(message: Any) -> Any:
    request_id = message.get("id") if isinstance(message, dict) else None
    return request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None


def _with_request_id(send: Send, request_id: str) -> Send:
    async def tagged_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            message = {**message, "headers": headers}
        await send(message)

    return tagged_send


class _SentTracker:
    """A `send` that remembers whether the response has started (after that, only the connection can fail)."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _media_types_lowercased(scope: Scope) -> Scope:
    """The request with its Content-Type and Accept values lowercased: media types and their parameter names are
    case-insensitive (RFC 9110 §8.3.1, §12.5.1), and the SDK compares them as written (APPLICATION/JSON was a 415)."""
    headers = [
        (name, value.lower() if name in (b"content-type", b"accept") else value) for name, value in scope["headers"]
    ]
    return {**scope, "headers": headers}


class McpTransport:
    """ASGI app for /api/mcp wrapping the SDK's Starlette app."""

    def __init__(
        self,
        sdk_app: ASGIApp,
        authenticate: Callable[[str], AccessToken | None] = _authenticate,
        list_prompts: Callable[[], Awaitable[list[Prompt]]] | None = None,
    ) -> None:
        self.sdk_app = sdk_app
        self.authenticate: Callable[[str], Awaitable[AccessToken | None]] = sync_to_async(authenticate)
        self.list_prompts = list_prompts
        self._prompts: dict[str, PromptArguments] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = _header(scope, b"origin")
        cors_origin = origin if origin and origin.rstrip("/") in settings.LEROY_CORS_ORIGINS else None
        send = _with_cors(send, cors_origin)

        if scope["method"] == "OPTIONS":
            await self._preflight(scope, send, origin, cors_origin)
            return
        if scope["method"] != "POST":
            # Stateless server: no standalone SSE stream to offer (a GET would hang open forever).
            await _respond(send, 405, headers={"Allow": "POST, OPTIONS"})
            return
        scope = _media_types_lowercased(scope)
        if not (_header(scope, b"content-type") or "").startswith("application/json"):
            # The SDK's own check answers a bare text/plain 400 "Invalid Content-Type header": a client learns
            # what is wrong from a JSON-RPC error, as it does for its Accept header (406).
            error = {"code": -32600, "message": "Unsupported Media Type: Content-Type must be application/json"}
            await _respond(send, 415, {"jsonrpc": "2.0", "id": None, "error": error})
            return

        try:
            body = await _read_body(receive, settings.LEROY_MCP_MAX_BODY_BYTES)
        except BodyTooLarge:
            await _respond(send, 413, {"error": "payload_too_large", "limit_bytes": settings.LEROY_MCP_MAX_BODY_BYTES})
            return
        except ConnectionAbortedError:
            return
        try:
            message = parse_message(body)
        except InvalidMessage as invalid:
            error = {"code": invalid.code, "message": invalid.message}
            await _respond(send, 400, {"jsonrpc": "2.0", "id": None, "error": error})
            return

        request_id = calllog.request_id_of(_header(scope, b"x-request-id"))
        send = _with_request_id(send, request_id)
        log = self._call_log(scope, message, request_id)
        if log is not None:
            send = log.wrap(send)
        sent = _SentTracker(send)
        try:
            await self._serve(scope, receive, sent, body, message, log)
        except DatabaseError as error:
            # The database failed (or its pool timed out) before an answer: a retryable 503, never a 500.
            if sent.started:
                raise
            refusal = database_unavailable(error, "MCP request")
            rpc_error = {"code": -32000, "message": "Service temporarily unavailable; retry shortly"}
            rpc_error["data"] = {"code": refusal.code, **refusal.details}
            await _respond(
                sent,
                503,
                {"jsonrpc": "2.0", "id": _id_of(message), "error": rpc_error},
                {"Retry-After": str(DATABASE_RETRY_AFTER)},
            )
        finally:
            if log is not None:
                log.finish()

    async def _serve(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, message: Any, log: calllog.CallLog | None
    ) -> None:
        token: AccessToken | None = None
        authorization = _header(scope, b"authorization")
        if authorization is not None:
            scheme, _, raw = authorization.partition(" ")
            token = await self.authenticate(raw.strip()) if scheme.lower() == "bearer" and raw.strip() else None
            if token is None:
                challenge = bearer_challenge(
                    error="invalid_token", description="The bearer credential is unknown, revoked or expired"
                )
                await _respond(
                    send,
                    401,
                    {"error": "invalid_token", "error_description": "The bearer credential is not valid"},
                    {"WWW-Authenticate": challenge},
                )
                return
        if log is not None and token is not None:
            log.principal = token.client_id
            log.user_id = int(token.subject) if token.subject and token.subject.isdigit() else None

        if await self._refused_tool_call(scope, message, token, send):
            return
        scope["user"] = AuthenticatedUser(token) if token else None
        # The principal the SDK's handlers read, set for every request, anonymous ones too (the SDK's own middleware
        # sets it only for a signed-in caller, so an anonymous request could read one left in its context).
        principal = auth_context_var.set(scope["user"])
        version = PROTOCOL_VERSION.set(_header(scope, b"mcp-protocol-version"))
        noted, collecting = charged.collecting()
        if log is not None:
            log.charged = noted
        try:
            await self.sdk_app(scope, _replay(body, receive), send)
        finally:
            charged.stop(collecting)
            PROTOCOL_VERSION.reset(version)
            auth_context_var.reset(principal)

    @staticmethod
    def _call_log(scope: Scope, message: Any, request_id: str) -> calllog.CallLog | None:
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return None
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        version = _header(scope, b"mcp-protocol-version")
        era = version if version in PROTOCOL_VERSIONS else ("legacy" if version is None else "unknown")
        tool = name if isinstance(name, str) and name in REGISTRY else "unknown"
        return calllog.CallLog(tool=tool, era=era, request_id=request_id)

    async def _preflight(self, scope: Scope, send: Send, origin: str | None, cors_origin: str | None) -> None:
        if origin is None:
            await _respond(send, 204, headers={"Allow": "POST, OPTIONS"})
        elif cors_origin is None:
            await _respond(send, 403, {"error": "origin_not_allowed"})
        else:
            await _respond(
                send,
                204,
                headers={
                    "Access-Control-Allow-Methods": "POST, OPTIONS",
                    "Access-Control-Allow-Headers": ALLOWED_HEADERS,
                    "Access-Control-Max-Age": "600",
                },
            )

    async def _refused_prompt(self, scope: Scope, message: dict[str, Any], send: Send) -> bool:
        """Refuse a prompts/get naming no prompt, or arguments the prompt does not take, as invalid params (-32602,
        as the spec names it), judged by the prompts' own declared arguments: the SDK answered them as an internal
        error (code 0 at 2025-11-25, -32603 with a logged traceback at 2026-07-28). True when a response was sent."""
        if self._prompts is None:  # every prompt is registered before the first request
            listed = await self.list_prompts() if self.list_prompts is not None else []
            self._prompts = {
                prompt.name: (
                    frozenset(argument.name for argument in prompt.arguments or [] if argument.required),
                    frozenset(argument.name for argument in prompt.arguments or []),
                )
                for prompt in listed
            }
        prompts = self._prompts
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or name not in prompts:
            problem = f"no prompt is named {name!r}"[:200]
        elif not isinstance(arguments, dict) or not all(isinstance(value, str) for value in arguments.values()):
            problem = "arguments must be an object of strings"
        else:
            required, accepted = prompts[name]
            missing, unknown = sorted(required - set(arguments)), sorted(set(arguments) - accepted)
            if not missing and not unknown:
                return False
            problem = "; ".join(
                [f"missing {', '.join(missing)}"] * bool(missing)
                + [f"{name} takes no {', '.join(unknown)}"] * bool(unknown)
            )[:500]
        await _invalid_params(scope, send, message.get("id"), {"code": -32602, "message": f"Invalid params: {problem}"})
        return True

    async def _refused_tool_call(self, scope: Scope, message: Any, token: AccessToken | None, send: Send) -> bool:
        """Rate-limit tool calls and the resource reads and prompts answered like them, and refuse tool calls the
        caller may not make; True when a response was sent."""
        if not isinstance(message, dict):
            return False
        request_id = message.get("id")
        if "id" in message and (isinstance(request_id, bool) or not isinstance(request_id, str | int | None)):
            # JSON-RPC ids are strings or numbers; the SDK's 2025-11-25 path read an object id as a notification.
            error = {"code": -32600, "message": "Invalid Request: id must be a string or a number"}
            await _respond(send, 400, {"jsonrpc": "2.0", "id": None, "error": error})
            return True
        method = message.get("method")
        if not isinstance(method, str) or method not in RATE_LIMITED:
            return False
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        header_name = _header(scope, b"mcp-name")
        header_name = None if header_name is None else header_name.strip()  # RFC 9110: a value excludes its OWS
        tool_call = method == "tools/call"
        if (
            tool_call
            and header_name is not None
            and header_name != name
            and _header(scope, b"mcp-protocol-version") != MODERN
        ):
            # The 2026-07-28 path refuses this in the SDK; the 2025-11-25 path would ignore the header.
            error = {"code": -32020, "message": f"Mcp-Name header does not match the request's name ({name!r})"}
            await _respond(send, 400, {"jsonrpc": "2.0", "id": request_id, "error": error})
            return True

        if token is not None:
            # An API key is its own identity; an OAuth client is limited per user it acts for.
            identity = (
                token.client_id if token.client_id.startswith("apikey:") else f"{token.client_id}:{token.subject}"
            )
            limit, kind = settings.LEROY_RATE_LIMIT_PRINCIPAL_PER_MINUTE, "mcp_principal"
        else:
            client = scope.get("client") or ("unknown", 0)
            identity, limit = f"ip:{client[0]}", settings.LEROY_RATE_LIMIT_ANONYMOUS_PER_MINUTE
            kind = "mcp_anonymous"
        retry_after = await rate_limit_retry_after(identity, limit)
        if retry_after is not None:
            metrics.RATE_LIMIT_REFUSALS.labels(kind).inc()
            error = {"code": -32000, "message": f"Rate limit of {limit} calls per minute exceeded"}
            error["data"] = {"code": "rate_limited", "limit_per_minute": limit, "retry_after_seconds": retry_after}
            await _respond(
                send, 429, {"jsonrpc": "2.0", "id": request_id, "error": error}, {"Retry-After": str(retry_after)}
            )
            return True

        if method == "prompts/get" and "id" in message:
            return await self._refused_prompt(scope, message, send)
        if not tool_call or "id" not in message:
            # A tools/call without an id is a notification: never answered (JSON-RPC 2.0 §4.1) and never run (the
            # SDK accepts it with a 202), so it meets no credential check that would answer it.
            return False
        if isinstance(params, dict) and "name" not in params:
            # The SDK refused it with a bare -32602 (`"data": ""`): named here as every misfit argument is named.
            refusal = arguments_refused({"params.name": "Field required"})
            error = {"code": -32602, "message": refusal.message, "data": refusal.payload()["error"]}
            await _invalid_params(scope, send, request_id, error)
            return True
        spec = REGISTRY.get(name) if isinstance(name, str) else None
        modern = _header(scope, b"mcp-protocol-version") == MODERN
        if spec is None or (header_name is not None and header_name != name) or (modern and header_name is None):
            # Unknown tools and header/body mismatches are the SDK's to answer; at 2026-07-28 a missing Mcp-Name is a
            # mismatch too (400, -32020), judged before any credential so a malformed request never meets a 401.
            return False
        if spec.access == "subscriber" and token is None:
            payload, challenge = await sync_to_async(subscription_required)(spec)
            status = 401
        elif token is not None and spec.scope not in token.scopes:
            payload, challenge = insufficient_scope(spec)
            status = 403
        elif isinstance(params, dict) and _misread_by_sdk(params.get("arguments")):
            # The SDK refuses arguments that are not an object with a bare -32602, and reads a name given twice as its
            # last value, before the tool's strict parser runs: answered in band here, by that parser, as every other
            # misfit is.
            try:
                spec.args.from_arguments(params["arguments"])
                return False
            except DomainError as refusal:
                payload, challenge, status = refusal.payload(), None, 200
        else:
            return False
        result = error_result(payload, challenge)
        if _header(scope, b"mcp-protocol-version") == MODERN:
            result["resultType"] = "complete"
        headers = {"WWW-Authenticate": challenge} if challenge else None
        await _respond(send, status, {"jsonrpc": "2.0", "id": request_id, "result": result}, headers)
        return True
