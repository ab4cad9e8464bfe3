"""Real-browser tests: Debian's Chromium (driven by pytest-playwright) against Leroy's ASGI app under uvicorn.

The server runs in a thread of this process on a free loopback port, over the transactional test database,
so the rows a test creates are what the server sees and the test's settings (public origin, e-mail outbox)
are the server's. Every page a test opens must carry a Content-Security-Policy and log no console error.
"""

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import ConsoleMessage, Error, Page, Response

from accounts.models import User
from leroy.settings import oauth2_provider_settings
from tests.live import live_server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "correct horse battery staple"
E2E_DIR = Path(__file__).parent


@pytest.hookimpl(trylast=True)  # after pytest-django's own reordering (transactional tests first)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    e2e = [item for item in items if Path(str(item.path)).is_relative_to(E2E_DIR)]
    if not e2e:
        return
    if not os.path.exists(CHROMIUM):
        skip = pytest.mark.skip(reason=f"{CHROMIUM} is absent: install Debian's chromium package (.ci/run does)")
        for item in e2e:
            item.add_marker(skip)
    # Playwright's sync API keeps an event loop running on the main thread for the rest of the session;
    # run these last so that no other test's sync ORM or anyio.run sees it.
    items[:] = [item for item in items if item not in e2e] + e2e


@pytest.fixture(scope="session")
def browser_type_launch_args(django_db_setup: None) -> dict[str, object]:
    # Depends on the test database so that it is set up before Playwright starts and dropped after it stops.
    return {"executable_path": CHROMIUM, "headless": True, "args": CHROMIUM_FLAGS}


@pytest.fixture(scope="session")
def browser_context_args() -> dict[str, object]:
    return {"viewport": {"width": 1280, "height": 900}}


@pytest.fixture(autouse=True)
def _sync_orm_beside_playwright(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test body's ORM calls run on the main thread, where Playwright's loop is running (see above).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def _uvicorn(django_db_setup: None) -> Iterator[str]:
    """leroy.asgi:application under uvicorn on a free loopback port, for the whole session."""
    from leroy.asgi import application

    with live_server(application, start_seconds=15) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def origin(_uvicorn: str, transactional_db: None, settings) -> str:
    settings.LEROY_PUBLIC_ORIGIN = _uvicorn
    settings.OAUTH2_PROVIDER = oauth2_provider_settings(_uvicorn)
    settings.CSRF_TRUSTED_ORIGINS = [_uvicorn]
    return _uvicorn


@dataclass
class Watch:
    """What the browser saw: console errors, uncaught exceptions, and our documents lacking a CSP."""

    origin: str
    errors: list[str] = field(default_factory=list)
    documents: list[str] = field(default_factory=list)
    without_csp: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)

    def allow(self, text: str) -> None:
        """A console error the test provokes on purpose (e.g. the browser logging an expected 429)."""
        self.allowed.append(text)

    def console(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not any(text in message.text for text in self.allowed):
            self.errors.append(f"console: {message.text} ({message.location.get('url', '')})")

    def page_error(self, error: Error) -> None:
        self.errors.append(f"uncaught: {error.message}")

    def response(self, response: Response) -> None:
        if response.request.resource_type == "document" and response.url.startswith(self.origin):
            self.documents.append(response.url)
            if "content-security-policy" not in response.headers:
                self.without_csp.append(response.url)


@pytest.fixture
def watch(origin: str) -> Watch:
    return Watch(origin)


@pytest.fixture
def person(page: Page, watch: Watch) -> Iterator[Page]:
    """A browser tab on Leroy; at the end, every page it opened had a CSP and no console error."""
    page.on("console", watch.console)
    page.on("pageerror", watch.page_error)
    page.on("response", watch.response)
    page.set_default_timeout(10_000)
    yield page
    assert watch.documents, "the test opened no Leroy page"
    assert watch.without_csp == []
    assert watch.errors == []


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-screenshots", numbered=False)


# Every chart label as drawn: its font size on screen (its size in the chart's units times the chart's scale) and
# whether it lies within its chart.
LABELS_DRAWN = """() => Array.from(document.querySelectorAll("svg.chart .tick"), (label) => {
  const box = label.getBoundingClientRect(), chart = label.ownerSVGElement.getBoundingClientRect();
  return {
    text: label.textContent,
    px: Math.round(parseFloat(getComputedStyle(label).fontSize) * label.getScreenCTM().a * 10) / 10,
    inside: box.left >= chart.left - 1 && box.right <= chart.right + 1 && box.top >= chart.top - 1
      && box.bottom <= chart.bottom + 1,
  };
})"""


@pytest.fixture
def shoot(person: Page, screenshots: Path, request: pytest.FixtureRequest):
    """Save the page at desktop width and at 390 px (a phone) under the pytest tmp dir for review."""

    def take(name: str) -> None:
        stem = re.sub(r"[^a-z0-9_-]+", "-", f"{request.node.name}-{name}".lower())
        person.screenshot(path=screenshots / f"{stem}-desktop.png", full_page=True)
        size = person.viewport_size
        person.set_viewport_size({"width": 390, "height": 844})
        person.screenshot(path=screenshots / f"{stem}-phone.png", full_page=True)
        # A phone must not have to scroll sideways.
        overflow = person.evaluate("document.documentElement.scrollWidth > window.innerWidth")
        labels = person.evaluate(LABELS_DRAWN)
        if size:
            person.set_viewport_size(size)
        assert overflow is False, f"{name} is wider than 390 px"
        assert [label for label in labels if label["px"] < 11 or not label["inside"]] == [], name

    return take


def log_in(page: Page, origin: str, email: str, password: str = PASSWORD) -> None:
    page.goto(origin + "/account/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


@pytest.fixture
def alice(origin: str) -> User:
    from accounts import services

    user = services.user_create(email="alice@example.com", password=PASSWORD)
    services.mcp_activate(user=user)
    return user
