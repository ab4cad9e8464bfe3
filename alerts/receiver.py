"""A local receiver for Leroy's alert webhooks, stdlib only: `python -m alerts.receiver [PORT]` (default 9000).

It prints every delivery with whether its signature verifies against LEROY_WEBHOOK_SECRET (when set), ignores
repeated X-Leroy-Delivery ids, and answers 200. `verify` is the snippet the README documents.
"""

import hashlib
import hmac
import os
import re
import sys
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import cast

TOLERANCE_SECONDS = 300


def verify(secret: str, headers: Mapping[str, str], body: bytes) -> bool:
    """True when `body` (the raw bytes) is a fresh delivery signed with `secret`; headers case-insensitive."""
    delivery, timestamp = headers.get("X-Leroy-Delivery", ""), headers.get("X-Leroy-Timestamp", "")
    # ASCII digits of a bounded length only: str.isdigit() passes '²', and int() refuses 5,000 digits
    if not re.fullmatch(r"[0-9]{1,12}", timestamp) or abs(time.time() - int(timestamp)) > TOLERANCE_SECONDS:
        return False  # missing, stale or future timestamp: reject (replays of old deliveries fail here)
    signed = f"{delivery}.{timestamp}.".encode() + body
    expected = ("v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()).encode()
    signatures = [part.strip().encode() for part in headers.get("X-Leroy-Signature", "").split(",")]
    return any(hmac.compare_digest(expected, candidate) for candidate in signatures)  # bytes: any header is comparable


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    secret = os.environ.get("LEROY_WEBHOOK_SECRET", "")
    seen: set[str] = set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = self.headers.get("Content-Length", "0")
            if not re.fullmatch(r"[0-9]{1,9}", length):  # int() would raise on anything else and drop the client
                return self.answer(400)
            body = self.rfile.read(int(length))
            delivery = self.headers.get("X-Leroy-Delivery", "")
            headers = cast(Mapping[str, str], self.headers)  # an email Message: a case-insensitive mapping
            verdict = ("verified" if verify(secret, headers, body) else "BAD SIGNATURE") if secret else "unchecked"
            repeat = " (repeat, ignored)" if delivery in seen else ""
            seen.add(delivery)
            text = body.decode(errors="replace")  # printed for a person; an unsigned body need not be UTF-8
            print(f"{self.headers.get('X-Leroy-Event')} {delivery} {verdict}{repeat}\n{text}", flush=True)
            self.answer(200 if verdict != "BAD SIGNATURE" else 400)

        def answer(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)  # bound before it says it listens
    print(f"listening on http://127.0.0.1:{port}/ (signature check: {'on' if secret else 'off'})", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
