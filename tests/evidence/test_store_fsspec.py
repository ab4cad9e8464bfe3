"""The data directory as an fsspec URL: the same import -> build -> activate -> read -> lookup path against fsspec's
in-process memory:// filesystem gives the artifact a local build gives, served from a verified local cache."""

import hashlib
import json
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import fsspec
import polars as pl
import pytest
from django.core.management import call_command
from django.test import override_settings
from fsspec.implementations.memory import MemoryFileSystem

from evidence.marketdata.importers import ImportRejected, bars_import
from evidence.marketdata.selectors import bars_read
from evidence.memory import build as memory
from evidence.memory import selectors
from evidence.memory.reader import ArtifactRefused
from evidence.memory.selectors import frame_inspect, memory_lookup, memory_reader
from evidence.memory.services import market_memory_build_run
from evidence.models import BarPartition, Corpus, MarketMemoryArtifact, Symbol
from tests.evidence.factories import minute_bars, utc
from tests.evidence.test_market_memory import D1, D2, ROWS, hand_frame

pytestmark = pytest.mark.django_db

REMOTE = "memory://leroy"


@pytest.fixture(autouse=True)
def fresh_reader() -> Iterator[None]:
    """Each test opens the artifact it built, never a reader left by another test."""
    selectors._reader_state.update(reader=None, checked=float("-inf"))
    yield
    selectors._reader_state.update(reader=None, checked=float("-inf"))


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[MemoryFileSystem]:
    """An empty memory:// data directory and a fresh local var directory (for the artifact cache)."""
    fs = fsspec.filesystem("memory")
    if fs.exists("/leroy"):
        fs.rm("/leroy", recursive=True)
    with override_settings(LEROY_DATA_DIR=REMOTE, LEROY_VAR_DIR=tmp_path / "var"):
        yield fs
    if fs.exists("/leroy"):
        fs.rm("/leroy", recursive=True)


@pytest.fixture
def hand_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "symbol_evidence_frame", lambda ticker, plan: hand_frame(ticker, ROWS))


def import_universe() -> None:
    for ticker in ("AAA", "BBB", "IDX"):
        bars_import(
            ticker=ticker,
            frequency="1m",
            frame=minute_bars([D1, D2]),
            asset_class="index" if ticker == "IDX" else "equity",
        )
    if not Corpus.objects.exists():
        Corpus.objects.create(
            source="vendor",
            benchmark=Symbol.objects.get(ticker="IDX"),
            historical_through=D2,
            created_at=utc(2026, 7, 1),
        )


def build(*, activate: bool = True) -> MarketMemoryArtifact:
    with override_settings(LEROY_MM_MIN_SESSIONS=2):
        return market_memory_build_run(force=True, activate=activate)


def remote_files(fs: MemoryFileSystem) -> list[str]:
    return sorted(path.removeprefix("/leroy/") for path in fs.find("/leroy")) if fs.exists("/leroy") else []


def test_a_remote_build_is_the_local_artifact_and_is_served_from_a_verified_cache(
    hand_built: None, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import_universe()
    local = build()
    local_manifest = (data_dir / local.path / "manifest.json").read_bytes()
    local_answer = memory_lookup(symbol="AAA", side="buy", active=0b11, regime=4)
    MarketMemoryArtifact.objects.all().delete()
    BarPartition.objects.all().delete()
    selectors._reader_state.update(reader=None, checked=float("-inf"))
    local_files = sorted(data_dir.rglob("*"))
    fs = fsspec.filesystem("memory")
    with override_settings(LEROY_DATA_DIR=REMOTE, LEROY_VAR_DIR=tmp_path / "var"):
        try:
            import_universe()
            remote = build()
            answer = memory_lookup(symbol="AAA", side="buy", active=0b11, regime=4)
            bars = bars_read(symbol=Symbol.objects.get(ticker="AAA"), frequency="1m")
            frame = frame_inspect(ticker="AAA", ts=utc(2026, 6, 29, 14, 0))
            call_command("market_memory_status")
            files = remote_files(fs)
        finally:
            fs.rm("/leroy", recursive=True)

    assert remote.sha256 == local.sha256
    assert json.loads(capsys.readouterr().out)["path"] == f"memory://leroy/market_memory/{local.sha256}"
    assert remote.path == local.path == f"market_memory/{local.sha256}"
    assert answer == local_answer
    assert answer.matches[5].tier == 5 and answer.matches[5].row_count == 3  # type: ignore[union-attr]
    assert bars.equals(minute_bars([D1, D2]))
    assert (frame["labels"]["5"], frame["artifact_sha256"]) == (100, local.sha256)
    manifest = json.loads(local_manifest)
    cache = tmp_path / "var" / "cache" / "market_memory" / local.sha256
    assert sorted(p.name for p in cache.iterdir()) == sorted([*manifest["files"], "manifest.json"])
    assert (cache / "manifest.json").read_bytes() == local_manifest
    assert hashlib.sha256((cache / "manifest.json").read_bytes()).hexdigest() == local.sha256
    assert sorted(p.name for p in cache.parent.iterdir()) == [local.sha256]  # no partial fetch left behind
    artifact_files = [f"market_memory/{local.sha256}/{name}" for name in sorted([*manifest["files"], "manifest.json"])]
    partitions = [p for p in files if p.startswith("bars/")]
    features = [p for p in files if p.startswith("features/")]
    assert files == sorted([*partitions, *features, *artifact_files])  # the build directory is gone
    assert len(partitions) == 3 and len(features) == 3
    assert sorted(data_dir.rglob("*")) == local_files  # nothing of the remote build landed in the local store


def test_the_cache_is_reused_and_a_tampered_cached_file_is_refused(
    remote: MemoryFileSystem, hand_built: None, tmp_path: Path
) -> None:
    import_universe()
    artifact = build()
    first = memory_reader(refresh=True)
    cache = tmp_path / "var" / "cache" / "market_memory" / artifact.sha256
    remote.rm(f"/leroy/{artifact.path}", recursive=True)  # later loads read the cache, not the store
    selectors._reader_state.update(reader=None, checked=float("-inf"))

    again = memory_reader(refresh=True)
    assert (again.root, again.sha256) == (first.root, artifact.sha256) == (cache, artifact.sha256)

    serving = cache / "serve.sqlite3"
    data = bytearray(serving.read_bytes())
    data[-1] ^= 0xFF
    serving.write_bytes(bytes(data))
    selectors._reader_state.update(reader=None, checked=float("-inf"))

    with pytest.raises(ArtifactRefused, match=r"serve\.sqlite3"):
        memory_reader(refresh=True)


@pytest.mark.parametrize(
    ("name", "refusal"), [("serve.sqlite3", r"serve\.sqlite3 in \S+ does not match"), ("manifest.json", "manifest of")]
)
def test_a_tampered_remote_file_is_refused_and_never_cached(
    remote: MemoryFileSystem, hand_built: None, tmp_path: Path, name: str, refusal: str
) -> None:
    import_universe()
    artifact = build()
    stored = f"/leroy/{artifact.path}/{name}"
    data = bytearray(remote.cat_file(stored))
    data[-1] ^= 0xFF
    remote.pipe_file(stored, bytes(data))

    with pytest.raises(ArtifactRefused, match=refusal):
        memory_reader(refresh=True)

    assert list((tmp_path / "var" / "cache" / "market_memory").iterdir()) == []


def test_a_rejected_import_writes_nothing_remotely(remote: MemoryFileSystem) -> None:
    with pytest.raises(ImportRejected, match="must start on a whole minute"):
        bars_import(
            ticker="AAPL",
            frequency="1m",
            frame=minute_bars([D1]).with_columns(ts=pl.col("ts") + pl.duration(seconds=30)),
        )
    assert remote_files(remote) == []

    bars_import(ticker="AAPL", frequency="1m", frame=minute_bars([D1]))
    before = remote_files(remote)
    # A new year's partition is written before the overlap in the stored year is found; it must not survive.
    spanning = pl.concat([minute_bars([date(2025, 12, 31)]), minute_bars([D1])])
    with pytest.raises(ImportRejected, match="390 bars overlap"):
        bars_import(ticker="AAPL", frequency="1m", frame=spanning)

    assert remote_files(remote) == before
    assert [p.year for p in BarPartition.objects.all()] == [2026]
