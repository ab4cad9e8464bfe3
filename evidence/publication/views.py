"""The log's static endpoints: no auth, cacheable, formats fixed by the issue (and C2SP for the checkpoint).

A response about tree sizes up to the latest checkpoint never changes, so it is cached for a year; the checkpoint
itself moves with every append and is cached for seconds."""

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe

from evidence.publication import selectors
from leroy.errors import DomainError

IMMUTABLE = "public, max-age=31536000, immutable"


def _public(response: HttpResponse, cache_control: str) -> HttpResponse:
    response["Cache-Control"] = cache_control
    response["Access-Control-Allow-Origin"] = "*"  # public data: browser-side verifiers may fetch it
    return response


def _bad(message: str, code: str = "invalid_parameter") -> HttpResponse:
    return _public(JsonResponse({"error": {"code": code, "message": message}}, status=400), "no-store")


def _ints(request: HttpRequest, *names: str) -> list[int] | HttpResponse:
    values = []
    for name in names:
        raw = request.GET.get(name, "")
        if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
            return _bad(f"{name} must be a non-negative integer")
        values.append(int(raw))
    return values


def _unavailable(refusal: DomainError) -> HttpResponse:
    """`log_unavailable`: what needs this server's key (the empty log's checkpoint, the key itself) when the key
    cannot serve it; what is stored is still served by the other endpoints."""
    return _public(JsonResponse(refusal.payload(), status=503), "no-store")


def _json(build: Callable[[], Any]) -> HttpResponse:
    try:
        body = build()
    except DomainError as refusal:
        return _bad(refusal.message, refusal.code)
    return _public(JsonResponse(body), IMMUTABLE)


@require_safe
def checkpoint(request: HttpRequest) -> HttpResponse:
    try:
        note = selectors.checkpoint_note()
    except DomainError as refusal:
        return _unavailable(refusal)
    return _public(HttpResponse(note, content_type="text/plain; charset=utf-8"), "public, max-age=5")


@require_safe
def checkpoint_timestamp(request: HttpRequest) -> HttpResponse:
    """The RFC 3161 TimeStampResp (DER) over the note of the checkpoint of `tree_size` (default: the latest)."""
    if "tree_size" in request.GET:
        params = _ints(request, "tree_size")
        if isinstance(params, HttpResponse):
            return params
        size, cache_control = params[0], IMMUTABLE  # a granted token never changes
    else:
        size, cache_control = selectors.log_size(), "public, max-age=5"
    token = selectors.timestamp_response(tree_size=size)
    if token is None:
        return _missing(f"no time-stamp token for the checkpoint of size {size}")
    return _public(HttpResponse(token, content_type="application/timestamp-reply"), cache_control)


_LEVELS = {str(level) for level in range(64)}


def _missing(message: str) -> HttpResponse:
    return _public(JsonResponse({"error": {"code": "not_found", "message": message}}, status=404), "no-store")


def _tile_index(parts: list[str]) -> int | None:
    """C2SP tlog-tiles index: 3-digit path elements, all but the last prefixed with x (1234067 -> x001/x234/067)."""
    if not parts or not all(len(p) == 4 and p[0] == "x" for p in parts[:-1]) or len(parts[-1]) != 3:
        return None
    digits = "".join(p.removeprefix("x") for p in parts)
    return int(digits) if digits.isascii() and digits.isdigit() else None


@require_safe
def tile(request: HttpRequest, rest: str) -> HttpResponse:
    """`/log/tile/<L>/<N>[.p/<W>]` and `/log/tile/entries/<N>[.p/<W>]` (C2SP tlog-tiles), immutable once served."""
    path, _, partial = rest.partition(".p/")
    width = int(partial) if partial.isascii() and partial.isdigit() and len(partial) <= 3 else None
    level, _, index_path = path.partition("/")
    index = _tile_index(index_path.split("/"))
    if index is None or (partial and width is None) or not (level == "entries" or level in _LEVELS):
        return _missing("not a tile path")
    try:
        if level == "entries":
            body = selectors.entry_bundle(index=index, width=width)
        else:
            body = selectors.tile(level=int(level), index=index, width=width)
    except DomainError as refusal:
        return _missing(refusal.message)
    return _public(HttpResponse(body, content_type="application/octet-stream"), IMMUTABLE)


@require_safe
def log_key(request: HttpRequest) -> HttpResponse:
    try:
        key = selectors.verifier_key() + "\n"
    except DomainError as refusal:
        return _unavailable(refusal)
    return _public(HttpResponse(key, content_type="text/plain; charset=utf-8"), "public, max-age=3600")


@require_safe
def entries(request: HttpRequest) -> HttpResponse:
    params = _ints(request, "start", "end")
    if isinstance(params, HttpResponse):
        return params
    start, end = params
    return _json(lambda: {"entries": [e.model_dump() for e in selectors.entries(start=start, end=end)]})


@require_safe
def inclusion(request: HttpRequest) -> HttpResponse:
    params = _ints(request, "index", "tree_size")
    if isinstance(params, HttpResponse):
        return params
    index, size = params
    return _json(lambda: selectors.inclusion_proof(index=index, tree_size=size).model_dump())


@require_safe
def consistency(request: HttpRequest) -> HttpResponse:
    params = _ints(request, "first", "second")
    if isinstance(params, HttpResponse):
        return params
    first, second = params
    return _json(lambda: selectors.consistency_proof(first=first, second=second).model_dump())
