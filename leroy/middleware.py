"""Checks on the request that must run before Django's own middleware reads it, Leroy's page for a 405, and the
refusal of values Django's admin does not check."""

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.core.exceptions import BadRequest, ValidationError
from django.db import DataError
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseNotAllowed
from django.template.loader import render_to_string
from django.utils.decorators import sync_and_async_middleware
from django.utils.deprecation import MiddlewareMixin

from leroy import api

FORM = "application/x-www-form-urlencoded"
GetResponse = Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]
Check = Callable[[HttpRequest], HttpResponse | None]


def _refusing(check: Check) -> Callable[[GetResponse], GetResponse]:
    """A middleware answering `check`'s refusal when it gives one, else the view's answer (sync or async alike)."""

    @sync_and_async_middleware
    def middleware_factory(get_response: GetResponse) -> GetResponse:
        if iscoroutinefunction(get_response):

            async def middleware_async(request: HttpRequest) -> HttpResponse:
                return check(request) or await get_response(request)  # type: ignore[misc]

            return middleware_async

        def middleware(request: HttpRequest) -> HttpResponse:
            return check(request) or get_response(request)  # type: ignore[return-value]

        return middleware

    return middleware_factory


def _unreadable(request: HttpRequest) -> HttpResponse | None:
    if request.method in ("GET", "HEAD", "OPTIONS") or request.content_type != FORM:
        return None
    try:
        request.POST  # noqa: B018 - parsed here, where its refusal can still be answered
    except BadRequest:
        return HttpResponseBadRequest("The form must be UTF-8 encoded.", content_type="text/plain; charset=utf-8")
    return None


# A form Django refuses to read (Django 6 reads only UTF-8 forms) is answered 400 here. Left to the CSRF check, which
# reads the form first, its `BadRequest` goes to the 400 page, whose CSRF check reads it again, then to the 500 page,
# which does the same: every such POST, to any URL, ended a 500.
unreadable_form_refused = _refusing(_unreadable)
# A REST route asked with a method HTTP does not define: ninja never reaches an operation that could refuse it.
unknown_method_refused = _refusing(api.unknown_method_refused)


# What a value the admin passes unchecked to a query raises: a non-integer id (ValueError, ValidationError) or one
# beyond the column's range (OverflowError on SQLite, DataError on PostgreSQL).
UNREADABLE_VALUES = (ValueError, OverflowError, ValidationError, DataError)


class AdminUnreadableValueRefused(MiddlewareMixin):
    """A crafted admin request whose value Django's admin does not check before querying with it (an action's
    `_selected_action` that is no id, an autocomplete field posted with one, `?pk__in=` beyond the column) is a 400,
    not a 500. Only the admin's views: anywhere else such an error is a defect to see."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        match = request.resolver_match
        if match is None or match.namespace != "admin" or not isinstance(exception, UNREADABLE_VALUES):
            return None
        raise BadRequest("A value in the request is not one this page can read.") from exception


def _blank_405(response: HttpResponse) -> bool:
    return isinstance(response, HttpResponseNotAllowed) and not response.content


def _method_page(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    response.content = render_to_string("405.html", {"allowed": response["Allow"]}, request)
    response["Content-Type"] = "text/html; charset=utf-8"
    return response


@sync_and_async_middleware
def method_not_allowed_page(get_response: GetResponse) -> GetResponse:
    """A 405 Django answers without a body (`require_POST`, a class view's `http_method_not_allowed`: a GET of a
    button's action, such as a key's revoke or the logout) as Leroy's own page, as 403.html and 404.html are; its
    Allow header, and every other, kept. Django has no handler for a 405; REST's JSON 405 has a body and is left."""
    if iscoroutinefunction(get_response):

        async def middleware_async(request: HttpRequest) -> HttpResponse:
            response = await get_response(request)
            return await sync_to_async(_method_page)(request, response) if _blank_405(response) else response

        return middleware_async

    def middleware(request: HttpRequest) -> HttpResponse:
        response: HttpResponse = get_response(request)  # type: ignore[assignment]
        return _method_page(request, response) if _blank_405(response) else response

    return middleware
