import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import polars as pl
import pytest
import time_machine

from evidence.live import frames
from evidence.marketdata import calendar
from evidence.marketdata.importers import ImportRejected
from evidence.marketdata.selectors import bars_read
from evidence.memory.selectors import frame_inspect
from evidence.models import Corpus, Frame, LiveBar, Symbol

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)


def tape(world, ticker: str, start, end) -> pl.DataFrame:
    return bars_read(symbol=Symbol.objects.get(ticker=ticker), frequency="1m", start=start, end=end)


def session_open(world):
    return frames.open_session(world.replay).open


def test_replay_feeds_closed_minutes_only_and_frames_read_live_bars(world):
    with time_machine.travel(world.replay, tick=False):
        fed = frames.replay_tick()
        changed = frames.frames_refresh()

    opened = session_open(world)
    last = LiveBar.objects.filter(symbol__ticker="ALFA").order_by("-ts").first()
    assert last.ts == world.replay - MINUTE
    assert LiveBar.objects.filter(ts__gte=world.replay).exists() is False
    assert fed == LiveBar.objects.count()
    assert LiveBar.objects.filter(symbol__ticker="SYNX").count() == (world.replay - opened) // MINUTE
    assert changed == Frame.objects.count() == 3
    frame = Frame.objects.get(symbol__ticker="ALFA")
    assert frame.source_time == world.replay - MINUTE
    assert frame.close == last.close


def test_a_second_tick_in_the_same_minute_feeds_nothing_new(world):
    with time_machine.travel(world.replay, tick=False):
        frames.replay_tick()
        frames.frames_refresh()
        assert frames.replay_tick() == 0
        assert frames.frames_refresh() == 0


def test_verified_sessions_are_never_replayed(world):
    corpus = Corpus.objects.get()
    Corpus.objects.filter(pk=corpus.pk).update(verified_through=world.replay.date())

    with time_machine.travel(world.replay, tick=False):
        assert frames.replay_tick() == 0


def test_live_frame_equals_the_build_at_the_same_minute(world):
    overlay_session = calendar.xnys().session_offset(world.replay.date().isoformat(), -1).date()
    window = frames.open_session(frames.open_session(world.replay).open - timedelta(days=1) + timedelta(hours=1))
    assert window is not None and window.session == overlay_session
    at = window.open + timedelta(minutes=75)
    with time_machine.travel(at, tick=False):
        for ticker in ("SYNX", "ALFA"):
            frames.live_bars_ingest(ticker=ticker, bars=tape(world, ticker, window.open, at - MINUTE), feed="replay")
        live = frames.frame_compute(
            symbol=Symbol.objects.get(ticker="ALFA"), benchmark=Symbol.objects.get(ticker="SYNX"), at=at
        )
    built = frame_inspect(ticker="ALFA", ts=at - MINUTE)

    assert live["ready"] is built["ready"] is True
    assert live["regime"] == built["regime"]["id"]
    assert live["buy_mask"] == sum(1 << i for i, s in enumerate(built["strategy_states"].values()) if s["buy"])
    assert live["sell_mask"] == sum(1 << i for i, s in enumerate(built["strategy_states"].values()) if s["sell"])


def bars(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["ts", "open", "high", "low", "close", "volume"], orient="row")


@pytest.mark.parametrize(
    ("shift_minutes", "high", "low", "volume", "message"),
    [
        (0, 101.0, 99.0, 10.0, "closed minutes of the open session"),  # the minute still forming
        (-120, 101.0, 99.0, 10.0, "closed minutes of the open session"),  # before the open
        (-3, 99.5, 99.0, 10.0, "inconsistent OHLC"),  # high below the close
        (-3, 101.0, 99.0, -1.0, "inconsistent OHLC or negative volume"),
    ],
)
def test_hostile_live_bars_are_refused_and_nothing_is_written(world, shift_minutes, high, low, volume, message):
    at = world.replay
    ts = at + timedelta(minutes=shift_minutes)
    with time_machine.travel(at, tick=False), pytest.raises(ImportRejected, match=message):
        frames.live_bars_ingest(ticker="ALFA", bars=bars([(ts, 100.0, high, low, 100.0, volume)]), feed="provider")

    assert LiveBar.objects.exists() is False


def test_out_of_order_duplicate_and_repeated_bars_are_refused(world):
    at = world.replay
    first, second = at - 3 * MINUTE, at - 2 * MINUTE
    row = (100.0, 101.0, 99.0, 100.0, 5.0)
    with time_machine.travel(at, tick=False):
        with pytest.raises(ImportRejected, match="strictly increasing"):
            frames.live_bars_ingest(ticker="ALFA", bars=bars([(second, *row), (first, *row)]), feed="provider")
        with pytest.raises(ImportRejected, match="strictly increasing"):
            frames.live_bars_ingest(ticker="ALFA", bars=bars([(first, *row), (first, *row)]), feed="provider")
        assert frames.live_bars_ingest(ticker="ALFA", bars=bars([(second, *row)]), feed="provider") == 1
        with pytest.raises(ImportRejected, match="after the last one received"):
            frames.live_bars_ingest(ticker="ALFA", bars=bars([(first, *row)]), feed="provider")

    assert list(LiveBar.objects.values_list("ts", flat=True)) == [second]


def test_bars_are_refused_while_the_market_is_closed_or_for_unknown_symbols(world):
    row = (100.0, 101.0, 99.0, 100.0, 5.0)
    night = world.replay.replace(hour=23)
    with time_machine.travel(night, tick=False), pytest.raises(ImportRejected, match="closed"):
        frames.live_bars_ingest(ticker="ALFA", bars=bars([(night - MINUTE, *row)]), feed="provider")
    with time_machine.travel(world.replay, tick=False), pytest.raises(ImportRejected, match="unknown symbol"):
        frames.live_bars_ingest(ticker="NOPE", bars=bars([(world.replay - MINUTE, *row)]), feed="provider")

    assert LiveBar.objects.exists() is False


class FakeIex(BaseHTTPRequestHandler):
    """Serves a session's minute bars from the world's own tape, as Tiingo's IEX endpoint would."""

    tapes: dict[str, list[dict]] = {}
    failing: set[str] = set()

    def do_GET(self):
        ticker = urlsplit(self.path).path.split("/")[2].upper()
        status = 500 if ticker in FakeIex.failing else 200
        payload = json.dumps(FakeIex.tapes.get(ticker, []) if status == 200 else {"detail": "down"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def iex(world, settings):
    window = frames.open_session(world.replay)
    FakeIex.tapes = {
        ticker: [
            {"date": row["ts"].isoformat(), **{k: row[k] for k in ("open", "high", "low", "close", "volume")}}
            for row in tape(world, ticker, window.open, window.close).iter_rows(named=True)
        ]
        for ticker in ("ALFA", "BRVO", "SYNX")
    }
    FakeIex.failing = set()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeIex)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.LEROY_MARKET_DATA_URL = f"http://127.0.0.1:{server.server_address[1]}"
    settings.LEROY_MARKET_DATA_TOKEN = "test-token"
    yield FakeIex
    server.shutdown()
    server.server_close()


def test_provider_feed_ingests_closed_minutes_and_skips_a_failing_symbol(world, iex):
    iex.failing = {"BRVO"}
    with time_machine.travel(world.replay, tick=False):
        fed = frames.provider_tick()
        frames.frames_refresh()
        assert frames.provider_tick() == 0  # nothing new within the same minute

    window = frames.open_session(world.replay)
    minutes = (world.replay - window.open) // MINUTE
    assert fed == 2 * minutes
    assert LiveBar.objects.filter(symbol__ticker="BRVO").exists() is False
    assert set(LiveBar.objects.values_list("feed", flat=True)) == {"provider"}
    assert Frame.objects.get(symbol__ticker="ALFA").source_time == world.replay - MINUTE


def test_closed_provider_sessions_are_compacted_into_the_verified_store(world):
    from evidence.marketdata.importers import bars_import

    window = frames.open_session(world.replay)
    history = tape(world, "ALFA", None, window.open - MINUTE)
    bars_import(ticker="CMPX", frequency="1m", frame=history, asset_class="equity")
    live = tape(world, "ALFA", window.open, world.replay - 2 * MINUTE)
    with time_machine.travel(world.replay, tick=False):
        frames.live_bars_ingest(ticker="CMPX", bars=live, feed="provider")
        assert frames.live_bars_compact() == []  # the session is still open

    with time_machine.travel(world.replay.replace(hour=22), tick=False):
        assert frames.live_bars_compact() == [window.session]

    stored = tape(world, "CMPX", window.open, window.close)
    assert stored.equals(live)
    assert LiveBar.objects.exists() is False
    assert Corpus.objects.get().verified_through == window.session


def test_the_tick_after_the_close_feeds_the_sessions_last_minute(world, iex):
    window = frames.open_session(world.replay)
    with time_machine.travel(window.close - MINUTE + timedelta(seconds=30), tick=False):
        during = frames.provider_tick()  # the last minute has not closed yet
    with time_machine.travel(window.close + timedelta(seconds=5), tick=False):
        after = frames.provider_tick()
    with time_machine.travel(window.close + frames.LATE_BARS + MINUTE, tick=False):
        late = frames.provider_tick()

    minutes = (window.close - window.open) // MINUTE
    assert (during, after, late) == (3 * (minutes - 1), 3, 0)  # ALFA, BRVO and SYNX
    last = LiveBar.objects.filter(symbol__ticker="ALFA").order_by("-ts").first()
    assert last.ts == window.close - MINUTE


def test_a_session_is_compacted_only_once_its_last_minutes_could_have_come(world):
    from evidence.marketdata.importers import bars_import

    window = frames.open_session(world.replay)
    bars_import(
        ticker="CMPX", frequency="1m", frame=tape(world, "ALFA", None, window.open - MINUTE), asset_class="equity"
    )
    session = tape(world, "ALFA", window.open, window.close - MINUTE)
    with time_machine.travel(window.close - MINUTE, tick=False):
        frames.live_bars_ingest(ticker="CMPX", bars=session.head(len(session) - 1), feed="provider")
    with time_machine.travel(window.close + MINUTE, tick=False):
        early = frames.live_bars_compact()  # the last minute is still on its way
        frames.live_bars_ingest(ticker="CMPX", bars=session.tail(1), feed="provider")
    with time_machine.travel(window.close + frames.LATE_BARS, tick=False):
        compacted = frames.live_bars_compact()

    assert (early, compacted) == ([], [window.session])
    assert tape(world, "CMPX", window.open, window.close).equals(session)
    assert Corpus.objects.get().verified_through == window.session
