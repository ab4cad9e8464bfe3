"""The embedded broker (leroy.broker): a worker never takes a message that is not whole, and a failed write leaves
nothing in the queue."""

import errno
import uuid

import pytest
from kombu import Connection
from kombu.exceptions import ChannelError

from leroy import broker
from tests.leroy.test_settings import clean_env, django


@pytest.fixture
def connection(tmp_path):
    folders = {name: tmp_path / name for name in ("queue", "processed", "control")}
    for folder in folders.values():
        folder.mkdir()
    options = {
        "data_folder_in": str(folders["queue"]),
        "data_folder_out": str(folders["queue"]),
        "processed_folder": str(folders["processed"]),
        "control_folder": str(folders["control"]),
        "store_processed": False,
    }
    with Connection("leroyfs://", transport_options=options) as opened:
        yield opened


@pytest.fixture
def name():
    # kombu keeps the filesystem transport's exchange table for the process: a queue name of each test's own.
    return f"jobs-{uuid.uuid4().hex}"


def test_a_message_put_is_taken_whole(connection, name, tmp_path):
    queue = connection.SimpleQueue(name)

    queue.put({"report_id": 7})
    message = queue.get(timeout=1)
    message.ack()

    assert message.payload == {"report_id": 7}
    assert list((tmp_path / "queue").iterdir()) == []


def test_a_write_that_fails_leaves_nothing_in_the_queue(connection, name, tmp_path, monkeypatch):
    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(broker.os, "fsync", disk_full)
    queue = connection.SimpleQueue(name)

    with pytest.raises(ChannelError, match="Cannot add file"):
        queue.put({"report_id": 7})

    assert list((tmp_path / "queue").iterdir()) == []


def test_a_message_still_being_written_is_not_taken(connection, name, tmp_path):
    writing = tmp_path / "queue" / f"1_a.{name}.msg{broker.WRITING}"
    writing.write_bytes(b'{"body": "half')
    queue = connection.SimpleQueue(name)

    with pytest.raises(queue.Empty):
        queue.get(timeout=0.2)
    assert list((tmp_path / "queue").iterdir()) == [writing]


def test_the_embedded_settings_send_celery_through_it(tmp_path):
    script = (
        "import django; django.setup(); from leroy.celery import app; "
        "cls = app.connection_for_write().get_transport_cls(); print(f'{cls.__module__}:{cls.__name__}')"
    )

    result = django(clean_env(tmp_path), "-c", script)

    assert result.stdout.strip() == "leroy.broker:Transport", result.stderr
    assert result.returncode == 0
