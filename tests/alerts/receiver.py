"""A real webhook receiver for the tests: a threaded HTTP(S) server on 127.0.0.1 that records every request.

`verify` checks a delivery's signature independently of Leroy's signing code (plain hmac, as a receiver would).
"""

import hashlib
import hmac
import ipaddress
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # lowercase names
    body: bytes


@dataclass
class Behaviour:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    hang: threading.Event | None = None  # when set to an Event, the handler waits for it before answering


class Receiver:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[Received] = []
        self.behaviour = Behaviour()
        self.connections = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                receiver.requests.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                behaviour = receiver.behaviour
                if behaviour.hang is not None:
                    behaviour.hang.wait(30)
                self.send_response(behaviour.status)
                for name, value in behaviour.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(behaviour.body)))
                self.end_headers()
                self.wfile.write(behaviour.body)

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self):  # type: ignore[no-untyped-def]
                sock, address = super().get_request()
                receiver.connections += 1
                return sock, address

        self.server = Server(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, host: str = "127.0.0.1", path: str = "/hook") -> str:
        scheme = "https" if isinstance(self.server.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Dripper:
    """A receiver on 127.0.0.1 that never finishes answering: once a connection has sent anything (a request, or a
    TLS client hello), it answers `answer` one byte every `pause` seconds, each inside any per-read timeout."""

    def __init__(self, answer: bytes, pause: float) -> None:
        self.answer, self.pause = answer, pause
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(sock,), daemon=True).start()

    def _drip(self, sock: socket.socket) -> None:
        with sock:
            try:
                sock.recv(65536)
                for byte in self.answer:
                    if self.stopped.is_set():
                        return
                    sock.sendall(bytes([byte]))
                    time.sleep(self.pause)
            except OSError:
                return  # the client hung up

    def stop(self) -> None:
        self.stopped.set()
        self.listener.close()


def verify(secret: str, received: Received) -> bool:
    delivery = received.headers["x-leroy-delivery"]
    timestamp = received.headers["x-leroy-timestamp"]
    signed = f"{delivery}.{timestamp}.".encode() + received.body
    expected = "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, received.headers["x-leroy-signature"])


def self_signed(directory: Path, hostname: str = "localhost") -> tuple[Path, Path]:
    """A self-signed certificate (and key) for `hostname` and 127.0.0.1, written as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    at = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(at - timedelta(days=1))
        .not_valid_after(at + timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(hostname), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "receiver.pem", directory / "receiver.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path
