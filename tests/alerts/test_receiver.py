import http.client
import inspect
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.message import Message
from pathlib import Path

import pytest
import time_machine

from alerts import receiver as local_receiver
from alerts import services
from tests.alerts.conftest import make_rule
from tests.processes import ROOT, free_port, process_env

pytestmark = pytest.mark.django_db
README = Path(__file__).resolve().parents[2] / "README.md"


def as_headers(received) -> Message:
    headers = Message()  # what http.server hands a handler: case-insensitive
    for name, value in received.headers.items():
        headers[name] = value
    return headers


def test_the_readme_documents_the_receivers_verify_verbatim():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)

    assert inspect.getsource(local_receiver.verify) in blocks


def test_verify_accepts_a_real_delivery_and_refuses_tampering_wrong_secrets_and_stale_timestamps(owner, receiver):
    rule, secret = make_rule(owner, receiver.url())
    services.send_test_event(user=owner, alert_id=rule.public_id)
    [received] = receiver.requests
    headers = as_headers(received)

    assert local_receiver.verify(secret, headers, received.body) is True
    assert local_receiver.verify(secret, headers, received.body + b" ") is False
    assert local_receiver.verify(secret.replace("lr_whsec_", "lr_whsec_x"), headers, received.body) is False
    assert local_receiver.verify(secret, Message(), received.body) is False
    signed_at = datetime.fromtimestamp(int(headers["X-Leroy-Timestamp"]), UTC)  # the instant the tolerance is about
    for seconds, fresh in ((300, True), (-300, True), (301, False), (-301, False)):
        with time_machine.travel(signed_at + timedelta(seconds=seconds), tick=False):
            assert local_receiver.verify(secret, headers, received.body) is fresh


HOSTILE_HEADERS = [
    {"X-Leroy-Timestamp": "9" * 5000},  # int() refuses more than 4,300 digits
    {"X-Leroy-Timestamp": "²"},  # str.isdigit() is True, int() raises
    {"X-Leroy-Timestamp": "-1"},
    {"X-Leroy-Timestamp": " 1"},
    {"X-Leroy-Timestamp": "1" * 13},
    {"X-Leroy-Timestamp": "FRESH", "X-Leroy-Signature": "v1=é"},  # compare_digest raises on non-ASCII str
]


def hostile(headers: dict[str, str]) -> dict[str, str]:
    now = str(int(time.time()))
    return {name: now if value == "FRESH" else value for name, value in headers.items()}


@pytest.mark.parametrize("headers", HOSTILE_HEADERS)
def test_verify_refuses_hostile_headers_without_raising(headers: dict[str, str]) -> None:
    assert local_receiver.verify("lr_whsec_test", hostile(headers), b"{}") is False


@pytest.fixture
def receiver_process() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    env = process_env(LEROY_WEBHOOK_SECRET="lr_whsec_test")
    command = [sys.executable, "-m", "alerts.receiver", str(port)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline().startswith(b"listening on")
    yield port, process
    process.terminate()
    process.wait(timeout=10)


def post(port: int, headers: dict[str, str], body: bytes) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.putrequest("POST", "/hook")
    for name, value in ({"Content-Length": str(len(body))} | headers).items():
        connection.putheader(name, value)
    connection.endheaders(body)
    try:
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.mark.parametrize("headers", HOSTILE_HEADERS)
def test_the_receiver_answers_400_to_hostile_headers(
    receiver_process: tuple[int, subprocess.Popen[bytes]], headers: dict[str, str]
) -> None:
    port, process = receiver_process

    assert post(port, hostile(headers), b"{}") == 400
    process.terminate()
    assert b"Traceback" not in process.communicate(timeout=10)[1]


def test_the_receiver_answers_400_to_a_bad_length_and_prints_a_body_that_is_not_utf8(
    receiver_process: tuple[int, subprocess.Popen[bytes]],
) -> None:
    port, process = receiver_process
    fresh = {"X-Leroy-Timestamp": str(int(time.time())), "X-Leroy-Delivery": "d1"}

    assert post(port, {**fresh, "Content-Length": "x"}, b"") == 400
    assert post(port, fresh, b"\xff\xfe") == 400
    process.terminate()
    out, err = process.communicate(timeout=10)
    assert b"Traceback" not in err
    assert out == "None d1 BAD SIGNATURE\n\ufffd\ufffd\n".encode()
