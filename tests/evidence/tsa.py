"""A real RFC 3161 time-stamp authority on 127.0.0.1 for tests: `openssl ts -reply` behind a small HTTP server,
with its own root CA and a TSA certificate (critical extendedKeyUsage timeStamping). `mode` makes it misbehave:
garbage, reject (SHA-256 not accepted), wrong_imprint, http_error (503) or slow (2 s, then a valid reply)."""

import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

OPENSSL = "/usr/bin/openssl"
SHA256_OID_DER = bytes.fromhex("0609608648016503040201")
CONFIG = """[ tsa ]
default_tsa = tsa_config
[ tsa_config ]
dir = {dir}
serial = $dir/serial
crypto_device = builtin
signer_cert = $dir/tsa.crt
certs = $dir/tsa.crt
signer_key = $dir/tsa.key
signer_digest = sha256
default_policy = 1.2.3.4.1
digests = {digests}
accuracy = secs:1
ordering = no
tsa_name = no
ess_cert_id_chain = no
ess_cert_id_alg = sha256
[ tsa_ext ]
basicConstraints = critical,CA:false
keyUsage = critical,digitalSignature
extendedKeyUsage = critical,timeStamping
"""


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run([OPENSSL, *map(str, args)], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.crt"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
             "-out", cert, "-days", "3", "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:true",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)  # fmt: skip
    return key, cert


@dataclass
class Tsa:
    directory: Path
    url: str = ""
    root: Path = Path()
    cert: Path = Path()
    mode: str = "ok"
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, query: bytes) -> tuple[int, bytes]:
        self.requests += 1
        if self.mode == "garbage":
            return 200, b"this is not a TimeStampResp"
        if self.mode == "http_error":
            return 503, b"overloaded"
        if self.mode == "slow":
            time.sleep(2)
        if self.mode == "wrong_imprint":  # the same request (nonce and all) over another digest
            at = query.index(b"\x04\x20", query.index(SHA256_OID_DER)) + 2
            query = query[:at] + bytes(b ^ 0xFF for b in query[at : at + 32]) + query[at + 32 :]
        config = "reject.cnf" if self.mode == "reject" else "tsa.cnf"  # reject: SHA-256 not accepted
        with self.lock:  # one serial file
            (self.directory / "query.tsq").write_bytes(query)
            (self.directory / "reply.tsr").unlink(missing_ok=True)
            subprocess.run([OPENSSL, "ts", "-reply", "-queryfile", "query.tsq", "-config", config, "-out",
                            "reply.tsr"], cwd=self.directory, capture_output=True, timeout=60)  # fmt: skip
            return 200, (self.directory / "reply.tsr").read_bytes()


def start_tsa(directory: Path) -> Iterator[Tsa]:
    tsa = Tsa(directory)
    ca_key, tsa.root = make_ca(directory, "Leroy Test Root")
    for name, digests in (("tsa.cnf", "sha256, sha384, sha512"), ("reject.cnf", "sha512")):
        (directory / name).write_text(CONFIG.format(dir=directory, digests=digests))
    (directory / "serial").write_text("01\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "tsa.key", "-out",
             "tsa.csr", "-subj", "/CN=Leroy Test TSA", cwd=directory)  # fmt: skip
    _openssl("x509", "-req", "-in", "tsa.csr", "-CA", tsa.root, "-CAkey", ca_key, "-CAcreateserial", "-out",
             "tsa.crt", "-days", "3", "-extfile", "tsa.cnf", "-extensions", "tsa_ext", cwd=directory)  # fmt: skip
    tsa.cert = directory / "tsa.crt"

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            query = self.rfile.read(int(self.headers["Content-Length"]))
            status, body = tsa.reply(query)
            self.send_response(status)
            self.send_header("Content-Type", "application/timestamp-reply")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    tsa.url = f"http://127.0.0.1:{server.server_address[1]}/tsa"
    try:
        yield tsa
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def tsa_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tsa]:
    yield from start_tsa(tmp_path_factory.mktemp("tsa"))


@pytest.fixture
def tsa(tsa_server: Tsa, settings) -> Iterator[Tsa]:
    """The TSA configured for the log (roots given, so Leroy checks the chain too), behaving well by default."""
    from evidence.publication.services import tsa_roots

    tsa_server.mode, tsa_server.requests = "ok", 0
    settings.LEROY_LOG_TSA_URL, settings.LEROY_LOG_TSA_ROOTS = tsa_server.url, str(tsa_server.root)
    tsa_roots.cache_clear()
    yield tsa_server
    tsa_roots.cache_clear()
