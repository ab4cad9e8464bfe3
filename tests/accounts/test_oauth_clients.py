"""Connected clients and Disconnect on the account page; concurrent refresh on the real database."""

import threading
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from oauth2_provider.models import AccessToken, Grant, RefreshToken

from accounts import oauth
from tests.accounts.conftest import authorization_code, exchange, refresh


def disconnect(browser: Client, client_id: str, **kwargs: Any) -> Any:
    """Press Disconnect on the account page (the form carries the CSRF token)."""
    browser.get("/account/")
    token = browser.cookies["csrftoken"].value
    return browser.post(f"/account/clients/{client_id}/disconnect/", {"csrfmiddlewaretoken": token}, **kwargs)


@pytest.mark.django_db
def test_account_page_lists_connected_clients_with_access_and_last_use(browser: Client, connect, owner):
    connected = connect()

    page = browser.get("/account/clients/").content.decode()

    assert "Research Agent" in page
    assert "<td>mcp:read</td>" in page
    assert f"/account/clients/{connected['client_id']}/disconnect/" in page
    [listed] = oauth.oauth_connected_clients(user=owner)
    assert listed.client_id == connected["client_id"]
    assert listed.redirect_host == "127.0.0.1"
    assert listed.scopes == ["mcp:read"]


@pytest.mark.django_db
def test_disconnect_revokes_every_family_and_pending_code_of_that_client_for_that_user_only(
    browser: Client, client: Client, connect, flow, outsider
):
    first = connect()
    second = connect(client_id=first["client_id"])
    pending = flow(client_id=first["client_id"])
    authorization_code(browser, pending)
    other_browser = Client()
    other_browser.force_login(outsider)
    charlie_flow = flow(client_id=first["client_id"])
    charlie = exchange(client, charlie_flow, authorization_code(other_browser, charlie_flow)).json()

    response = disconnect(browser, first["client_id"])

    assert response.status_code == 302
    assert response["Location"] == "/account/clients/"
    alice_tokens = AccessToken.objects.filter(user__email="alice@example.com")
    assert alice_tokens.count() == 0
    assert RefreshToken.objects.filter(user__email="alice@example.com", revoked__isnull=True).count() == 0
    assert Grant.objects.filter(user__email="alice@example.com").count() == 0
    assert refresh(client, first["client_id"], first["refresh_token"]).status_code == 400
    assert refresh(client, first["client_id"], second["refresh_token"]).status_code == 400
    assert refresh(client, first["client_id"], charlie["refresh_token"]).status_code == 200
    assert "No connected clients." in browser.get("/account/clients/").content.decode()


@pytest.mark.django_db
def test_reconnecting_after_disconnect_needs_consent_again(browser: Client, connect, flow):
    client_id = connect()["client_id"]
    disconnect(browser, client_id)

    page = browser.get(flow(client_id=client_id, approval_prompt="auto").url)

    assert page.status_code == 200
    assert 'id="authorizationForm"' in page.content.decode()


@pytest.mark.django_db
def test_disconnect_needs_the_session_and_csrf(client: Client, browser: Client, connect):
    client_id = connect()["client_id"]
    access = AccessToken.objects.get()

    signed_out = client.post(f"/account/clients/{client_id}/disconnect/")
    bearer = Client(HTTP_AUTHORIZATION="Bearer x").post(f"/account/clients/{client_id}/disconnect/")
    no_csrf = Client(enforce_csrf_checks=True)
    no_csrf.force_login(access.user)
    forged = no_csrf.post(f"/account/clients/{client_id}/disconnect/")

    assert signed_out.status_code == 302 and "/login/" in signed_out["Location"]
    assert bearer.status_code == 302
    assert forged.status_code == 403
    assert AccessToken.objects.count() == 1


@pytest.mark.django_db
def test_disconnecting_an_unknown_client_changes_nothing(browser: Client, connect):
    connect()

    response = disconnect(browser, "nope", follow=True)

    assert "No such connected client." in response.content.decode()
    assert AccessToken.objects.count() == 1


@pytest.mark.django_db
def test_disconnecting_a_client_only_another_account_connected_says_so_and_changes_nothing(
    browser: Client, client: Client, flow, outsider
):
    other_browser = Client()
    other_browser.force_login(outsider)
    charlie_flow = flow()
    charlie = exchange(client, charlie_flow, authorization_code(other_browser, charlie_flow)).json()

    response = disconnect(browser, charlie_flow.client_id, follow=True)

    assert [str(message) for message in response.context["messages"]] == ["No such connected client."]
    assert AccessToken.objects.filter(user=outsider).count() == 1
    assert RefreshToken.objects.filter(user=outsider, revoked__isnull=True).count() == 1
    assert refresh(client, charlie_flow.client_id, charlie["refresh_token"]).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_refreshes_of_one_token_give_one_success_and_revoke_the_family(connect, settings):
    if settings.LEROY_TEST_DATABASE != "PostgreSQL":
        pytest.skip("row locks are PostgreSQL's; SQLite serialises whole transactions")
    first = connect()
    barrier = threading.Barrier(2)
    results: list[Any] = []

    def race() -> None:
        try:
            barrier.wait()
            results.append(refresh(Client(), first["client_id"], first["refresh_token"]))
        finally:
            connection.close()

    threads = [threading.Thread(target=race) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(response.status_code for response in results) == [200, 400]
    loser = next(response for response in results if response.status_code == 400)
    assert loser.json()["error"] == "invalid_grant"
    assert AccessToken.objects.count() == 0
    assert RefreshToken.objects.filter(revoked__isnull=True).count() == 0
