"""`eod_run` writes one immutable snapshot with its rows and commits it to the publication log; refusals write
nothing. Frozen inputs are re-hashed first: an edited bar file refuses publication."""

import base64
import hashlib
import json
from datetime import UTC, date, datetime
from io import StringIO

import polars as pl
import pytest
import rfc8785
import time_machine
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import ProgrammingError, connection, transaction

from evidence.eod.heldout import REUSE_ADMISSION
from evidence.eod.services import EodError, eod_run, latest_closed_session
from evidence.eod.tasks import eod_run_task
from evidence.eod.walkforward import METHOD
from evidence.marketdata import calendar, demo
from evidence.marketdata import selectors as marketdata
from evidence.models import AppendOnly, BarPartition, EodRow, EodSnapshot, LogEntry, Symbol
from leroy.clock import now
from tests.evidence.eod_world import LAST, eod_world, universe_settings

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(tmp_path):
    made = eod_world(tmp_path)
    with universe_settings(made):
        yield made


def test_a_run_writes_the_snapshot_its_rows_and_one_log_commitment(world):
    snapshot = eod_run(session=LAST)

    rows = [r.row for r in EodRow.objects.filter(snapshot=snapshot).order_by("symbol")]
    entry = LogEntry.objects.get(index=snapshot.log_index)
    body = json.loads(entry.body)
    hashed = {"session": "2023-02-28", "revision": 1, "components": snapshot.components, "rows": rows}
    recomputed = hashlib.sha256(rfc8785.dumps(hashed)).hexdigest()
    assert (entry.kind, body["session"], body["row_count"]) == ("eod_snapshot", "2023-02-28", 3)
    assert body["snapshot_sha256"] == snapshot.snapshot_sha256 == recomputed
    assert [r["symbol"] for r in rows] == ["ALFA", "BRVO", "CHRL"]
    assert rows[2] == {"symbol": "CHRL", "status": "absent_from_snapshot", "session": "2023-02-28"}
    assert {rows[0]["action"], rows[1]["action"]} <= {"ENTER", "HOLD", "EXIT", "STAY_FLAT"}
    assert snapshot.components["data"]["source"] == "synthetic"
    assert snapshot.components["universe"]["sha256"] == world.universe.sha256


def test_the_log_entry_commits_the_replay_heldout_and_walk_forward_hashes(world):
    snapshot = eod_run(session=LAST)

    body = json.loads(LogEntry.objects.get(index=snapshot.log_index).body)
    heldout = {name: snapshot.heldout[name] for name in ("first", "last", "rows")}
    walk = {"components": snapshot.components, "rows": snapshot.walk_forward["rows"]}
    assert body["replay_sha256"] == snapshot.replay["sha256"]
    assert body["heldout_sha256"] == snapshot.heldout["sha256"] == hashlib.sha256(rfc8785.dumps(heldout)).hexdigest()
    assert (
        body["walk_forward_sha256"]
        == snapshot.walk_forward["sha256"]
        == hashlib.sha256(rfc8785.dumps(walk)).hexdigest()
    )


def test_the_log_entry_commits_the_source_the_universe_summary_and_each_answers_statement(world):
    snapshot = eod_run(session=LAST)

    body = json.loads(LogEntry.objects.get(index=snapshot.log_index).body)
    statements = {
        "replay": {"label": "retrospective_replay", "symbols": ["ALFA", "BRVO"]},
        "heldout": {"evidence_class": "validation", "reuse_admission": REUSE_ADMISSION},
        "walk_forward": {"method": METHOD, "inputs_rehashed": True},
    }
    assert body["source"] == "synthetic"
    assert body["replay_summary_sha256"] == hashlib.sha256(rfc8785.dumps(snapshot.replay["summary"])).hexdigest()
    for name, statement in statements.items():
        assert body[f"{name}_statement_sha256"] == hashlib.sha256(rfc8785.dumps(statement)).hexdigest(), name
        assert getattr(snapshot, name)["statement"] == statement, name


def test_the_log_entry_commits_a_root_over_each_symbols_replay_and_each_row_keeps_its_proof(world):
    snapshot = eod_run(session=LAST)

    body = json.loads(LogEntry.objects.get(index=snapshot.log_index).body)
    replays = {r.symbol: r.replay for r in EodRow.objects.filter(snapshot=snapshot, available=True)}
    leaves = [hashlib.sha256(b"\x00" + rfc8785.dumps({"symbol": symbol, "summary": replays[symbol]["summary"],
                                                      "legs": replays[symbol]["legs"]})).digest()
              for symbol in ("ALFA", "BRVO")]  # fmt: skip
    root = hashlib.sha256(b"\x01" + leaves[0] + leaves[1]).hexdigest()
    assert body["replay_symbols_root_sha256"] == snapshot.replay["symbols_root_sha256"] == root
    assert replays["ALFA"]["proof"] == [base64.b64encode(leaves[1]).decode()]
    assert replays["BRVO"]["proof"] == [base64.b64encode(leaves[0]).decode()]
    assert EodRow.objects.get(snapshot=snapshot, symbol="CHRL").replay is None


def test_the_log_entry_commits_a_root_over_each_symbols_walk_forward_and_the_snapshot_keeps_its_proofs(world):
    snapshot = eod_run(session=LAST)

    body = json.loads(LogEntry.objects.get(index=snapshot.log_index).body)
    rows = snapshot.walk_forward["rows"]
    leaves = [hashlib.sha256(b"\x00" + rfc8785.dumps({"symbol": symbol, "components": snapshot.components,
                                                      "rows": [r for r in rows if r["symbol"] == symbol]})).digest()
              for symbol in ("ALFA", "BRVO", "CHRL")]  # fmt: skip
    pair = hashlib.sha256(b"\x01" + leaves[0] + leaves[1]).digest()
    root = hashlib.sha256(b"\x01" + pair + leaves[2]).hexdigest()
    proofs = snapshot.walk_forward["proofs"]
    assert body["walk_forward_symbols_root_sha256"] == snapshot.walk_forward["symbols_root_sha256"] == root
    assert proofs["ALFA"] == {"index": 0, "tree_size": 3, "hashes": [base64.b64encode(h).decode() for h in leaves[1:]]}
    assert proofs["CHRL"] == {"index": 2, "tree_size": 3, "hashes": [base64.b64encode(pair).decode()]}
    assert [r for r in rows if r["symbol"] == "CHRL"] == []  # absent from the snapshot: its leaf holds no rows


def test_the_heldout_tail_has_one_validation_row_per_available_symbol(world):
    snapshot = eod_run(session=LAST)

    rows = snapshot.heldout["rows"]
    assert [(r["symbol"], r["first_session"], r["last_session"]) for r in rows] == [
        ("ALFA", "2022-07-01", "2022-12-30"),
        ("BRVO", "2022-07-01", "2022-12-30"),
    ]
    assert {r["sessions"] for r in rows} == {len(calendar.sessions_between(date(2022, 7, 1), date(2022, 12, 30)))}


def test_walk_forward_rows_cover_each_symbol_and_year_from_the_first_year(world):
    snapshot = eod_run(session=LAST)

    years = [(r["symbol"], r["year"]) for r in snapshot.walk_forward["rows"]]
    assert years == [("ALFA", 2021), ("ALFA", 2022), ("ALFA", 2023), ("BRVO", 2021), ("BRVO", 2022), ("BRVO", 2023)]


def test_the_current_year_of_the_walk_forward_is_marked_partial_with_its_first_and_last_session(world):
    snapshot = eod_run(session=LAST)

    rows = [r for r in snapshot.walk_forward["rows"] if r["symbol"] == "ALFA"]
    assert [(r["year"], r["first_session"], r["last_session"], r["complete"]) for r in rows] == [
        (2021, "2021-01-04", "2021-12-31", True),
        (2022, "2022-01-03", "2022-12-30", True),
        (2023, "2023-01-03", "2023-02-28", False),
    ]
    assert rows[2]["sessions"] == len(calendar.sessions_between(date(2023, 1, 3), LAST))


def test_an_identical_rerun_returns_the_snapshot_and_appends_nothing(world):
    first = eod_run(session=LAST)

    again = eod_run(session=LAST)

    assert again.pk == first.pk
    assert (EodSnapshot.objects.count(), LogEntry.objects.count()) == (1, 1)


@pytest.mark.parametrize(
    ("session", "code"),
    [(date(2023, 2, 25), "not_a_session"), (date(2023, 3, 1), "session_not_verified")],
)
def test_a_refused_run_writes_nothing(world, session, code):
    with pytest.raises(EodError) as refused:
        eod_run(session=session)

    assert refused.value.code == code
    assert (EodSnapshot.objects.count(), EodRow.objects.count(), LogEntry.objects.count()) == (0, 0, 0)


def test_a_symbol_missing_a_session_mid_history_is_not_computed_and_its_row_names_the_gap(tmp_path):
    world = eod_world(tmp_path, missing={"ALFA": date(2022, 3, 15)})

    with universe_settings(world):
        snapshot = eod_run(session=LAST)

    alfa = EodRow.objects.get(snapshot=snapshot, symbol="ALFA")
    assert alfa.row == {
        "symbol": "ALFA",
        "status": "incomplete_history",
        "session": "2023-02-28",
        "history_gaps": {"first_bar": "2019-01-02", "missing_sessions": ["2022-03-15"], "missing_count": 1},
    }
    assert (alfa.available, alfa.replay) == (False, None)
    assert snapshot.replay["summary"]["symbols"] == 1
    assert [r["symbol"] for r in snapshot.heldout["rows"]] == ["BRVO"]
    assert {r["symbol"] for r in snapshot.walk_forward["rows"]} == {"BRVO"}


def test_a_run_where_every_symbol_misses_a_session_is_refused_and_writes_nothing(tmp_path):
    world = eod_world(tmp_path, missing={"ALFA": date(2022, 3, 15), "BRVO": date(2020, 6, 1)})

    with universe_settings(world), pytest.raises(EodError) as refused:
        eod_run(session=LAST)

    assert refused.value.code == "session_not_verified"
    assert refused.value.details == {"incomplete_history": ["ALFA", "BRVO"]}
    assert (EodSnapshot.objects.count(), EodRow.objects.count(), LogEntry.objects.count()) == (0, 0, 0)


def test_a_session_still_trading_is_refused_even_with_its_bars_present(world):
    before_close = datetime(2023, 2, 28, 20, 59, tzinfo=UTC)
    with time_machine.travel(before_close, tick=False), pytest.raises(EodError) as refused:
        eod_run(session=LAST)

    assert refused.value.code == "session_not_closed"
    assert (EodSnapshot.objects.count(), EodRow.objects.count(), LogEntry.objects.count()) == (0, 0, 0)


def test_an_earlier_session_is_never_reconstructed_after_a_later_one(world):
    eod_run(session=LAST)

    with pytest.raises(EodError) as refused:
        eod_run(session=date(2023, 2, 27))

    assert refused.value.code == "retroactive"
    assert EodSnapshot.objects.count() == 1


def test_an_edited_input_file_refuses_publication(world):
    partition = BarPartition.objects.filter(symbol__ticker="BRVO", year=2022).get()
    path = settings.LEROY_DATA_DIR + "/" + partition.path
    with open(path, "r+b") as handle:
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 0xFF]))

    with pytest.raises(CommandError, match="frozen_input_changed") as refused:
        call_command("eod_run", "--date", LAST.isoformat())

    assert partition.path in str(refused.value)
    assert (EodSnapshot.objects.count(), LogEntry.objects.count()) == (0, 0)


def test_the_command_prints_the_published_snapshot(world, capsys):
    call_command("eod_run", "--date", LAST.isoformat())

    printed = json.loads(capsys.readouterr().out)
    snapshot = EodSnapshot.objects.get()
    assert printed == {"publication_id": snapshot.log_index, "revision": 1, "row_count": 3, "session": "2023-02-28",
                       "snapshot_sha256": snapshot.snapshot_sha256, "source": "synthetic"}  # fmt: skip


def test_beat_runs_after_the_close_on_weekdays_and_the_task_publishes_a_session_once(world):
    entry = settings.CELERY_BEAT_SCHEDULE["eod-run"]
    assert entry["task"] == "evidence.eod_run"
    assert (entry["schedule"].hour, entry["schedule"].minute) == ({22}, {15})

    with time_machine.travel("2023-03-01T03:00:00Z", tick=False):  # 2023-02-28 closed at 21:00 UTC
        closed = latest_closed_session(now())
        published = eod_run_task()
        again = eod_run_task()

    assert closed == LAST
    assert published == EodSnapshot.objects.get().log_index and again is None


def test_the_latest_closed_session_waits_for_the_close():
    assert latest_closed_session(datetime(2023, 2, 28, 20, 59, tzinfo=UTC)) == date(2023, 2, 27)
    assert latest_closed_session(datetime(2023, 2, 28, 21, 0, tzinfo=UTC)) == LAST


def test_the_demo_loads_a_continuous_synthetic_daily_history_before_its_minutes(tmp_path):
    call_command("load_demo_data", "--symbols", "1", "--sessions", "63", "--overlay-sessions", "2", "--seed", "3",
                 "--daily-history-from", "2024-01-02", stdout=StringIO())  # fmt: skip

    partitions = BarPartition.objects.filter(symbol__ticker="ALFA", frequency="1d")
    bars = marketdata.bars_read(symbol=Symbol.objects.get(ticker="ALFA"), frequency="1d")
    sessions = [ts.date() for ts in bars.get_column("ts").to_list()]
    assert set(partitions.values_list("source", flat=True)) == {"synthetic"}
    assert sessions == calendar.sessions_between(date(2024, 1, 2), sessions[-1])
    assert sessions[-1] == demo.demo_sessions(demo.DEFAULT_START, 63)[-1]
    joined = bars.filter(pl.col("ts").dt.date().is_in([date(2025, 8, 29), date(2025, 9, 2)])).get_column("close")
    assert abs(joined[1] / joined[0] - 1) < 0.1  # the pre-history ends near where the minute history begins


def test_snapshots_and_rows_are_immutable_in_the_orm_and_in_postgresql(world):
    snapshot = eod_run(session=LAST)

    with pytest.raises(AppendOnly):
        snapshot.save()
    with pytest.raises(AppendOnly):
        EodRow.objects.filter(snapshot=snapshot).update(row={})
    if connection.vendor == "postgresql":
        with pytest.raises(ProgrammingError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE evidence_eodrow SET row = '{}'")
    assert EodRow.objects.get(snapshot=snapshot, symbol="CHRL").row["status"] == "absent_from_snapshot"
