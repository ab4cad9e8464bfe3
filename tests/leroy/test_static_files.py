"""Static files are answered as pages are: with the pages' security headers, and a refused path is a 404."""

import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

PAGE_HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options", "referrer-policy")


async def test_a_static_file_carries_the_headers_every_page_carries(mcp_http):
    async with mcp_http() as http:
        page = await http.get("/account/login/")
        stylesheet = await http.get("/static/leroy/site.css")

    assert stylesheet.status_code == 200
    assert "svg.chart" in stylesheet.text
    assert {name: stylesheet.headers.get(name) for name in PAGE_HEADERS} == {
        name: page.headers[name] for name in PAGE_HEADERS
    }
    assert stylesheet.headers["x-frame-options"] == "DENY"
    assert stylesheet.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    "path",
    ["/static/nope.css", "/static/..%2f..%2fleroy%2fsettings.py", "/static/%2e%2e/%2e%2e/var/secret_key",
     "/static/leroy/../../../leroy/settings.py"],
)  # fmt: skip
async def test_a_static_path_that_is_no_file_or_climbs_out_is_a_404_with_the_page_headers(mcp_http, path):
    async with mcp_http() as http:
        response = await http.get(path)

    assert response.status_code == 404
    assert "SECRET" not in response.text
    assert response.headers["x-frame-options"] == "DENY"
    assert "content-security-policy" in response.headers
