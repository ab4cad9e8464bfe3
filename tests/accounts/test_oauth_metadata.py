import pytest
from django.test import Client

from tests.accounts.conftest import ORIGIN, RESOURCE

pytestmark = pytest.mark.django_db


def test_protected_resource_metadata_names_the_exact_resource_and_issuer(client: Client):
    response = client.get("/.well-known/oauth-protected-resource/api/mcp")

    assert response.status_code == 200
    assert response.json() == {
        "resource": RESOURCE,
        "authorization_servers": [ORIGIN],
        "scopes_supported": ["mcp:read", "mcp:write"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Leroy MCP",
    }


def test_root_protected_resource_metadata_is_not_served(client: Client):
    assert client.get("/.well-known/oauth-protected-resource").status_code == 404


def test_authorization_server_metadata_advertises_only_what_is_accepted(client: Client):
    response = client.get("/.well-known/oauth-authorization-server")

    assert response.status_code == 200
    assert response.json() == {
        "issuer": ORIGIN,
        "authorization_endpoint": ORIGIN + "/oauth/authorize/",
        "token_endpoint": ORIGIN + "/oauth/token/",
        "revocation_endpoint": ORIGIN + "/oauth/revoke/",
        "registration_endpoint": ORIGIN + "/oauth/register/",
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "scopes_supported": ["mcp:read", "mcp:write"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "authorization_response_iss_parameter_supported": True,
        "client_id_metadata_document_supported": False,
    }


def test_metadata_follows_the_public_origin_setting(client: Client, settings):
    from leroy.settings import oauth2_provider_settings

    settings.LEROY_PUBLIC_ORIGIN = "https://leroy.example"
    settings.OAUTH2_PROVIDER = oauth2_provider_settings("https://leroy.example")

    resource = client.get("/.well-known/oauth-protected-resource/api/mcp").json()
    server = client.get("/.well-known/oauth-authorization-server").json()

    assert resource["resource"] == "https://leroy.example/api/mcp"
    assert resource["authorization_servers"] == [server["issuer"]] == ["https://leroy.example"]
    assert server["token_endpoint"] == "https://leroy.example/oauth/token/"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/.well-known/oauth-authorization-server"),
        ("get", "/.well-known/oauth-protected-resource/api/mcp"),
        ("get", "/oauth/authorize/"),
        ("post", "/oauth/token/"),
        ("post", "/oauth/revoke/"),
        ("post", "/oauth/register/"),
    ],
)
def test_no_oauth_endpoint_answers_an_anonymous_request_with_a_redirect_to_elsewhere(client: Client, method, path):
    response = getattr(client, method)(path)

    if response.status_code == 302:  # only the authorization endpoint, to our own login page
        assert path == "/oauth/authorize/"
        assert response["Location"].startswith("/account/login/?next=")
    else:
        assert response.status_code in {200, 400, 401}
