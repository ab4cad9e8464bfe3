"""The typed REST API (`/api/v1/`), generated from the MCP tool registry: one spec, two edges.

Every tool whose spec says `rest` (every read tool, and the journal) gets a route `/api/v1/<app>/<tool name>` that
takes the tool's Args model (a JSON body; a GET, and its HEAD, when the tool has no arguments), answers its output
model, and runs the tool's own handler, so the answer, the metering and the refusals are the MCP tool's. Any other
method, one HTTP does not define included, is refused with 405 and an `Allow` header, in the same refusal shape.

Only the Django session of a signed-in account authenticates here, with CSRF on unsafe methods. API keys and OAuth
access tokens are accepted at /api/mcp alone: a request presenting any Authorization header is refused, even when it
also carries a session. Public tools need no session, and serve a signed-in caller as that account, as MCP serves a
keyed caller (a public tool is free either way).

Every tool call is rate-limited as MCP limits it (leroy.ratelimit): per client address when anonymous (the same
budget as the address's anonymous MCP calls), per account when signed in (`session:<user id>`, a budget of its own
beside each API key's). An answer given for a signed-in account is never stored by a cache (`Cache-Control:
no-store`, and `Vary: Cookie`).
"""

from collections.abc import Callable
from typing import Any

import pydantic_core
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from django.utils.cache import add_never_cache_headers, patch_vary_headers
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI, Router
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser
from ninja.renderers import BaseRenderer
from ninja.security import SessionAuth
from ninja.utils import check_csrf
from pydantic import BaseModel, ConfigDict

from leroy import metrics
from leroy.errors import DomainError, database_unavailable
from leroy.mcp.registry import ToolSpec, direct_call, load_tools
from leroy.ratelimit import rate_limit_retry_after
from leroy.schemas import TOO_DEEP, NestedTooDeep, arguments_refused, json_loads

BEARER_REFUSED = "API keys and OAuth tokens are accepted only at /api/mcp; sign in to use the REST API."


class Problem(BaseModel):
    field: str
    problem: str


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")  # a refusal's own details (retry_after_seconds, report_id, ...)

    code: str
    message: str
    problems: list[Problem] | None = None  # one per invalid argument (invalid_arguments only)


class ErrorOut(BaseModel):
    """The same machine-readable refusal an MCP tool returns in band."""

    error: ErrorDetail


# Every status a generated route can answer besides 200: refusals (400/402/404/409/503), no session (401), a missing
# CSRF token (403), a method the route does not take (405), a body over the size limit (413), invalid arguments
# (422), too many calls in a minute (429).
ERROR_STATUSES = frozenset({400, 401, 402, 404, 405, 409, 413, 422, 429, 503})
STATUS_OF_CODE = {
    "payload_too_large": 413,
    "rate_limited": 429,
    "method_not_allowed": 405,
    "idempotency_conflict": 409,
    "quota_exhausted": 402,
    "insufficient_credits": 402,
    "evidence_unavailable": 503,
    "queue_unavailable": 503,
    "database_unavailable": 503,
    "log_unavailable": 503,
    "not_signed_in": 401,
    "csrf_failed": 403,
    "provider_unavailable": 503,
    "unknown_symbol": 404,
    "symbol_unknown": 404,
}


def status_of(code: str) -> int:
    """The HTTP status of a domain refusal code."""
    if code == "not_found" or code.endswith("_not_found"):
        return 404
    return STATUS_OF_CODE.get(code, 400)


def refuse_bearer(request: HttpRequest) -> None:
    """For public routes (no session needed): a presented credential is still refused, never ignored."""
    if "authorization" in request.headers:
        raise HttpError(401, BEARER_REFUSED)


class AccountSession(SessionAuth):
    """The signed-in account's session cookie; CSRF is checked on unsafe methods by SessionAuth itself."""

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        refuse_bearer(request)
        return super().authenticate(request, key)


class PydanticJSON(BaseRenderer):
    """JSON exactly as the MCP tools write it (pydantic's encoder: microseconds kept, `Z` for UTC)."""

    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> bytes:
        return pydantic_core.to_json(data)


class SharedJSON(Parser):
    """ninja reads a body with the parser both edges share (leroy.schemas.json_loads), so a body nested deeper
    than MAX_JSON_DEPTH is refused here, before any validator walks it (it once reached ToolArgs' recursive
    checks and overflowed the stack: an HTML 500). ninja turns any failure here into a 400, see _http_error."""

    def parse_body(self, request: HttpRequest) -> Any:
        return json_loads(request.body)


def _docs_methods(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """ninja's docs page and OpenAPI document answer every method alike: they take GET and HEAD, and refuse any
    other as a generated route does (a JSON 405 with `Allow`), not with the CSRF page, since they change nothing."""

    @csrf_exempt
    def docs(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return _method_refused(request, "GET, HEAD")
        return view(request, *args, **kwargs)

    return docs


class LeroyAPI(NinjaAPI):
    def create_response(
        self,
        request: HttpRequest,
        data: Any,
        *,
        status: int | None = None,
        temporal_response: HttpResponse | None = None,
    ) -> HttpResponse:
        """Every answer, a refusal included; one given for a signed-in account (`request.auth`, set by the session
        check, or by _view for a public tool) is not stored by any cache, as the account pages are not."""
        response = super().create_response(request, data, status=status, temporal_response=temporal_response)
        if getattr(request, "auth", None) is not None:
            add_never_cache_headers(response)
            patch_vary_headers(response, ["Cookie"])
        return response


api = LeroyAPI(
    renderer=PydanticJSON(),
    docs_decorator=_docs_methods,
    title="Leroy",
    version="1",
    description="Research-only evidence and backtesting: the REST mirror of Leroy's MCP tools.",
    auth=AccountSession(),
    urls_namespace="api-v1",
    parser=SharedJSON(),
)


NOT_IN_QUERY = "A POST takes its arguments in the JSON body, not in the query string"


def _strict_args(request: HttpRequest, spec: ToolSpec) -> BaseModel:
    """The call's arguments (a POST's JSON body, a GET's query string) parsed exactly as MCP parses a call's
    arguments (strict: `"yes"` is not a boolean, `"5"` not a number; an unknown name is refused, not ignored), so
    both edges refuse the same calls with the same `invalid_arguments` problems."""
    if request.method != "POST":  # GET or HEAD: the arguments are the query string
        return spec.args.from_arguments(request.GET.dict())
    if request.GET:  # a POST's arguments are its body alone: a query string beside it is refused, not ignored
        raise arguments_refused(dict.fromkeys(request.GET, NOT_IN_QUERY))
    try:
        body = json_loads(request.body or b"{}")
    except ValueError as error:
        raise _body_refused(error) from None
    return spec.args.from_arguments(body)


def _body_refused(error: BaseException | None) -> DomainError:
    """A body the shared parser refused: nested too deeply (the limit MCP applies), or not JSON at all."""
    if isinstance(error, NestedTooDeep):
        problem = {"field": "body", "problem": f"The body is {TOO_DEEP}"}
        return DomainError("invalid_arguments", f"Invalid arguments: the body is {TOO_DEEP}", problems=[problem])
    problem = {"field": "body", "problem": "The body is not JSON"}
    return DomainError("invalid_arguments", "Invalid arguments: the body is not JSON", problems=[problem])


# ninja's own refusals (a body it cannot parse, a missing CSRF token, a credential where a session belongs), as the
# refusals every other route answers.
HTTP_ERROR_CODES = {401: "not_signed_in", 403: "csrf_failed"}


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, error: HttpError) -> HttpResponse:
    if error.status_code == 400:  # ninja could not parse the body (not JSON, not UTF-8, nested too deeply)
        return _refused(request, _body_refused(error.__cause__))
    return _refused(request, DomainError(HTTP_ERROR_CODES.get(error.status_code, "refused"), str(error)))


@api.exception_handler(DomainError)
def _refused(request: HttpRequest, refusal: DomainError) -> HttpResponse:
    """A refusal as JSON with its status; a retryable one says when to retry in `Retry-After` as well."""
    status = 422 if refusal.code == "invalid_arguments" else status_of(refusal.code)
    response = api.create_response(request, refusal.payload(), status=status)  # exactly as MCP answers it
    if (retry_after := refusal.details.get("retry_after_seconds")) is not None:
        response["Retry-After"] = str(retry_after)
    return response


@api.exception_handler(NinjaValidationError)
def _invalid_arguments(request: HttpRequest, error: NinjaValidationError) -> HttpResponse:
    spec = _route_spec(request.path)
    if spec is not None:  # a generated route: the strict parser's problems, as MCP states them
        try:
            _strict_args(request, spec)
        except DomainError as refusal:
            return api.create_response(request, refusal.payload(), status=422)
    problems = [
        {"field": ".".join(str(part) for part in item["loc"][2:]) or "body", "problem": item["msg"]}
        for item in error.errors
    ]
    return _refused(request, DomainError("invalid_arguments", "The arguments are invalid.", problems=problems))


@api.exception_handler(RequestDataTooBig)
def _too_large(request: HttpRequest, error: RequestDataTooBig) -> HttpResponse:
    """A body over Django's limit, refused before it is read: a JSON 413 naming the limit, not the HTML 400 page."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    message = f"The request body is larger than the limit of {limit} bytes."
    return _refused(request, DomainError("payload_too_large", message, limit_bytes=limit))


def route_not_found(request: HttpRequest, path: str) -> HttpResponse:
    """Any path under /api/v1/ that names no route (every method): the JSON refusal a client of this API reads,
    not the HTML 404 page, and it names where the routes are listed."""
    message = f"No REST route at /api/v1/{path}. The routes are listed at /api/v1/docs and /api/v1/openapi.json."
    return _refused(request, DomainError("not_found", message))


@api.exception_handler(DatabaseError)
def _database_unavailable(request: HttpRequest, error: DatabaseError) -> HttpResponse:
    return _refused(request, database_unavailable(error, f"REST {request.method} {request.path}"))


@api.exception_handler(AuthenticationError)
def _not_signed_in(request: HttpRequest, error: AuthenticationError) -> HttpResponse:
    return _refused(request, DomainError("not_signed_in", "Sign in to use the REST API."))


async def _rate_limit(request: HttpRequest, user_id: int | None) -> None:
    """Refuse a call over the caller's per-minute limit (`rate_limited`, 429 with `Retry-After`), as MCP refuses
    one: per account when signed in, else per client address."""
    if user_id is not None:
        identity, limit = f"session:{user_id}", settings.LEROY_RATE_LIMIT_PRINCIPAL_PER_MINUTE
        kind = "rest_session"
    else:
        identity = f"ip:{request.META.get('REMOTE_ADDR') or 'unknown'}"
        limit, kind = settings.LEROY_RATE_LIMIT_ANONYMOUS_PER_MINUTE, "rest_anonymous"
    retry_after = await rate_limit_retry_after(identity, limit)
    if retry_after is not None:
        metrics.RATE_LIMIT_REFUSALS.labels(kind).inc()
        message = f"Rate limit of {limit} calls per minute exceeded"
        raise DomainError("rate_limited", message, limit_per_minute=limit, retry_after_seconds=retry_after)


def _view(spec: ToolSpec) -> Any:
    """A ninja operation that runs the tool's handler for the signed-in account (or anonymously, when public)."""

    async def caller(request: HttpRequest) -> int | None:
        """The signed-in account's id (a public tool's caller may be anonymous: None), rate-limited either way."""
        if spec.access == "public":
            refuse_bearer(request)
            user = await request.auser()
            # Served as the account, as MCP serves a keyed caller, when the session passes the check a subscriber
            # route makes (CSRF on unsafe methods); else anonymously, as a public route never needs a session.
            if user.is_authenticated and check_csrf(request) is None:
                request.auth = user  # type: ignore[attr-defined]
        account = getattr(request, "auth", None)
        user_id = None if account is None else int(account.pk)
        await _rate_limit(request, user_id)
        return user_id

    async def answer(request: HttpRequest, user_id: int | None, args: BaseModel) -> Any:
        call = direct_call(tool=spec.name, user_id=user_id, client_id="session")
        return await spec.handler(call, args)  # a DomainError is answered by _refused

    if spec.args.model_fields:

        async def with_body(request: HttpRequest, args: BaseModel) -> Any:
            # ninja's own (lax) parse documents the body in OpenAPI; the call runs on the strict parse.
            user_id = await caller(request)  # counted before the arguments are judged, as MCP counts a call
            return await answer(request, user_id, _strict_args(request, spec))

        with_body.__annotations__["args"] = spec.args
        if not any(field.is_required() for field in spec.args.model_fields.values()):
            # ninja validates an empty body (no Content-Length, or 0) as no arguments at all, never reaching the
            # parser: with every argument optional that is the call `{}`, so the body model defaults to it.
            with_body.__defaults__ = (spec.args(),)
        return with_body

    async def without_body(request: HttpRequest) -> Any:
        user_id = await caller(request)
        return await answer(request, user_id, _strict_args(request, spec))

    return without_body


def _route_spec(path: str) -> ToolSpec | None:
    """The REST tool a generated route's path names (its last segment)."""
    spec = load_tools().get(path.rstrip("/").rsplit("/", 1)[-1])
    return spec if spec is not None and spec.rest else None


def _allowed(spec: ToolSpec) -> str:
    """The methods a tool's route takes, as its `Allow` header names them: POST with a JSON body when the tool has
    arguments, else GET, and HEAD (GET without the body, RFC 9110 §9.3.2, as the publication log's endpoints)."""
    return "POST" if spec.args.model_fields else "GET, HEAD"


# Every method HTTP defines (RFC 9110 §9, RFC 5789): each a route does not take is refused by an operation of its
# own; ninja alone would answer a wrong one with a text page. Any other method is refused by unknown_method_refused.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")


def _method_refused(request: HttpRequest, allowed: str) -> HttpResponse:
    message = f"This route takes {allowed} only, not {request.method}."
    response = _refused(request, DomainError("method_not_allowed", message))
    response["Allow"] = allowed
    return response


def _wrong_method(allowed: str) -> Any:
    """An operation refusing every method its route does not take, before any session or charge."""

    async def refuse(request: HttpRequest) -> HttpResponse:
        return _method_refused(request, allowed)

    return refuse


def unknown_method_refused(request: HttpRequest) -> HttpResponse | None:
    """A method HTTP does not define (`curl -X FOO`) on a generated route, refused as every wrong method is; None
    for anything else. In leroy.middleware: ninja routes only the methods an operation names, and answered any other
    with a text 405 whose Allow named every method."""
    if request.method in METHODS:
        return None
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return None
    spec = _route_spec(request.path_info) if match.namespace == api.urls_namespace else None
    return None if spec is None else _method_refused(request, _allowed(spec))


def _mount() -> None:
    routers: dict[str, Router] = {}
    for spec in sorted(load_tools().values(), key=lambda s: s.name):
        if not spec.rest:
            continue
        app = spec.handler.__module__.split(".")[0]
        router = routers.setdefault(app, Router(tags=[app]))
        route, taken = f"/{spec.name}", _allowed(spec).split(", ")
        operation: dict[str, Any] = {
            "auth": None if spec.access == "public" else AccountSession(),
            "response": {200: spec.output, ERROR_STATUSES: ErrorOut},
            "operation_id": spec.name,
            "summary": spec.title,
            "description": spec.description,
        }
        router.add_api_operation(route, taken[:1], _view(spec), **operation)
        if "HEAD" in taken:  # the GET it stands for, left out of OpenAPI: each route documents one operation
            router.add_api_operation(route, ["HEAD"], _view(spec), include_in_schema=False, **operation)
        wrong = [method for method in METHODS if method not in taken]
        router.add_api_operation(route, wrong, _wrong_method(", ".join(taken)), auth=None, include_in_schema=False)
    for app, router in routers.items():
        api.add_router(f"/{app}/", router)


_mount()
