"""`eod_run`: the one computation of the end-of-day layer. It reads the universe's daily bars through
evidence.marketdata, re-hashes the frozen input files, runs the engine, replay, held-out tail and walk-forward,
then writes the immutable snapshot and its rows and appends its commitment to the publication log, in one
transaction. Nothing a caller does runs it; the beat task and `manage.py eod_run` do."""

import base64
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

import numpy as np
from django.db import transaction

from evidence.eod import heldout, walkforward
from evidence.eod.engine import DEFAULT_PARAMS, LONG, canonical_sha256, engine_identity, engine_sha256, run
from evidence.eod.heldout import EVIDENCE_CLASS, REUSE_ADMISSION
from evidence.eod.replay import LABEL, SymbolReplay, legs, replay, universe_summary
from evidence.eod.universe import Universe, universe_load
from evidence.marketdata import calendar
from evidence.marketdata import selectors as marketdata
from evidence.models import EodRow, EodSnapshot
from evidence.publication.services import append_lock, canonical, entry_append
from leroy.clock import now
from leroy.errors import DomainError
from leroy_verify.merkle import Tree, leaf_hash

CALCULATION_VERSION = "eod-calc-2"  # 2: incomplete histories refused, part-year walk-forward rows marked


class EodError(DomainError):
    """The run was refused; nothing was written or appended."""


GAPS_LISTED = 20  # missing sessions named in a row refused for an incomplete history (all are counted)


@dataclass(frozen=True)
class Series:
    ticker: str
    sessions: list[date]
    closes: np.ndarray
    data_sha256: str
    files: list[tuple[str, str, str]]  # (path, sha256, source)
    missing: list[date]  # XNYS sessions from the first bar through the session that have no bar


def _series(ticker: str, session: date) -> Series | None:
    """The ticker's daily closes through `session`, or None when it has no bar for that session. The bars are laid
    against the XNYS sessions from the first one: every rule here counts sessions by position and takes daily
    returns close to close, so a missing session would fold two days into one; `missing` names them."""
    symbol = marketdata.symbol_get(ticker=ticker)
    if symbol is None:
        return None
    end = datetime.combine(session, time(23, 59, 59), tzinfo=UTC)
    bars = marketdata.bars_read(symbol=symbol, frequency="1d", end=end)
    if bars.is_empty() or bars.get_column("ts").max().date() != session:  # type: ignore[union-attr]
        return None
    sessions = [ts.date() for ts in bars.get_column("ts").to_list()]
    present = set(sessions)
    return Series(
        ticker=ticker,
        sessions=sessions,
        closes=bars.get_column("close").to_numpy(),
        data_sha256=marketdata.bars_frame_version(bars, ticker=ticker, frequency="1d"),
        files=marketdata.bars_files(symbol=symbol, frequency="1d", end=end),
        missing=[day for day in calendar.sessions_between(sessions[0], session) if day not in present],
    )


def _line(value: float) -> float | None:
    return None if np.isnan(value) else round(float(value), 4)


def signal_row(series: Series, universe: Universe) -> tuple[dict[str, Any], SymbolReplay]:
    """(the frozen forward row, the replay over the window) of one symbol at its last session."""
    full = run(series.closes, DEFAULT_PARAMS)
    window = slice(max(0, len(series.closes) - universe.replay_sessions), None)
    replayed = replay(series.sessions[window], series.closes[window], DEFAULT_PARAMS)
    longest = legs(series.sessions, series.closes, full)
    t = len(series.closes) - 1
    open_replay = replayed.legs[-1] if replayed.legs and replayed.legs[-1].open else None
    open_full = longest[-1] if longest and longest[-1].open else None
    row = {
        "symbol": series.ticker,
        "status": "available",
        "session": series.sessions[t].isoformat(),
        "state": full.state[t],
        "action": full.action[t],
        "recommended_state": full.recommended[t],
        "suggested_position": 1.0 if full.recommended[t] == LONG else 0.0,
        "lines_applied": {"buy": _line(full.buy_line[t - 1]), "sell": _line(full.sell_line[t - 1])}
        if t >= 1
        else {"buy": None, "sell": None},
        "lines_next_session": {"buy": _line(full.buy_line[t]), "sell": _line(full.sell_line[t])},
        "current_leg": {"entry_date": open_replay.entry_date.isoformat(), "entry_price": open_replay.entry_price}
        if open_replay
        else None,
        "first_entry": {"entry_date": open_full.entry_date.isoformat(), "entry_price": open_full.entry_price}
        if open_full
        else None,
    }
    return row, replayed


def _absent(ticker: str, session: date) -> dict[str, Any]:
    return {"symbol": ticker, "status": "absent_from_snapshot", "session": session.isoformat()}


def _incomplete(series: Series, session: date) -> dict[str, Any]:
    """The row of a symbol whose daily history misses sessions: nothing is computed from it (no signal, replay,
    held-out or walk-forward row), and the row says which sessions are missing."""
    return {
        "symbol": series.ticker,
        "status": "incomplete_history",
        "session": session.isoformat(),
        "history_gaps": {
            "first_bar": series.sessions[0].isoformat(),
            "missing_sessions": [day.isoformat() for day in series.missing[:GAPS_LISTED]],
            "missing_count": len(series.missing),
        },
    }


def _changes(previous: EodSnapshot | None, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if previous is None:
        return []
    before = {r.symbol: r.row for r in previous.rows.all()}
    out = []
    for row in rows:
        old = before.get(row["symbol"], {})
        for name in ("status", "action", "recommended_state"):
            if old.get(name) != row.get(name):
                out.append({"symbol": row["symbol"], "field": name, "before": old.get(name), "after": row.get(name)})
    return out


def _refuse_retroactive(session: date) -> None:
    later = EodSnapshot.objects.filter(session__gt=session).order_by("-session").first()
    if later is not None:
        raise EodError(
            "retroactive", f"A snapshot of {later.session} exists: earlier sessions are never reconstructed."
        )


def eod_run(*, session: date, universe: Universe | None = None) -> EodSnapshot:
    """The snapshot of `session` (returned unchanged when identical inputs already produced it)."""
    universe = universe or universe_load()
    if not calendar.xnys().is_session(session.isoformat()):
        raise EodError("not_a_session", f"{session} is not an XNYS session.")
    [close] = calendar.schedule(session, session).get_column("session_close").to_list()
    if close > now():
        # The layer publishes completed sessions only: a bar of a session still trading is not its close.
        raise EodError("session_not_closed", f"{session} closes at {close.isoformat()}; it is not over yet.")
    _refuse_retroactive(session)
    found = {ticker: _series(ticker, session) for ticker in universe.tickers}
    available = {ticker: s for ticker, s in found.items() if s is not None and not s.missing}
    incomplete = {ticker: s for ticker, s in found.items() if s is not None and s.missing}
    if not available:
        raise EodError(
            "session_not_verified",
            f"No universe symbol has a verified daily bar for {session} and every XNYS session before it since its "
            "first bar.",
            incomplete_history=sorted(incomplete),
        )
    files = [f for s in available.values() for f in s.files]
    changed = marketdata.bars_files_changed(files)
    if changed:
        raise EodError(
            "frozen_input_changed",
            "Input files no longer match their recorded hashes; publication refused.",
            paths=changed,
        )
    sources = sorted({source for _, _, source in files})
    components: dict[str, Any] = {
        "calculation_version": CALCULATION_VERSION,
        "universe": {"name": universe.name, "version": universe.version, "sha256": universe.sha256},
        "engine": {**engine_identity(DEFAULT_PARAMS), "sha256": engine_sha256(DEFAULT_PARAMS)},
        "variant_set": {"variants": walkforward.variant_set(), "sha256": canonical_sha256(walkforward.variant_set())},
        "data": {
            "sha256": canonical_sha256({t: s.data_sha256 for t, s in sorted(available.items())}),
            "inputs_sha256": canonical_sha256(sorted([path, sha] for path, sha, _ in files)),
            "source": sources[0] if len(sources) == 1 else "mixed",
            "frequency": "1d",
        },
        "calendar": calendar.calendar_lineage(),
    }
    rows: list[dict[str, Any]] = []
    replays: dict[str, dict[str, Any]] = {}
    per_symbol: dict[str, SymbolReplay] = {}
    heldout_rows: list[dict[str, Any]] = []
    walk_rows: list[dict[str, Any]] = []
    for ticker in universe.tickers:
        if ticker in incomplete:
            rows.append(_incomplete(incomplete[ticker], session))
            continue
        series = available.get(ticker)
        if series is None:
            rows.append(_absent(ticker, session))
            continue
        row, per_symbol[ticker] = signal_row(series, universe)
        replays[ticker] = {
            "summary": per_symbol[ticker].summary,
            "legs": [leg.as_dict() for leg in per_symbol[ticker].legs],
        }
        rows.append(row)
        tail = heldout.heldout_row(
            ticker, series.sessions, series.closes, DEFAULT_PARAMS, universe.heldout_first, universe.heldout_last
        )
        if tail is not None:
            heldout_rows.append(tail)
        for year_row in walkforward.walk_forward(
            series.sessions, series.closes, universe.walk_forward_first_year, session.year
        ):
            walk_rows.append({"symbol": ticker, **year_row})
    summary = universe_summary(per_symbol)
    # Each symbol's {symbol, summary, legs} is also a leaf of an RFC 9162 tree over the tickers in code-point order,
    # so one symbol's saved replay checks against the log alone: its leaf and proof give the root the entry commits.
    tickers = sorted(replays)
    tree = Tree([leaf_hash(canonical({"symbol": ticker, **replays[ticker]})) for ticker in tickers])
    proofs = {ticker: [base64.b64encode(h).decode() for h in tree.inclusion_proof(i, len(tickers))]
              for i, ticker in enumerate(tickers)}  # fmt: skip
    # The same for each universe symbol's walk-forward answer, an absent one too (its answer states no rows): a leaf of
    # {symbol, components, rows}. No walk-forward answer lists the tickers, so each proof names its index and size.
    walk_of: dict[str, list[dict[str, Any]]] = {ticker: [] for ticker in universe.tickers}
    for walk_row in walk_rows:
        walk_of[walk_row["symbol"]].append(walk_row)
    walk_tickers = sorted(walk_of)
    walk_tree = Tree([leaf_hash(canonical({"symbol": ticker, "components": components, "rows": walk_of[ticker]}))
                      for ticker in walk_tickers])  # fmt: skip
    size = len(walk_tickers)
    walk_proofs = {ticker: {"index": i, "tree_size": size,
                            "hashes": [base64.b64encode(h).decode() for h in walk_tree.inclusion_proof(i, size)]}
                   for i, ticker in enumerate(walk_tickers)}  # fmt: skip
    # What each answer states besides its calculation: frozen here with the snapshot and served from it, so a later
    # change of wording never alters what an earlier snapshot's entry committed.
    statements = {
        "replay": {"label": LABEL, "symbols": tickers},
        "heldout": {"evidence_class": EVIDENCE_CLASS, "reuse_admission": REUSE_ADMISSION},
        "walk_forward": {"method": walkforward.METHOD, "inputs_rehashed": True},
    }
    replay_block = {"summary": summary, "sha256": canonical_sha256({"components": components, "summary": summary,
                                                                     "symbols": replays}),
                    "symbols_root_sha256": tree.root(len(tickers)).hex(),
                    "statement": statements["replay"]}  # fmt: skip
    published = {
        "first": universe.heldout_first.isoformat(),
        "last": universe.heldout_last.isoformat(),
        "rows": heldout_rows,
    }
    heldout_block = {**published, "sha256": canonical_sha256(published), "statement": statements["heldout"]}
    walk_block = {"rows": walk_rows, "sha256": canonical_sha256({"components": components, "rows": walk_rows}),
                  "symbols_root_sha256": walk_tree.root(size).hex(), "proofs": walk_proofs,
                  "statement": statements["walk_forward"]}  # fmt: skip
    with transaction.atomic():
        append_lock()  # taken before the revision is read, so concurrent runs of a session serialise here
        _refuse_retroactive(session)  # again: a later session may have been published while this one computed
        latest = EodSnapshot.objects.filter(session=session).order_by("-revision").first()
        revision = latest.revision + 1 if latest is not None else 1
        if latest is not None:
            same = canonical_sha256({"session": session.isoformat(), "revision": latest.revision,
                                     "components": components, "rows": rows})  # fmt: skip
            if same == latest.snapshot_sha256:
                return latest
        digest = canonical_sha256({"session": session.isoformat(), "revision": revision, "components": components,
                                   "rows": rows})  # fmt: skip
        previous = EodSnapshot.objects.order_by("-log_index").first()
        entry = entry_append(
            {
                "kind": "eod_snapshot",
                "session": session.isoformat(),
                "revision": revision,
                "snapshot_sha256": digest,
                "row_count": len(rows),
                "engine_sha256": components["engine"]["sha256"],
                "data_sha256": components["data"]["sha256"],
                # The evidence blocks are served apart from the rows: committing their hashes here is what makes
                # a later change to any of them show against the log.
                "replay_sha256": replay_block["sha256"],
                "replay_symbols_root_sha256": replay_block["symbols_root_sha256"],
                "heldout_sha256": heldout_block["sha256"],
                "walk_forward_sha256": walk_block["sha256"],
                "walk_forward_symbols_root_sha256": walk_block["symbols_root_sha256"],
                # The rest of what those answers state, so a verifier holds every field of them to this entry: the
                # data source of every answer, the universe replay's summary, and each answer's statement.
                "source": components["data"]["source"],
                "replay_summary_sha256": canonical_sha256(summary),
                **{f"{name}_statement_sha256": canonical_sha256(fields) for name, fields in statements.items()},
            }
        )
        snapshot = EodSnapshot.objects.create(
            session=session,
            revision=revision,
            snapshot_sha256=digest,
            row_count=len(rows),
            components=components,
            replay=replay_block,
            heldout=heldout_block,
            walk_forward=walk_block,
            changes=_changes(previous, rows),
            log_index=entry.index,
            created_at=now(),
        )
        EodRow.objects.bulk_create(
            EodRow(
                snapshot=snapshot,
                symbol=row["symbol"],
                available=row["status"] == "available",
                row=row,
                replay={**replays[row["symbol"]], "proof": proofs[row["symbol"]]} if row["symbol"] in replays else None,
            )
            for row in rows
        )
    return snapshot


def latest_closed_session(at: datetime) -> date | None:
    """The latest XNYS session whose close is at or before `at`."""
    sessions = calendar.schedule(date(at.year - 1, 1, 1), at.date())
    closed = sessions.filter(sessions.get_column("session_close") <= at)
    return closed.get_column("session").max() if len(closed) else None  # type: ignore[return-value]
