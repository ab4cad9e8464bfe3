"""The research journal: a user's own hypotheses, reviewed later against verified bars only.

A hypothesis is anchored at the last regular-session minute closed when it was recorded (the bar the agent could
see); its outcome uses the same convention as Market Memory labels: entry at that minute's close, exit at the close
`horizon` minutes later in the same session, none if any minute from the decision to the exit had no trade (a
price carried forward is not a trade). Provisional (unverified) sessions are never read: until its session is
verified a hypothesis is `not_mature`, and a window crossing the close has no outcome at all.
"""

from datetime import datetime, timedelta
from typing import Any

import polars as pl
from django.db import IntegrityError, transaction
from django.db.models import Max

from accounts.models import User
from evidence.live import frames
from evidence.marketdata import calendar
from evidence.marketdata.selectors import bars_read, symbol_get
from evidence.memory.features import dense_minutes
from evidence.models import Corpus, ResearchHypothesis
from evidence.research.analysis import ResearchError, unknown_symbol
from evidence.schemas import HypothesisOut, RecordHypothesisArgs, ResearchBoundary, ReviewOut
from leroy.clock import now

MINUTE = timedelta(minutes=1)


def decision_time(at: datetime) -> datetime | None:
    """The last regular-session minute closed at `at`, or None while the session is closed or not yet one minute in."""
    window = frames.open_session(at)
    minute = at.replace(second=0, microsecond=0) - MINUTE
    if window is None or minute < window.open:
        return None
    return minute


def hypothesis_out(hypothesis: ResearchHypothesis) -> HypothesisOut:
    return HypothesisOut(
        hypothesis_id=hypothesis.number,
        symbol=hypothesis.symbol,
        side=hypothesis.side,  # type: ignore[arg-type]
        horizon_minutes=hypothesis.horizon_minutes,  # type: ignore[arg-type]
        note=hypothesis.note,
        recorded_at=hypothesis.recorded_at,
        decision_time=hypothesis.decision_time,
        research_boundary=ResearchBoundary(),
    )


def hypothesis_record(*, user: User, args: RecordHypothesisArgs) -> HypothesisOut:
    """Write a note to `user`'s own journal. A retried `client_request_id` returns the note it created."""
    symbol = symbol_get(ticker=args.symbol)
    if symbol is None:
        raise unknown_symbol(args.symbol)
    values = {"symbol": symbol.ticker, "side": args.side, "horizon_minutes": args.horizon_minutes, "note": args.note}
    if args.client_request_id is not None:
        existing = ResearchHypothesis.objects.filter(user=user, client_request_id=args.client_request_id).first()
        if existing is not None:
            return _replayed(existing, values)
    at = now()
    try:
        with transaction.atomic():
            User.objects.select_for_update().get(pk=user.pk)  # one note at a time per account, for its number
            last = ResearchHypothesis.objects.filter(user=user).aggregate(last=Max("number"))["last"] or 0
            hypothesis = ResearchHypothesis.objects.create(
                user=user, number=last + 1, recorded_at=at, decision_time=decision_time(at),
                client_request_id=args.client_request_id, **values,
            )  # fmt: skip
    except IntegrityError:  # a concurrent retry of the same id got there first
        if args.client_request_id is None:
            raise
        return _replayed(ResearchHypothesis.objects.get(user=user, client_request_id=args.client_request_id), values)
    return hypothesis_out(hypothesis)


def _replayed(existing: ResearchHypothesis, values: dict[str, Any]) -> HypothesisOut:
    if any(getattr(existing, name) != value for name, value in values.items()):
        raise ResearchError(
            "idempotency_conflict",
            "This client_request_id was already used for a different hypothesis; send a new id for a new note.",
        )
    return hypothesis_out(existing)


def _outcome(hypothesis: ResearchHypothesis) -> dict[str, Any]:
    empty: dict[str, Any] = dict.fromkeys(
        ("entry_price", "exit_time", "exit_price", "realized_return_pct", "max_favourable_excursion_pct",
         "max_adverse_excursion_pct")
    )  # fmt: skip
    corpus = Corpus.objects.first()
    verified = corpus.verified_through if corpus else None
    base = {**empty, "verified_through": verified.isoformat() if verified else None}
    start = hypothesis.decision_time
    if start is None:
        reason = "Recorded while the regular session was closed: there is no decision minute to review."
        return {**base, "outcome_status": "not_available", "reason": reason}
    session = calendar.xnys_minutes().minute_to_session(start).date()
    if verified is None or session > verified:
        reason = f"The {session} session is not verified yet; provisional bars are never used."
        return {**base, "outcome_status": "not_mature", "reason": reason}
    schedule = calendar.schedule(session, session).row(0, named=True)
    close = schedule["session_close"]
    end = start + timedelta(minutes=hypothesis.horizon_minutes)
    if calendar.horizon_crosses_close(start, hypothesis.horizon_minutes, close):
        return {**base, "outcome_status": "not_available", "reason": calendar.HORIZON_CROSSES_CLOSE}
    symbol = symbol_get(ticker=hypothesis.symbol)
    bars = bars_read(symbol=symbol, frequency="1m", start=schedule["session_open"], end=close) if symbol else None
    dense = dense_minutes(bars).filter(pl.col("session") == session) if bars is not None and len(bars) else None
    entry_rows = dense.filter(pl.col("ts") == start) if dense is not None else None
    if dense is None or entry_rows is None or entry_rows.is_empty():
        reason = "No verified trade had printed by the decision minute."
        return {**base, "outcome_status": "not_available", "reason": reason}
    window = dense.filter((pl.col("ts") > start) & (pl.col("ts") <= end))
    if entry_rows.item(0, "is_fill") or window.get_column("is_fill").any():
        reason = "A minute from the decision to the exit had no trade: as for Market Memory labels, no outcome."
        return {**base, "outcome_status": "not_available", "reason": reason}
    entry = entry_rows.item(0, "close")
    exit_price = window.filter(pl.col("ts") == end).item(0, "close")
    high, low = window.get_column("high").max(), window.get_column("low").min()
    sign = 1 if hypothesis.side == "buy" else -1
    favourable, adverse = (high, low) if sign == 1 else (low, high)
    return {
        **base,
        "outcome_status": "realized",
        "reason": None,
        "entry_price": entry,
        "exit_time": end,
        "exit_price": exit_price,
        "realized_return_pct": round(sign * (exit_price / entry - 1) * 100, 6),
        "max_favourable_excursion_pct": round(sign * (favourable / entry - 1) * 100, 6),  # type: ignore[operator]
        "max_adverse_excursion_pct": round(-sign * (adverse / entry - 1) * 100, 6),  # type: ignore[operator]
    }


def hypothesis_review(*, user: User, hypothesis_id: int) -> ReviewOut:
    """Review one of `user`'s hypotheses against verified bars and keep the review on the note."""
    at = now()
    with transaction.atomic():
        hypothesis = ResearchHypothesis.objects.select_for_update().filter(user=user, number=hypothesis_id).first()
        if hypothesis is None:
            raise ResearchError("not_found", f"No hypothesis {hypothesis_id} in this account's journal.")
        review = ReviewOut(
            hypothesis=hypothesis_out(hypothesis), reviewed_at=at, research_boundary=ResearchBoundary(),
            **_outcome(hypothesis),
        )  # fmt: skip
        hypothesis.reviewed_at, hypothesis.outcome = at, review.model_dump(mode="json")
        hypothesis.save(update_fields=["reviewed_at", "outcome"])
    return review
