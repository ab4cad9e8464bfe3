"""A form Django will not read (not UTF-8) is a 400 wherever it is posted, and changes nothing."""

import pytest
from django.contrib.auth import get_user_model
from django.test import AsyncClient, Client

pytestmark = [pytest.mark.django_db(transaction=True)]

SIGNUP = "email=new%40example.com&password1=long+enough+pass&password2=long+enough+pass"
URLS = ["/account/signup/", "/account/login/", "/admin/login/", "/oauth/token/", "/nowhere/", "/api/v1/nothing"]


def client_with_csrf_cookie(cls: type = Client):
    # The CSRF check reads the form only when the request carries its cookie, as a browser's does.
    client = cls(raise_request_exception=False, enforce_csrf_checks=True)
    client.cookies["csrftoken"] = "a" * 32
    return client


@pytest.mark.parametrize("charset", ["utf-16", "utf-32"])
@pytest.mark.parametrize("url", URLS)
def test_a_form_in_another_charset_is_refused_with_400_and_creates_nothing(url, charset):
    body = f"csrfmiddlewaretoken={'a' * 32}&{SIGNUP}".encode(charset)
    response = client_with_csrf_cookie().generic(
        "POST", url, body, content_type=f"application/x-www-form-urlencoded; charset={charset}"
    )

    assert (response.status_code, response.content) == (400, b"The form must be UTF-8 encoded.")
    assert get_user_model().objects.exists() is False


@pytest.mark.anyio
async def test_the_asgi_handler_refuses_it_too():
    response = await client_with_csrf_cookie(AsyncClient).generic(
        "POST",
        "/account/login/",
        "a=b".encode("utf-16"),
        content_type="application/x-www-form-urlencoded; charset=utf-16",
    )

    assert response.status_code == 400


def test_a_utf8_form_still_reaches_its_view():
    response = client_with_csrf_cookie().post("/account/login/", {"csrfmiddlewaretoken": "a" * 32, "username": "x"})

    assert response.status_code == 200  # the login form, showing its errors
    assert b"UTF-8" not in response.content
