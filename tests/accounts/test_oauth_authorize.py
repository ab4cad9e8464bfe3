import re
from html import escape
from urllib.parse import quote, urlencode

import pytest
from django.test import Client
from oauth2_provider.models import Grant

from accounts.oauth import sha256_hex
from tests.accounts.conftest import ORIGIN, REDIRECT_URI, RESOURCE, consent, hidden_inputs, query_of

pytestmark = pytest.mark.django_db


def test_consent_page_shows_unverified_name_redirect_host_account_and_read_access(browser: Client, flow):
    response = browser.get(flow().url)

    assert response.status_code == 200
    page = response.content.decode()
    assert "“Research Agent”" in page
    assert "Unverified: the name was chosen by the client itself." in page
    assert '<strong id="redirect-host">127.0.0.1</strong>' in page
    assert 'id="loopback-warning"' in page
    assert "Signed in as <strong>alice@example.com</strong>" in page
    assert "Read research evidence and your own Leroy data through MCP" in page
    assert 'name="grant_write"' not in page
    assert 'id="impersonation-warning"' not in page


def test_consent_page_is_hardened_against_framing_caching_and_referrer_leaks(browser: Client, flow):
    response = browser.get(flow().url)

    assert response["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cache-Control"] == "no-store"


def test_client_name_is_escaped_and_a_leroy_lookalike_is_flagged(browser: Client, flow, register):
    client_id = register(client_name="<script>alert(1)</script> Leroy Official")["client_id"]

    page = browser.get(flow(client_id=client_id).url).content.decode()

    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; Leroy Official" in page
    assert 'id="impersonation-warning"' in page


@pytest.mark.parametrize("name", ["L\u0435roy", "L\u0435r\u043ey Connect", "\uff2c\uff45\uff52\uff4f\uff59"])
def test_a_confusable_leroy_lookalike_is_flagged(browser: Client, flow, register, name):
    client_id = register(client_name=name)["client_id"]

    page = browser.get(flow(client_id=client_id).url).content.decode()

    assert 'id="impersonation-warning"' in page


def test_an_ordinary_client_name_is_not_flagged(browser: Client, flow, register):
    client_id = register(client_name="Claude Desktop")["client_id"]

    page = browser.get(flow(client_id=client_id).url).content.decode()

    assert 'id="impersonation-warning"' not in page


def test_unnamed_client_is_shown_as_such(browser: Client, flow, register):
    client_id = register(client_name=None)["client_id"]

    page = browser.get(flow(client_id=client_id).url).content.decode()

    assert "Connect Unnamed client to your Leroy account?" in page
    assert client_id in page


def test_https_redirect_host_shows_no_loopback_warning(browser: Client, flow, register):
    client_id = register(redirect_uris=["https://agent.example/cb"])["client_id"]

    page = browser.get(flow(client_id=client_id, redirect_uri="https://agent.example/cb").url).content.decode()

    assert '<strong id="redirect-host">agent.example</strong>' in page
    assert 'id="loopback-warning"' not in page


def test_authorize_redirects_with_code_state_and_issuer(browser: Client, flow):
    started = flow()

    response = consent(browser, started)

    assert response.status_code == 302
    assert response["Location"].startswith(REDIRECT_URI + "?")
    params = query_of(response["Location"])
    assert params["state"] == started.params["state"]
    assert params["iss"] == ORIGIN
    grant = Grant.objects.get(code=sha256_hex(params["code"]))
    assert grant.resource == [RESOURCE]
    assert grant.code_challenge_method == "S256"
    assert grant.scope == "mcp:read"


def test_cancel_redirects_access_denied_with_state_and_issuer(browser: Client, flow):
    started = flow()

    response = consent(browser, started, allow=None)

    assert response.status_code == 302
    assert query_of(response["Location"]) == {
        "error": "access_denied",
        "state": started.params["state"],
        "iss": ORIGIN,
    }
    assert Grant.objects.count() == 0


def test_cancel_with_a_tampered_redirect_uri_does_not_redirect(browser: Client, flow):
    response = consent(browser, flow(), allow=None, redirect_uri="https://evil.example/steal")

    assert response.status_code == 400
    assert "Location" not in response


def test_write_scope_is_granted_only_when_the_user_ticks_it(browser: Client, flow):

    granted = consent(browser, flow(scope="mcp:read mcp:write"), grant_write="on")
    withheld = consent(browser, flow(scope="mcp:read mcp:write"))

    assert Grant.objects.get(code=sha256_hex(query_of(granted["Location"])["code"])).scope == "mcp:read mcp:write"
    assert Grant.objects.get(code=sha256_hex(query_of(withheld["Location"])["code"])).scope == "mcp:read"


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"code_challenge": None, "code_challenge_method": None}, "invalid_request"),
        ({"code_challenge_method": "plain"}, "invalid_request"),
        ({"code_challenge_method": None}, "invalid_request"),
        ({"code_challenge": "too-short"}, "invalid_request"),
        ({"resource": None}, "invalid_target"),
        ({"resource": "https://evil.example/api/mcp"}, "invalid_target"),
        ({"resource": ORIGIN}, "invalid_target"),
        ({"resource": RESOURCE + "/"}, "invalid_target"),
        ({"resource": [RESOURCE, RESOURCE]}, "invalid_target"),
        ({"resource": [RESOURCE, "https://other.example/api"]}, "invalid_target"),
        ({"response_type": "token"}, "unauthorized_client"),
        ({"scope": "mcp:admin"}, "invalid_scope"),
    ],
)
def test_invalid_requests_render_an_error_page_before_consent_and_never_redirect(
    browser: Client, flow, overrides, error
):
    response = browser.get(flow(**overrides).url)

    assert response.status_code in {400, 401}
    assert "Location" not in response
    assert f'<code id="oauth-error">{error}</code>' in response.content.decode()
    assert 'id="authorizationForm"' not in response.content.decode()


def test_resource_with_default_port_and_upper_case_host_is_the_same_resource(browser: Client, flow):
    started = flow(resource="HTTP://127.0.0.1:8000/api/mcp")

    response = consent(browser, started)

    assert Grant.objects.get(code=sha256_hex(query_of(response["Location"])["code"])).resource == [RESOURCE]


@pytest.mark.parametrize(
    "redirect_uri",
    [
        "http://127.0.0.1:53117/other",
        "http://127.0.0.1:53117/callback?x=1",
        "http://evil.example:53117/callback",
        "http://user@127.0.0.1:53117/callback",
        "http://127.0.0.1:53117/callback#frag",
        "https://evil.example/",
    ],
)
def test_unregistered_redirect_uri_gets_an_error_page_and_no_redirect(browser: Client, flow, redirect_uri):
    response = browser.get(flow(redirect_uri=redirect_uri).url)

    assert response.status_code == 400
    assert "Location" not in response
    assert Grant.objects.count() == 0


def test_loopback_ip_redirect_may_change_port_but_localhost_and_https_may_not(browser: Client, flow, register):
    assert browser.get(flow(redirect_uri="http://127.0.0.1:1/callback").url).status_code == 200
    localhost = register(redirect_uris=["http://localhost:4000/cb", "https://agent.example:8443/cb"])["client_id"]
    assert browser.get(flow(client_id=localhost, redirect_uri="http://localhost:4001/cb").url).status_code == 400
    assert browser.get(flow(client_id=localhost, redirect_uri="https://agent.example:9443/cb").url).status_code == 400
    assert browser.get(flow(client_id=localhost, redirect_uri="http://localhost:4000/cb").url).status_code == 200


def test_unknown_client_gets_an_error_page(browser: Client, flow):
    response = browser.get(flow(client_id="no-such-client").url)

    assert response.status_code == 400
    assert "Location" not in response


def test_approval_prompt_auto_still_shows_consent(browser: Client, flow, connect):
    client_id = connect()["client_id"]

    response = browser.get(flow(client_id=client_id, approval_prompt="auto").url)

    assert response.status_code == 200
    assert 'id="authorizationForm"' in response.content.decode()


def test_signed_out_user_goes_to_login_even_with_prompt_none(client: Client, flow):
    response = client.get(flow(prompt="none").url)

    assert response.status_code == 302
    assert response["Location"].startswith("/account/login/?next=/oauth/authorize/")


def test_login_next_to_another_site_stays_on_site(client: Client, owner):
    response = client.post(
        "/account/login/?" + urlencode({"next": "https://evil.example/"}),
        {"username": "alice@example.com", "password": "correct horse battery staple"},
    )

    assert response.status_code == 302
    assert response["Location"] == "/account/"


def test_consent_post_without_csrf_token_is_refused(browser: Client, flow):
    started = flow()
    form = hidden_inputs(browser.get(started.url).content.decode()) | {"allow": "Authorize"}
    del form["csrfmiddlewaretoken"]

    response = browser.post(started.url, form)

    assert response.status_code == 403
    assert Grant.objects.count() == 0


@pytest.mark.parametrize(
    "tampered",
    [
        {"code_challenge_method": "plain"},
        {"resource": "https://evil.example/api/mcp"},
        {"resource": ""},
        {"resource": RESOURCE + " https://evil.example/api"},
        {"redirect_uri": "https://evil.example/cb"},
        {"client_id": "no-such-client"},
    ],
)
def test_tampered_consent_form_is_refused_without_a_grant_or_redirect(browser: Client, flow, tampered):
    response = consent(browser, flow(), **tampered)

    assert response.status_code in {400, 401}
    assert "Location" not in response
    assert Grant.objects.count() == 0


def test_a_new_user_signing_up_from_the_login_page_returns_to_the_consent_page(
    client: Client, flow, mailoutbox, django_capture_on_commit_callbacks
):
    authorize_url = flow().url
    login_page = client.get(client.get(authorize_url)["Location"])
    signup_link = f"/account/signup/?next={quote(authorize_url, safe='/')}"
    assert signup_link in login_page.content.decode().replace("&amp;", "&")

    signup_page = client.get(signup_link)
    with django_capture_on_commit_callbacks(
        execute=True
    ):  # the sign-up mail is sent by a task, once the request commits
        client.post(signup_link, {"email": "newbie@example.com", "next": authorize_url})
    [link] = re.findall(r"http://\S+/account/signup/confirm/\S+", mailoutbox[0].body)
    form_page = client.get(link.removeprefix(ORIGIN), follow=True)
    password = "a long enough passphrase"
    response = client.post(form_page.redirect_chain[-1][0], {"new_password1": password, "new_password2": password})

    assert f'name="next" value="{escape(authorize_url)}"' in signup_page.content.decode()
    assert response.status_code == 302
    assert response["Location"] == authorize_url
    assert 'id="authorizationForm"' in client.get(authorize_url).content.decode()


def test_signup_never_continues_to_another_site(client: Client, mailoutbox, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        client.post("/account/signup/?next=https://evil.example/", {"email": "newbie@example.com"})
    [link] = re.findall(r"http://\S+/account/signup/confirm/\S+", mailoutbox[0].body)
    form_page = client.get(link.removeprefix(ORIGIN), follow=True)
    password = "a long enough passphrase"

    response = client.post(form_page.redirect_chain[-1][0], {"new_password1": password, "new_password2": password})

    assert "evil.example" not in link
    assert response.status_code == 302
    assert response["Location"] == "/account/"


def test_a_consent_post_cannot_grant_more_than_the_page_showed(browser: Client, flow):
    response = consent(browser, flow(), scope="mcp:read mcp:write", grant_write="on")

    assert response.status_code == 400
    assert "Location" not in response
    assert Grant.objects.count() == 0


def test_a_consent_post_without_the_page_is_refused(browser: Client, flow):
    shown = flow()
    page = browser.get(shown.url)
    form = hidden_inputs(page.content.decode()) | {"allow": "Authorize"}
    browser.post(shown.url, form)  # the first POST uses up what the page showed

    again = browser.post(shown.url, form)

    assert again.status_code == 400
    assert Grant.objects.count() == 1


def test_consent_post_with_the_browsers_same_origin_header_is_accepted(browser: Client, flow):
    # Under same-origin referrer policy a browser sends the page's own origin; no-referrer made it `null`.
    started = flow()
    form = hidden_inputs(browser.get(started.url).content.decode()) | {"allow": "Authorize"}

    response = browser.post(started.url, form, HTTP_ORIGIN="http://testserver")

    assert response.status_code == 302
    assert query_of(response["Location"])["state"] == started.params["state"]
    assert Grant.objects.count() == 1


def test_consent_post_with_a_null_origin_is_refused(browser: Client, flow):
    started = flow()
    form = hidden_inputs(browser.get(started.url).content.decode()) | {"allow": "Authorize"}

    response = browser.post(started.url, form, HTTP_ORIGIN="null")

    assert response.status_code == 403
    assert Grant.objects.count() == 0


def test_write_is_never_pre_ticked_so_authorize_alone_grants_read_only(browser: Client, flow):
    started = flow(scope="mcp:read mcp:write")
    page = browser.get(started.url).content.decode()
    checkbox = re.search(r'<input type="checkbox" name="grant_write"[^>]*>', page)
    # What a browser submits when the user only presses Authorize: hidden fields and the boxes ticked as shown.
    form = hidden_inputs(page) | {"allow": "Authorize"}
    if checkbox and "checked" in checkbox.group(0):
        form["grant_write"] = "on"

    response = browser.post(started.url, form)

    assert checkbox is not None
    assert Grant.objects.get(code=sha256_hex(query_of(response["Location"])["code"])).scope == "mcp:read"
