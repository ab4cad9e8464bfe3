"""Outbound webhooks that cannot be turned against Leroy's own network (SSRF guard), and the pinned POST.

`endpoint_check` runs at rule creation and again before every attempt: https only (LEROY_WEBHOOK_PORTS), no
credentials in the URL, no IP literals in any spelling, and every address the host resolves to must be public
unicast. The one exception is LEROY_WEBHOOK_ALLOW_HOSTS (`host:port` entries): those receivers may use http and
loopback or private addresses (self-hosted receivers, tests). The host is resolved once per attempt and the
connection goes to that checked address (no second lookup, so DNS rebinding cannot redirect it) while TLS still
verifies the certificate for the hostname. Redirects are never followed, timeouts are short (and an attempt ends at
LEROY_WEBHOOK_TOTAL_TIMEOUT in all), and at most LEROY_WEBHOOK_RESPONSE_BYTES of the answer are read.
"""

import contextlib
import ipaddress
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import urllib3
from django.conf import settings
from urllib3.connection import HTTPConnection
from urllib3.util.ssl_ import create_urllib3_context

from leroy.errors import DomainError

# Ranges Python's is_global still calls global, or that wrap another address (notes/billing.md §3).
_BLOCKED = tuple(
    ipaddress.ip_network(net)
    for net in ("192.0.0.0/24", "64:ff9b:1::/48", "2002::/16", "2001::/32", "100.64.0.0/10", "198.18.0.0/15")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeEndpoint(DomainError):
    """The endpoint URL was refused; nothing was sent."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__("unsafe_endpoint", message, reason=reason)
        self.reason = reason


@dataclass(frozen=True)
class Endpoint:
    """A checked endpoint: where to connect (the pinned address) and what to ask for."""

    scheme: str
    host: str  # lowercase hostname (or IP literal for an allow-listed entry), no brackets
    port: int
    target: str  # path and query
    address: str  # the checked address the connection is pinned to
    allow_listed: bool

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def _allow_list() -> set[str]:
    return {entry.strip().lower() for entry in settings.LEROY_WEBHOOK_ALLOW_HOSTS if entry.strip()}


def _is_ip_literal(host: str) -> bool:
    """True for any spelling the resolver would read as an address: 127.0.0.1, 2130706433, 0177.0.0.1, 0x7f.1, ::1."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        socket.inet_aton(host)  # the BSD parser glibc's resolver uses: decimal, octal, hex, short forms
        return True
    except OSError:
        return False


def _unwrap(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def address_refusal(address: IPAddress, *, allow_listed: bool) -> str | None:
    """Why `address` may not be connected to, or None. Allow-listed receivers may be loopback or private."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return "ipv4_mapped"
    address = _unwrap(address)
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address.is_link_local:
        return "link_local"  # includes the 169.254.169.254 metadata address
    if address.is_loopback:  # before is_reserved, which ::1 also is
        return None if allow_listed else "loopback"
    if address.is_reserved:
        return "reserved"
    if allow_listed and address.is_private:
        return None
    if any(address in net for net in _BLOCKED if net.version == address.version):
        return "special_purpose"
    if address.is_private or not address.is_global:
        return "private"
    return None


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (one lookup), in the resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def endpoint_check(url: str) -> Endpoint:
    """Parse, resolve once and check `url`; raise UnsafeEndpoint with a machine-readable reason."""
    if len(url) > 2000:
        raise UnsafeEndpoint("too_long", "The endpoint URL is longer than 2000 characters.")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise UnsafeEndpoint("malformed", "The endpoint URL cannot be parsed.") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise UnsafeEndpoint("scheme", "The endpoint must be an https:// URL.")
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise UnsafeEndpoint("credentials", "The endpoint URL must not carry credentials (user:password@).")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise UnsafeEndpoint("malformed", "The endpoint URL has no host.")
    port = port or (443 if scheme == "https" else 80)
    shown = f"[{host}]" if ":" in host else host
    allow_listed = f"{shown}:{port}" in _allow_list()
    if scheme == "http" and not allow_listed:
        raise UnsafeEndpoint("scheme", "The endpoint must be an https:// URL.")
    if not allow_listed and port not in settings.LEROY_WEBHOOK_PORTS:
        ports = ", ".join(map(str, settings.LEROY_WEBHOOK_PORTS))
        raise UnsafeEndpoint("port", f"The endpoint port must be one of {ports}.")
    if not allow_listed and _is_ip_literal(host):
        raise UnsafeEndpoint("ip_literal", "The endpoint must name a host, not an IP address.")
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError):
        raise UnsafeEndpoint("unresolvable", f"The endpoint host {host} does not resolve.") from None
    if not addresses:
        raise UnsafeEndpoint("unresolvable", f"The endpoint host {host} does not resolve.")
    for address in addresses:
        refusal = address_refusal(ipaddress.ip_address(address.split("%")[0]), allow_listed=allow_listed)
        if refusal is not None:
            raise UnsafeEndpoint(
                refusal, f"The endpoint host {host} resolves to a non-public address ({refusal}); nothing is sent."
            )
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Endpoint(scheme, host, port, target, addresses[0], allow_listed)


@dataclass(frozen=True)
class Sent:
    """What one POST produced: an HTTP status, or an error kind when no status came back."""

    status_code: int | None
    outcome: str  # success, http_error, gone, redirect_refused, timeout, connection_error, tls_error
    error: str
    snippet: str
    duration_ms: int
    retry_after: int | None = None


def _classify(status: int) -> str:
    if 200 <= status < 300:
        return "success"
    if status == 410:
        return "gone"
    if 300 <= status < 400:
        return "redirect_refused"
    return "http_error"


class Deadline:
    """An attempt's end, LEROY_WEBHOOK_TOTAL_TIMEOUT after it starts. The connect and read timeouts bound each
    operation, not a receiver that answers a byte every few seconds (found from outside: one test delivery held its
    request 336 s, and a few of them every web slot). At the deadline the attempt's socket is shut down, which ends
    the read or TLS handshake blocked on it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.passed = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._end)
        self._timer.daemon = True

    def __enter__(self) -> "Deadline":
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.passed:
                _shut(sock)

    def _end(self) -> None:
        with self._lock:
            self.passed = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    # The plain socket's shutdown, also for TLS: SSLSocket's own drops its SSL state under the blocked reader.
    with contextlib.suppress(OSError):  # closed already
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _WatchedHTTPConnection(HTTPConnection):
    """A connection whose socket its attempt's Deadline can shut down."""

    def __init__(self, *args: Any, deadline: Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        self.deadline.watch(sock)
        return sock


class _WatchedSSLSocket(ssl.SSLSocket):
    """A TLS socket its attempt's Deadline can shut down from the start of its handshake. An https connection's
    plain socket is not watched (its TCP connect is bounded by the connect timeout, inside the deadline): wrapping
    detaches it, so the TLS socket is the one to shut down."""

    def do_handshake(self, block: bool = False) -> None:
        self.context.leroy_deadline.watch(self)  # type: ignore[attr-defined]
        super().do_handshake(block)


def _tls_context(deadline: Deadline) -> ssl.SSLContext:
    """urllib3's default context (CERT_REQUIRED) with the system's CAs unless LEROY_WEBHOOK_CA_BUNDLE names others
    (urllib3 loads those), its sockets watched by `deadline`."""
    context = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED)
    if not settings.LEROY_WEBHOOK_CA_BUNDLE:
        context.load_default_certs()
    context.sslsocket_class = _WatchedSSLSocket
    context.leroy_deadline = deadline  # type: ignore[attr-defined]
    return context


def post(endpoint: Endpoint, *, body: bytes, headers: dict[str, str]) -> Sent:
    """POST `body` to the endpoint's pinned address; never follows a redirect, never raises for network faults,
    never takes longer than LEROY_WEBHOOK_TOTAL_TIMEOUT (and a moment to close)."""
    with Deadline(settings.LEROY_WEBHOOK_TOTAL_TIMEOUT) as deadline:
        return _post(endpoint, body, headers, deadline)


def _post(endpoint: Endpoint, body: bytes, headers: dict[str, str], deadline: Deadline) -> Sent:
    timeout = urllib3.Timeout(connect=settings.LEROY_WEBHOOK_CONNECT_TIMEOUT, read=settings.LEROY_WEBHOOK_READ_TIMEOUT)
    pool: urllib3.HTTPConnectionPool
    if endpoint.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(
            endpoint.address, endpoint.port, timeout=timeout, retries=False, maxsize=1,
            cert_reqs="CERT_REQUIRED", ca_certs=settings.LEROY_WEBHOOK_CA_BUNDLE or None,
            server_hostname=endpoint.host, assert_hostname=endpoint.host, ssl_context=_tls_context(deadline),
        )  # fmt: skip
    else:
        pool = urllib3.HTTPConnectionPool(
            endpoint.address, endpoint.port, timeout=timeout, retries=False, maxsize=1, deadline=deadline
        )
        pool.ConnectionCls = _WatchedHTTPConnection
    started = time.monotonic()
    try:
        response = pool.urlopen(
            "POST", endpoint.target, body=body, headers={**headers, "Host": endpoint.host_header},
            redirect=False, retries=False, assert_same_host=False, preload_content=False, decode_content=False,
        )  # fmt: skip
        try:
            raw = response.read(settings.LEROY_WEBHOOK_RESPONSE_BYTES, decode_content=False)
        except urllib3.exceptions.HTTPError:
            raw = b""  # the status line arrived; a broken or slow body does not change the outcome
        finally:
            response.release_conn()
            response.close()
        status = response.status
        retry_after = response.headers.get("Retry-After", "")
        kind = _classify(status)
        return Sent(
            status_code=status,
            outcome=kind,
            error="" if kind == "success" else f"HTTP {status}",
            snippet=raw.decode("utf-8", "replace"),
            duration_ms=int((time.monotonic() - started) * 1000),
            retry_after=int(retry_after) if retry_after.isdigit() else None,
        )
    except (urllib3.exceptions.HTTPError, OSError) as error:
        if deadline.passed:  # whatever the shut socket raised, the attempt ran out of time
            passed = TimeoutError(f"no complete answer within {deadline.seconds:g} s in all")
            return _fault("timeout", passed, started)
        return _fault(_fault_kind(error), error, started)
    finally:
        pool.close()


def _fault_kind(error: Exception) -> str:
    if isinstance(error, urllib3.exceptions.SSLError):
        return "tls_error"
    if isinstance(error, urllib3.exceptions.NewConnectionError):  # a ConnectTimeoutError subclass, so tested first
        return "connection_error"
    if isinstance(error, (urllib3.exceptions.TimeoutError, urllib3.exceptions.ConnectTimeoutError)):
        return "timeout"
    return "connection_error"


def _fault(kind: str, error: Exception, started: float) -> Sent:
    reason = getattr(error, "reason", None) or error
    return Sent(
        status_code=None,
        outcome=kind,
        error=f"{type(reason).__name__}: {reason}"[:300],
        snippet="",
        duration_ms=int((time.monotonic() - started) * 1000),
    )
