"""Sending tasks, and the embedded broker: kombu's filesystem transport, each message made whole before a worker
can see it.

kombu writes a message straight into the queue folder under its final name, while a worker takes any file of the
queue's name without waiting for the writer: a worker that lists the folder in between takes a file still being
written, and one left half written (the disk full) is taken too. Either fails to decode in the worker's consumer,
which stops the worker. Here a message is written under a name no worker takes, flushed to disk, then renamed
into the queue (one atomic step on one filesystem); a failed write leaves nothing behind.
"""

import contextlib
import logging
import os
import uuid
from collections.abc import Callable
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError, KombuError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

from leroy import metrics

logger = logging.getLogger(__name__)

SCHEME = "leroyfs"  # its broker URL: `leroyfs://` (registered with kombu by leroy.celery)
WRITING = ".writing"  # a message being written: its name does not end in `.<queue>.msg`, so no worker takes it


class Channel(filesystem.Channel):
    # kombu's virtual channel calls the second argument `message`, its filesystem channel `payload`: one must differ.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Put `payload` onto `queue`, named as kombu names it (its readers take the oldest first)."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        writing = final + WRITING
        try:
            with open(writing, "xb") as file:
                file.write(str_to_bytes(dumps(payload)))
                file.flush()
                os.fsync(file.fileno())
            os.rename(writing, final)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.unlink(writing)
            raise ChannelError(f"Cannot add file {final!r} to directory") from error


class Transport(filesystem.Transport):
    Channel = Channel


def sent(send: Callable[[], object], what: str) -> bool:
    """Whether the broker took what `send` sends (a committed job's tasks). When it did not (down, its disk full),
    counted and logged without a traceback, the job would wait for a task that never comes: the caller fails it."""
    try:
        send()
    except (KombuError, OSError) as error:
        metrics.DEPENDENCY_ERRORS.labels("broker").inc()
        logger.warning("%s not queued: the broker did not take it (%s: %s)", what, type(error).__name__, error)
        return False
    return True
