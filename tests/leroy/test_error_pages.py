"""Leroy's own pages for a missing page and a refused one."""

import pytest
from django.test import AsyncClient, Client

pytestmark = [pytest.mark.django_db]


def test_a_missing_page_is_leroys_own_404_page():
    response = Client().get("/nowhere/at-all/")

    assert response.status_code == 404
    page = response.content.decode()
    assert "<title>Not found · Leroy</title>" in page
    assert "There is nothing at <code>/nowhere/at-all/</code>." in page
    assert 'href="/account/login/"' in page


def test_a_refused_page_is_leroys_own_403_page(client, django_user_model):
    user = django_user_model.objects.create_user(email="plain@example.com", password="correct horse battery staple")
    client.force_login(user)

    response = client.get("/admin/login/")

    assert response.status_code == 403
    assert "This page is not open to this account." in response.content.decode()


def test_a_get_of_a_buttons_action_is_leroys_own_405_page_keeping_its_headers_and_changes_nothing(
    client, owner, api_key
):
    from accounts.models import ApiKey

    client.force_login(owner)
    number = ApiKey.objects.get().number

    response = client.get(f"/account/keys/{number}/revoke/")

    assert (response.status_code, response["Allow"], response["Content-Type"]) == (
        405,
        "POST",
        "text/html; charset=utf-8",
    )
    assert "no-store" in response["Cache-Control"]  # an account page's, as before
    page = response.content.decode()
    assert "<title>Method not allowed · Leroy</title>" in page
    assert (
        f"<code>/account/keys/{number}/revoke/</code> is what a button on Leroy's pages does, not a page to "
        "open: it takes POST, not GET."
    ) in page
    assert "Signed in as alice@example.com." in page
    assert ApiKey.objects.get().revoked_at is None


def test_a_get_of_the_logout_is_leroys_own_405_page():
    response = Client().get("/account/logout/")

    assert (response.status_code, response["Allow"]) == (405, "POST, OPTIONS")
    assert "is what a button on Leroy's pages does, not a page to open: it takes POST, OPTIONS, not GET." in (
        response.content.decode()
    )


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_the_405_page_is_rendered_for_a_signed_in_account_under_asgi_too(owner):
    client = AsyncClient()
    await client.aforce_login(owner)

    response = await client.get("/account/mcp/activate/")

    assert (response.status_code, response["Allow"]) == (405, "POST")
    assert "Signed in as alice@example.com." in response.content.decode()


PAGES = {
    "/": "GET, HEAD",
    "/account/": "GET, HEAD",
    "/account/clients/": "GET, HEAD",
    "/account/alerts/": "GET, HEAD",
    "/account/strategies/": "GET, HEAD",
    "/account/journal/": "GET, HEAD",
    "/account/usage/": "GET, HEAD",
    "/account/billing/": "GET, HEAD",
    "/account/signup/": "GET, HEAD, POST",
    "/healthz": "GET, HEAD",
    "/readyz": "GET, HEAD",
    "/metrics": "GET, HEAD",
}


@pytest.mark.parametrize("method", ["OPTIONS", "TRACE", "PUT", "DELETE"])
def test_a_page_asked_with_a_method_it_does_not_take_is_leroys_405_page_not_the_page(client, owner, method):
    # Function views answered every method as a GET: OPTIONS and TRACE rendered the page.
    client.force_login(owner)

    for path, allowed in PAGES.items():
        response = client.generic(method, path)

        assert (response.status_code, response["Allow"]) == (405, allowed), path
        assert f"<code>{path}</code> takes {allowed}, not {method}." in response.content.decode(), path
