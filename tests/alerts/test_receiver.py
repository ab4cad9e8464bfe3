import inspect
import re
from datetime import UTC, datetime, timedelta
from email.message import Message
from pathlib import Path

import pytest
import time_machine

from alerts import receiver as local_receiver
from alerts import services
from tests.alerts.conftest import make_rule

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
