import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from leroy.asgi import RequestThreads

pytestmark = pytest.mark.anyio


async def _thread_of_request(threads: RequestThreads) -> int:
    async with threads.lease():
        return await sync_to_async(threading.get_ident)()


async def _threads_of_concurrent_requests(threads: RequestThreads, count: int) -> list[int]:
    """The threads `count` requests ran on while all of them were in flight at once."""
    all_inside = asyncio.Barrier(count)

    async def request() -> int:
        async with threads.lease():
            await all_inside.wait()
            return await sync_to_async(threading.get_ident)()

    return list(await asyncio.gather(*(request() for _ in range(count))))


async def test_sequential_requests_run_on_one_reused_thread() -> None:
    threads = RequestThreads(max_idle=4)

    first = await _thread_of_request(threads)
    second = await _thread_of_request(threads)

    assert first == second
    assert first != threading.get_ident()


async def test_a_request_runs_all_its_sync_calls_on_its_one_thread() -> None:
    threads = RequestThreads(max_idle=4)

    async with threads.lease():
        idents = {await sync_to_async(threading.get_ident)() for _ in range(5)}

    assert len(idents) == 1


async def test_concurrent_requests_run_on_distinct_threads() -> None:
    threads = RequestThreads(max_idle=4)

    first, second = await _threads_of_concurrent_requests(threads, 2)

    assert first != second
    assert {await _thread_of_request(threads) for _ in range(4)} <= {first, second}  # reused, none started


@pytest.mark.django_db(transaction=True)
async def test_a_connection_a_request_left_open_is_closed_before_the_threads_next_request() -> None:
    threads = RequestThreads(max_idle=4)

    def open_connection() -> bool:
        connection.ensure_connection()
        return connection.connection is not None

    async with threads.lease():
        opened = await sync_to_async(open_connection)()
    async with threads.lease():
        still_open = await sync_to_async(lambda: connection.connection is not None)()

    assert opened is True
    assert still_open is False


async def test_threads_past_the_idle_limit_end_once_their_burst_is_over() -> None:
    threads = RequestThreads(max_idle=2)

    idents = set(await _threads_of_concurrent_requests(threads, 5))

    def alive() -> set[int]:
        return idents & {thread.ident for thread in threading.enumerate() if thread.ident is not None}

    for _ in range(200):  # the three threads past the limit were told to stop; they exit once idle
        if len(alive()) == 2:
            break
        await asyncio.sleep(0.01)

    assert len(idents) == 5
    assert threads.idle == 2
    assert len(alive()) == 2


@pytest.mark.django_db(transaction=True)
async def test_a_request_that_fails_still_returns_its_thread_with_its_connection_closed() -> None:
    threads = RequestThreads(max_idle=4)

    def open_connection() -> int:
        connection.ensure_connection()
        return threading.get_ident()

    with pytest.raises(RuntimeError, match="tool failed"):
        async with threads.lease():
            failed_on = await sync_to_async(open_connection)()
            raise RuntimeError("tool failed")
    async with threads.lease():
        next_on = await sync_to_async(threading.get_ident)()
        still_open = await sync_to_async(lambda: connection.connection is not None)()

    assert threads.idle == 1
    assert next_on == failed_on
    assert still_open is False
