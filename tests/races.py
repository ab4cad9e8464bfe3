"""Threads with their own database connections, released together: the ledger's race tests and its benchmark."""

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection

from billing.services import BillingError


def race(clients: int, calls: int, work: Callable[[int, int], Any]) -> tuple[list[Any], float]:
    """Run work(client, call) `calls` times from each of `clients` threads released together; every result (or the
    BillingError raised) and the seconds from the release until the last thread ends."""
    barrier = threading.Barrier(clients + 1)
    results: list[Any] = []
    lock = threading.Lock()

    def run(client: int) -> None:
        try:
            barrier.wait()
            for call in range(calls):
                try:
                    outcome = work(client, call)
                except BillingError as error:
                    outcome = error
                with lock:
                    results.append(outcome)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return results, time.perf_counter() - started
