"""The SSRF guard: every target below points at a live receiver on 127.0.0.1 that is NOT allow-listed (its port is
accepted, so only the guard stands in the way); each is refused at creation or at delivery and the receiver sees
no connection at all."""

import ssl
from collections.abc import Iterator

import pytest
from django.test import override_settings

from alerts import services, webhooks
from alerts.models import AlertRule, Attempt
from tests.alerts.conftest import PUBLIC_ADDRESS, make_rule
from tests.alerts.receiver import Receiver, self_signed

pytestmark = pytest.mark.django_db


@pytest.fixture
def victim() -> Iterator[Receiver]:
    """An internal service on loopback that the guard must keep Leroy away from."""
    server = Receiver()
    with override_settings(LEROY_WEBHOOK_ALLOW_HOSTS=[], LEROY_WEBHOOK_PORTS=[443, 8443, server.port]):
        yield server
    server.stop()


LITERALS = [
    ("127.0.0.1", "loopback"),
    ("[::1]", "IPv6 loopback"),
    ("10.0.0.1", "10/8"),
    ("172.16.0.1", "172.16/12"),
    ("192.168.1.1", "192.168/16"),
    ("169.254.169.254", "metadata"),
    ("100.64.0.1", "CGNAT"),
    ("0.0.0.0", "unspecified"),  # noqa: S104 - a target, not a bind address
    ("[::ffff:127.0.0.1]", "IPv4-mapped"),
    ("[fd00::1]", "IPv6 unique-local"),
    ("2130706433", "decimal 127.0.0.1"),
    ("0177.0.0.1", "octal 127.0.0.1"),
    ("0x7f.1", "hex short form"),
    ("127.1", "short form"),
]


@pytest.mark.parametrize(("host", "what"), LITERALS, ids=[w for _, w in LITERALS])
def test_ip_literals_in_any_spelling_are_refused_at_creation(victim, owner, host, what):
    with pytest.raises(webhooks.UnsafeEndpoint) as refused:
        make_rule(owner, f"https://{host}:{victim.port}/hook")

    assert refused.value.reason == "ip_literal"
    assert AlertRule.objects.exists() is False
    assert victim.connections == 0


RESOLVED = [
    (["127.0.0.1"], "loopback"),
    (["::1"], "loopback"),
    (["10.1.2.3"], "private"),
    (["172.31.0.9"], "private"),
    (["192.168.0.10"], "private"),
    (["169.254.169.254"], "link_local"),
    (["100.64.0.7"], "special_purpose"),
    (["0.0.0.0"], "unspecified"),  # noqa: S104 - a target, not a bind address
    (["::ffff:127.0.0.1"], "ipv4_mapped"),
    (["fd12:3456::1"], "private"),
    (["fe80::1"], "link_local"),
    (["224.0.0.1"], "multicast"),
    (["240.0.0.1"], "reserved"),
    (["64:ff9b::7f00:1"], "loopback"),  # NAT64 of 127.0.0.1
    (["2002:7f00:1::1"], "special_purpose"),  # 6to4 of 127.0.0.1
    (["192.0.0.8"], "special_purpose"),
    ([PUBLIC_ADDRESS, "127.0.0.1"], "loopback"),  # one private record fails the whole name
]


@pytest.mark.parametrize(("addresses", "reason"), RESOLVED, ids=["+".join(a) for a, _ in RESOLVED])
def test_a_hostname_resolving_to_a_non_public_address_is_refused_at_creation(victim, owner, dns, addresses, reason):
    dns["internal.example"] = addresses

    with pytest.raises(webhooks.UnsafeEndpoint) as refused:
        make_rule(owner, f"https://internal.example:{victim.port}/hook")

    assert refused.value.reason == reason
    assert AlertRule.objects.exists() is False
    assert victim.connections == 0


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://hooks.example.com/hook", "scheme"),
        ("ftp://hooks.example.com/hook", "scheme"),
        ("https://user:password@hooks.example.com/hook", "credentials"),
        ("https://token@hooks.example.com/hook", "credentials"),
        ("https://hooks.example.com:22/hook", "port"),
        ("https://hooks.example.com:99999/hook", "malformed"),
        ("https:///hook", "malformed"),
        ("https://localhost/hook", "loopback"),
        ("https://does-not-exist.invalid/hook", "unresolvable"),
    ],
)
def test_urls_that_are_not_plain_public_https_are_refused(victim, owner, url, reason):
    with pytest.raises(webhooks.UnsafeEndpoint) as refused:
        make_rule(owner, url)

    assert refused.value.reason == reason
    assert AlertRule.objects.exists() is False


def test_a_host_that_turns_private_after_creation_is_refused_at_delivery(victim, owner, dns):
    dns["rebind.example"] = [PUBLIC_ADDRESS]
    rule, _ = make_rule(owner, f"https://rebind.example:{victim.port}/hook")
    dns["rebind.example"] = ["127.0.0.1"]

    delivery = services.send_test_event(user=owner, alert_id=rule.public_id)

    [attempt] = Attempt.objects.all()
    assert (delivery.status, attempt.outcome, attempt.resolved_ip) == ("failed", "unsafe_endpoint", "")
    assert "loopback" in attempt.error
    assert victim.connections == 0


def test_a_redirect_to_loopback_is_not_followed(victim, owner, receiver):
    # `receiver` is allow-listed; it answers with a redirect to the victim, which must never be contacted.
    receiver.behaviour.status = 302
    receiver.behaviour.headers = {"Location": victim.url()}
    rule, _ = make_rule(owner, receiver.url())

    delivery = services.send_test_event(user=owner, alert_id=rule.public_id)

    [attempt] = Attempt.objects.all()
    assert (delivery.status, attempt.status_code, attempt.outcome) == ("failed", 302, "redirect_refused")
    assert len(receiver.requests) == 1
    assert victim.connections == 0


def test_the_connection_is_pinned_to_the_checked_address(owner, dns, receiver):
    class Rebinding(list[str]):
        """Loopback (allow-listed) on the first lookup, an unroutable address on any later one."""

        served = 0

        def __iter__(self):  # type: ignore[no-untyped-def]
            Rebinding.served += 1
            return iter(["127.0.0.1"] if Rebinding.served == 1 else ["10.255.255.1"])

    with override_settings(LEROY_WEBHOOK_ALLOW_HOSTS=[f"pinned.example:{receiver.port}"]):
        dns["pinned.example"] = ["127.0.0.1"]
        rule, _ = make_rule(owner, f"http://pinned.example:{receiver.port}/hook")
        dns["pinned.example"] = Rebinding()
        dns.lookups.clear()
        delivery = services.send_test_event(user=owner, alert_id=rule.public_id)

    assert delivery.status == "delivered"
    assert dns.lookups.count("pinned.example") == 1
    [received] = receiver.requests
    assert received.headers["host"] == f"pinned.example:{receiver.port}"


def test_the_certificate_must_match_the_hostname(owner, dns, tmp_path):
    cert, key = self_signed(tmp_path, hostname="localhost")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = Receiver(tls=context)
    dns["impostor.example"] = ["127.0.0.1"]
    try:
        with override_settings(
            LEROY_WEBHOOK_ALLOW_HOSTS=[f"impostor.example:{server.port}"], LEROY_WEBHOOK_CA_BUNDLE=str(cert)
        ):
            rule, _ = make_rule(owner, f"https://impostor.example:{server.port}/hook")
            delivery = services.send_test_event(user=owner, alert_id=rule.public_id)
    finally:
        server.stop()

    [attempt] = Attempt.objects.all()
    assert (delivery.status, attempt.outcome) == ("failed", "tls_error")
    assert server.requests == []


def test_an_untrusted_certificate_is_refused(owner, tls_receiver):
    rule, _ = make_rule(owner, tls_receiver.url(host="localhost"))

    with override_settings(LEROY_WEBHOOK_CA_BUNDLE=""):
        delivery = services.send_test_event(user=owner, alert_id=rule.public_id)

    [attempt] = Attempt.objects.all()
    assert (delivery.status, attempt.outcome) == ("failed", "tls_error")
    assert tls_receiver.requests == []
