import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from alerts import services
from tests.alerts.receiver import Receiver, self_signed

PUBLIC_ADDRESS = "93.184.215.14"


class Resolver(dict[str, list[str]]):
    """Hostname -> addresses, and every name looked up (in order)."""

    lookups: list[str]


@pytest.fixture(autouse=True)
def dns(monkeypatch: pytest.MonkeyPatch) -> Resolver:
    """Names the tests resolve without a network: hostname -> addresses (others go to the real resolver).

    hooks.example.com stands for a public receiver; tests add names that resolve to private addresses."""
    table = Resolver({"hooks.example.com": [PUBLIC_ADDRESS]})
    table.lookups = []
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):  # type: ignore[no-untyped-def]
        table.lookups.append(host)
        if isinstance(host, str) and host in table:
            return [
                (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in table[host]
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return table


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A plain-HTTP receiver on 127.0.0.1, listed in LEROY_WEBHOOK_ALLOW_HOSTS."""
    server = Receiver()
    with override_settings(LEROY_WEBHOOK_ALLOW_HOSTS=[f"127.0.0.1:{server.port}"]):
        yield server
    server.stop()


@pytest.fixture
def tls_receiver(tmp_path: Path) -> Iterator[Receiver]:
    """An HTTPS receiver for `localhost` with a self-signed certificate that Leroy is told to trust."""
    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = Receiver(tls=context)
    with override_settings(LEROY_WEBHOOK_ALLOW_HOSTS=[f"localhost:{server.port}"], LEROY_WEBHOOK_CA_BUNDLE=str(cert)):
        yield server
    server.stop()


def make_rule(user, url: str, **fields):
    values = {
        "name": "wake me",
        "symbols": None,
        "universe": True,
        "side": "buy",
        "horizon_minutes": 15,
        "min_active_signals": 0,
        "min_match_tier": 1,
        "min_win_rate": None,
        "min_average_return_pct": None,
        "endpoint_url": url,
        "expires_at": None,
        **fields,
    }
    return services.rule_create(user=user, **values)
