"""Writes of the alerts app: rules, the evaluation of new frames, and delivery attempts.

Nothing here is metered: creating rules is free and a delivery costs no lookup (the evaluation behind a match is
evidence's own, run uncharged through `alerts.evidence`).
"""

import json
import logging
import random
import secrets
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q

from accounts.models import User
from alerts import evidence, signing, webhooks
from alerts.models import AlertRule, Attempt, Delivery, FrameCursor
from leroy import broker
from leroy.clock import now
from leroy.errors import DomainError

logger = logging.getLogger(__name__)
MAX_SYMBOLS = 50
USER_AGENT = "Leroy-Webhooks/1"
MANUAL_RETRY_AFTER = 5  # seconds: a test or redelivery in flight ends within LEROY_WEBHOOK_TOTAL_TIMEOUT
RESEARCH_NOTE = "Research-only evidence from Leroy's verified frame and Market Memory; Leroy placed no order."
_jitter = random.SystemRandom()


class AlertError(DomainError):
    """An alerts rule refused the request; nothing changed."""


def _public_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def _symbols(symbols: list[str] | None, universe: bool) -> list[str]:
    if universe == bool(symbols):
        raise AlertError("invalid_request", "Give either a list of symbols or universe=true, not both or neither.")
    if universe:
        return []
    tickers = list(dict.fromkeys(s.strip().upper() for s in symbols or []))
    if len(tickers) > MAX_SYMBOLS:
        raise AlertError("invalid_request", f"A rule follows at most {MAX_SYMBOLS} symbols; use universe=true.")
    followed = set(evidence.universe())
    unknown = [t for t in tickers if t not in followed]
    if unknown:
        raise AlertError(
            "unknown_symbol",
            f"Not followed by the frame feed, so a rule could never match: {', '.join(unknown)}.",
            unknown=unknown,
            followed=sorted(followed),
        )
    return tickers


def rule_create(
    *,
    user: User,
    name: str,
    symbols: list[str] | None,
    universe: bool,
    side: str,
    horizon_minutes: int,
    min_active_signals: int,
    min_match_tier: int,
    min_win_rate: float | None,
    min_average_return_pct: float | None,
    endpoint_url: str,
    expires_at: datetime | None,
) -> tuple[AlertRule, str]:
    """Create a rule; returns it with its signing secret, which is never shown again."""
    at = now()
    tickers = _symbols(symbols, universe)
    if expires_at is not None and expires_at <= at:
        raise AlertError("invalid_request", "expires_at must be in the future.")
    webhooks.endpoint_check(endpoint_url)
    secret = signing.secret_new()
    with transaction.atomic():
        User.objects.select_for_update().get(pk=user.pk)  # one creation at a time per account, for the limit
        if AlertRule.objects.filter(user=user).count() >= settings.LEROY_ALERTS_MAX_RULES:
            raise AlertError(
                "alert_limit_reached",
                f"An account may keep at most {settings.LEROY_ALERTS_MAX_RULES} alert rules; delete one first.",
                limit=settings.LEROY_ALERTS_MAX_RULES,
            )
        rule = AlertRule.objects.create(
            public_id=_public_id("alr"),
            user=user,
            name=name.strip(),
            universe=universe,
            symbols=tickers,
            side=side,
            horizon_minutes=horizon_minutes,
            min_active_signals=min_active_signals,
            min_match_tier=min_match_tier,
            min_win_rate=min_win_rate,
            min_average_return_pct=min_average_return_pct,
            endpoint_url=endpoint_url.strip(),
            expires_at=expires_at,
            secret_ciphertext=signing.secret_encrypt(secret),
            secret_prefix=signing.secret_display_prefix(secret),
            created_at=at,
        )
    return rule, secret


def _own_rule(user: User, alert_id: str, *, lock: bool = False) -> AlertRule:
    rows = AlertRule.objects.filter(user=user, public_id=alert_id)
    rule = (rows.select_for_update() if lock else rows).first()
    if rule is None:
        raise AlertError("not_found", f"No alert {alert_id} in this account.", alert_id=alert_id)
    return rule


@transaction.atomic
def rule_pause(*, user: User, alert_id: str) -> AlertRule:
    rule = _own_rule(user, alert_id, lock=True)
    if rule.status == AlertRule.Status.ACTIVE:
        rule.status, rule.status_reason = AlertRule.Status.PAUSED, "Paused by the owner."
        rule.save(update_fields=["status", "status_reason"])
    return rule


def rule_resume(*, user: User, alert_id: str) -> AlertRule:
    """Re-activate a paused or disabled rule (the endpoint is checked again, the failure count starts over)."""
    with transaction.atomic():
        rule = _own_rule(user, alert_id)
        url = rule.endpoint_url
    if rule.expires_at is not None and rule.expires_at <= now():
        raise AlertError("alert_expired", "This alert has expired; create a new one.", alert_id=alert_id)
    webhooks.endpoint_check(url)
    with transaction.atomic():
        rule = _own_rule(user, alert_id, lock=True)
        rule.status, rule.status_reason, rule.consecutive_failures = AlertRule.Status.ACTIVE, "", 0
        rule.save(update_fields=["status", "status_reason", "consecutive_failures"])
    return rule


@transaction.atomic
def rule_delete(*, user: User, alert_id: str) -> None:
    """Delete a rule with its delivery log; attempts already queued find nothing and do nothing."""
    _own_rule(user, alert_id, lock=True).delete()


@transaction.atomic
def secret_rotate(*, user: User, alert_id: str) -> tuple[AlertRule, str]:
    """Replace the signing secret at once: every later attempt (retries included) is signed with the new one."""
    rule = _own_rule(user, alert_id, lock=True)
    secret = signing.secret_new()
    rule.secret_ciphertext = signing.secret_encrypt(secret)
    rule.secret_prefix = signing.secret_display_prefix(secret)
    rule.secret_rotated_at = now()
    rule.save(update_fields=["secret_ciphertext", "secret_prefix", "secret_rotated_at"])
    return rule, secret


# --- evaluation of new frames --------------------------------------------------------------------------------------


def match_figures(rule: AlertRule, evaluation: evidence.EvaluationOut) -> dict[str, Any] | None:
    """The rule's evidence in `evaluation` when every threshold holds, else None.

    Never a match on a stale frame, a closed market, or evidence below the gate: the evaluation must be `evaluated`
    on an available frame and the rule's side and horizon must carry a historical tier with the minimum sample."""
    frame = evaluation.current_market_frame
    if evaluation.status != "evaluated" or frame is None or frame.frame_status != "available":
        return None
    if frame.source_time is None or evaluation.active_confluence is None or evaluation.market_memory is None:
        return None
    row = next(
        (r for r in evaluation.historical_evidence
         if r.side == rule.side and r.horizon_minutes == rule.horizon_minutes and r.availability == "available"),
        None,
    )  # fmt: skip
    match = next(
        (m for m in evaluation.market_memory.matches
         if m.side == rule.side and m.horizon_minutes == rule.horizon_minutes and m.source == "historical"),
        None,
    )  # fmt: skip
    side = next((s for s in evaluation.active_confluence.sides if s.side == rule.side), None)
    if row is None or match is None or side is None:
        return None
    if match.match_strength.score < rule.min_match_tier or side.active_signal_count < rule.min_active_signals:
        return None
    if rule.min_win_rate is not None and (row.win_rate is None or row.win_rate < rule.min_win_rate):
        return None
    if rule.min_average_return_pct is not None and (
        row.average_return_pct is None or row.average_return_pct < rule.min_average_return_pct
    ):
        return None
    regime = evaluation.active_confluence.regime
    return {
        "symbol": evaluation.request.symbol,
        "side": rule.side,
        "horizon_minutes": rule.horizon_minutes,
        "frame_time": _iso(frame.source_time),
        "evaluation_id": evaluation.evaluation_id,
        "evaluation_status": evaluation.status,
        "match_strength": match.match_strength.model_dump(mode="json"),
        "sample_size": row.sample_size,
        "distinct_sessions": match.distinct_sessions,
        "average_return_pct": row.average_return_pct,
        "win_rate": row.win_rate,
        "profit_factor": row.profit_factor,
        "lift_vs_baseline_bps": row.lift_vs_baseline_bps,
        "active_signal_count": side.active_signal_count,
        "active_signals": side.active_signals,
        "regime": regime.model_dump(mode="json"),
        "artifact_version": evaluation.provenance.artifact_version,
        "artifact_sha256": evaluation.provenance.artifact_sha256,
        "source": evaluation.provenance.source,
        "thresholds": {
            "min_active_signals": rule.min_active_signals,
            "min_match_tier": rule.min_match_tier,
            "min_win_rate": rule.min_win_rate,
            "min_average_return_pct": rule.min_average_return_pct,
        },
    }


def _body(*, event: str, delivery_id: str, rule: AlertRule, at: datetime, expires_at: datetime, data: Any) -> str:
    """The exact JSON sent, serialised once: every retry and redelivery sends these same bytes."""
    return json.dumps(
        {
            "type": event,
            "delivery_id": delivery_id,
            "alert_id": rule.public_id,
            "alert_name": rule.name,
            "created_at": _iso(at),
            "expires_at": _iso(expires_at),
            "data": data,
            "research_boundary": evidence.ResearchBoundary().model_dump(mode="json"),
            "note": RESEARCH_NOTE,
        },
        separators=(",", ":"),
    )


def _hourly_budget_left(rule: AlertRule, at: datetime) -> int:
    since = at - timedelta(hours=1)
    matched = Delivery.objects.filter(rule=rule, event=Delivery.Event.MATCHED, created_at__gt=since).count()
    manual = Attempt.objects.filter(
        delivery__rule=rule, trigger__in=[Attempt.Trigger.TEST, Attempt.Trigger.REDELIVER], started_at__gt=since
    ).count()
    return settings.LEROY_ALERTS_DELIVERIES_PER_HOUR - matched - manual


def _delivery_window_end(rule: AlertRule, frame_time: datetime, at: datetime) -> datetime:
    ends = [frame_time + timedelta(minutes=1 + settings.LEROY_ALERTS_DELIVERY_WINDOW_MINUTES)]
    close = evidence.session_close(at)
    if close is not None:
        ends.append(close)
    if rule.expires_at is not None:
        ends.append(rule.expires_at)
    return min(ends)


def _delivery_for_match(rule: AlertRule, figures: dict[str, Any], at: datetime) -> Delivery | None:
    """At most one delivery per rule and frame: the rule row is locked, the unique constraint is the backstop."""
    from alerts import tasks

    frame_time = datetime.fromisoformat(figures["frame_time"].replace("Z", "+00:00"))
    with transaction.atomic():
        locked = AlertRule.objects.select_for_update().filter(pk=rule.pk, status=AlertRule.Status.ACTIVE).first()
        if locked is None:
            return None
        seen = Delivery.objects.filter(
            rule=locked, event=Delivery.Event.MATCHED, ticker=figures["symbol"], frame_time=frame_time
        )
        if seen.exists():
            return None
        if _hourly_budget_left(locked, at) <= 0:
            AlertRule.objects.filter(pk=locked.pk).update(suppressed_matches=F("suppressed_matches") + 1)
            return None
        delivery_id = _public_id("dlv")
        expires_at = _delivery_window_end(locked, frame_time, at)
        try:
            with transaction.atomic():
                delivery = Delivery.objects.create(
                    public_id=delivery_id,
                    rule=locked,
                    event=Delivery.Event.MATCHED,
                    ticker=figures["symbol"],
                    frame_time=frame_time,
                    body=_body(
                        event=Delivery.Event.MATCHED,
                        delivery_id=delivery_id,
                        rule=locked,
                        at=at,
                        expires_at=expires_at,
                        data=figures,
                    ),
                    next_attempt_at=at,
                    expires_at=expires_at,
                    created_at=at,
                )
        except IntegrityError:
            return None  # another evaluator recorded this frame first
        # Not sent (the broker down) it still goes: `alerts-sweep` sends every delivery that is due.
        transaction.on_commit(lambda: broker.sent(lambda: tasks.delivery_send.delay(delivery.pk), "alert delivery"))
    return delivery


def _cursor_advance(ticker: str, source_time: datetime) -> None:
    cursor, created = FrameCursor.objects.get_or_create(ticker=ticker, defaults={"source_time": source_time})
    if not created:
        FrameCursor.objects.filter(pk=cursor.pk, source_time__lt=source_time).update(source_time=source_time)


def frames_evaluate() -> int:
    """Evaluate the active rules against every frame newer than its symbol's watermark; returns deliveries created.

    One uncharged evaluation per symbol, side and horizon is shared by every rule that asks for it."""
    at = now()
    rules = list(
        AlertRule.objects.filter(status=AlertRule.Status.ACTIVE, user__is_active=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=at)
        )
    )
    cursors = dict(FrameCursor.objects.values_list("ticker", "source_time"))
    fresh = [f for f in evidence.current_frames() if f.ticker not in cursors or f.source_time > cursors[f.ticker]]
    followed = set(evidence.universe()) if any(rule.universe for rule in rules) else set()
    created = 0
    for frame in fresh:
        wanting = [r for r in rules if (frame.ticker in followed if r.universe else frame.ticker in r.symbols)]
        evaluations: dict[tuple[str, int], evidence.EvaluationOut] = {}
        for rule in wanting:
            key = (rule.side, rule.horizon_minutes)
            if key not in evaluations:
                try:
                    evaluations[key] = evidence.evaluate(
                        ticker=frame.ticker,
                        side=rule.side,  # type: ignore[arg-type]
                        horizon=rule.horizon_minutes,  # type: ignore[arg-type]
                    )
                except evidence.MemoryUnavailable:
                    logger.warning("alerts: no active Market Memory artifact; frames stay unevaluated")
                    return created
            figures = match_figures(rule, evaluations[key])
            if figures is not None and _delivery_for_match(rule, figures, at) is not None:
                created += 1
        _cursor_advance(frame.ticker, frame.source_time)
    return created


# --- delivery attempts ---------------------------------------------------------------------------------------------


def _backoff_seconds(number: int, retry_after: int | None) -> float:
    """Exponential backoff with full jitter (a uniform draw up to base * 2^(n-1), capped); Retry-After is honoured
    up to the cap."""
    ceiling = min(settings.LEROY_ALERTS_RETRY_CAP_SECONDS, settings.LEROY_ALERTS_RETRY_BASE_SECONDS * 2 ** (number - 1))
    delay = max(1.0, _jitter.uniform(0, ceiling))
    if retry_after is not None:
        delay = max(delay, min(float(retry_after), settings.LEROY_ALERTS_RETRY_CAP_SECONDS))
    return delay


def _rule_failed(rule: AlertRule, error: str) -> None:
    """A matched delivery ended failed: count it, and pause the rule after N in a row (the owner sees why)."""
    AlertRule.objects.filter(pk=rule.pk).update(consecutive_failures=F("consecutive_failures") + 1)
    rule.refresh_from_db(fields=["consecutive_failures", "status"])
    limit = settings.LEROY_ALERTS_PAUSE_AFTER_FAILURES
    if rule.status == AlertRule.Status.ACTIVE and rule.consecutive_failures >= limit:
        reason = f"Paused automatically: {rule.consecutive_failures} deliveries in a row failed (last: {error})."
        AlertRule.objects.filter(pk=rule.pk).update(status=AlertRule.Status.PAUSED, status_reason=reason[:300])


def _give_up(delivery: Delivery, error: str, *, counts: bool = True) -> None:
    delivery.status, delivery.last_error, delivery.next_attempt_at = Delivery.Status.FAILED, error[:300], None
    delivery.save(update_fields=["status", "last_error", "next_attempt_at"])
    if counts and delivery.event == Delivery.Event.MATCHED:
        _rule_failed(delivery.rule, error)


def _headers(rule: AlertRule, delivery: Delivery) -> dict[str, str]:
    # The signed timestamp is wall-clock Unix time, not the (possibly replayed) service clock: receivers compare it
    # with their own clock.
    timestamp = int(time.time())
    body = delivery.body.encode()
    secret = signing.secret_decrypt(rule.secret_ciphertext)
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Leroy-Event": delivery.event,
        "X-Leroy-Delivery": delivery.public_id,
        "X-Leroy-Timestamp": str(timestamp),
        "X-Leroy-Signature": signing.signature(
            secret=secret, delivery_id=delivery.public_id, timestamp=timestamp, body=body
        ),
    }


def _claim(delivery_id: int, trigger: str, at: datetime) -> tuple[Delivery, Attempt] | None:
    """Start an attempt: lease the delivery and write its Attempt row, committed before anything is sent, so a
    worker that dies mid-send leaves an open attempt and a lease that expires (the delivery stays retryable)."""
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(of=("self", "rule"))
            .select_related("rule__user")
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None:
            return None  # the rule was deleted
        if not delivery.rule.user.is_active:  # suspended or closed: nothing more leaves for its receivers
            if trigger != Attempt.Trigger.SCHEDULED:
                raise AlertError("account_inactive", "The account is suspended or closed; nothing is sent.")
            if delivery.status == Delivery.Status.PENDING:
                _give_up(delivery, "The account is suspended or closed.", counts=False)
            return None
        if delivery.lease_until is not None and delivery.lease_until > at:
            if trigger == Attempt.Trigger.SCHEDULED:
                return None  # another attempt is in flight
            raise AlertError("delivery_in_flight", "An attempt of this delivery is in flight; try again shortly.")
        if trigger == Attempt.Trigger.SCHEDULED:
            if delivery.status != Delivery.Status.PENDING:
                return None  # delivered or given up already: the task is idempotent on the delivery id
            if delivery.next_attempt_at is not None and delivery.next_attempt_at > at:
                return None  # not due yet (an early or duplicate task)
            if at >= delivery.expires_at:
                _give_up(delivery, "The delivery window ended before it could be delivered.")
                return None
            if delivery.rule.status != AlertRule.Status.ACTIVE:
                _give_up(delivery, f"The alert is {delivery.rule.status}.", counts=False)
                return None
        Attempt.objects.filter(delivery=delivery, finished_at__isnull=True).update(
            finished_at=at, outcome="interrupted", error="The worker stopped during this attempt."
        )
        delivery.attempt_count += 1
        delivery.lease_until = at + timedelta(seconds=settings.LEROY_ALERTS_LEASE_SECONDS)
        delivery.save(update_fields=["attempt_count", "lease_until"])
        attempt = Attempt.objects.create(
            delivery=delivery,
            number=delivery.attempt_count,
            trigger=trigger,
            started_at=at,
            request_headers=_headers(delivery.rule, delivery),
        )
    return delivery, attempt


def _finish(delivery: Delivery, attempt: Attempt, sent: webhooks.Sent, address: str) -> None:
    from alerts import tasks

    at = now()
    with transaction.atomic():
        current = Delivery.objects.select_for_update().select_related("rule").filter(pk=delivery.pk).first()
        if current is None:
            return
        attempt.finished_at, attempt.duration_ms, attempt.resolved_ip = at, sent.duration_ms, address
        attempt.status_code, attempt.outcome, attempt.error = sent.status_code, sent.outcome, sent.error[:300]
        attempt.response_snippet = sent.snippet
        attempt.save()
        current.lease_until, current.last_status_code, current.last_error = None, sent.status_code, sent.error[:300]
        current.save(update_fields=["lease_until", "last_status_code", "last_error"])
        rule = current.rule
        if sent.outcome == "success":
            current.status, current.delivered_at, current.next_attempt_at = Delivery.Status.DELIVERED, at, None
            current.save(update_fields=["status", "delivered_at", "next_attempt_at"])
            AlertRule.objects.filter(pk=rule.pk).update(consecutive_failures=0)
        elif sent.outcome == "gone":
            reason = f"Disabled: the receiver answered 410 Gone at {_iso(at)}."
            AlertRule.objects.filter(pk=rule.pk).update(status=AlertRule.Status.DISABLED, status_reason=reason)
            current.status, current.next_attempt_at = Delivery.Status.FAILED, None
            current.save(update_fields=["status", "next_attempt_at"])
        elif attempt.trigger == Attempt.Trigger.TEST:
            current.status = Delivery.Status.FAILED  # a test is one attempt, reported to the caller
            current.save(update_fields=["status"])
        elif current.status == Delivery.Status.PENDING and attempt.trigger == Attempt.Trigger.SCHEDULED:
            delay = _backoff_seconds(attempt.number, sent.retry_after)
            due = at + timedelta(seconds=delay)
            if due >= current.expires_at:
                _give_up(current, sent.error or sent.outcome)
            else:
                current.next_attempt_at = due
                current.save(update_fields=["next_attempt_at"])
                transaction.on_commit(
                    lambda: broker.sent(
                        lambda: tasks.delivery_send.apply_async((current.pk,), countdown=delay), "alert retry"
                    )
                )


def _attempt(delivery_id: int, trigger: str) -> Attempt | None:
    claimed = _claim(delivery_id, trigger, now())
    return None if claimed is None else _send(*claimed)


def _send(delivery: Delivery, attempt: Attempt) -> Attempt:
    """Send a claimed attempt (its row committed) and record what came back."""
    body = delivery.body.encode()
    try:
        endpoint = webhooks.endpoint_check(delivery.rule.endpoint_url)  # again at every attempt: DNS may change
    except webhooks.UnsafeEndpoint as refused:
        sent = webhooks.Sent(status_code=None, outcome="unsafe_endpoint", error=refused.message, snippet="",
                             duration_ms=0)  # fmt: skip
        _finish(delivery, attempt, sent, "")
    else:
        _finish(
            delivery, attempt, webhooks.post(endpoint, body=body, headers=attempt.request_headers), endpoint.address
        )
    attempt.refresh_from_db()
    return attempt


def delivery_attempt(*, delivery_id: int) -> Attempt | None:
    """The scheduled attempt of a pending delivery that is due (the task's service: a no-op when not due)."""
    return _attempt(delivery_id, Attempt.Trigger.SCHEDULED)


def _manual_send_free(user: User, at: datetime) -> None:
    """Refuse a test or redelivery while another of the account's is in flight. Each holds its request (a web or
    MCP slot of the process) until the receiver answers or the attempt's deadline passes: an account firing many at
    a slow receiver filled every slot (found from outside). The account's row lock serialises the check (taken
    before any rule or delivery lock); an attempt whose worker died stops counting when its lease ends."""
    User.objects.select_for_update().filter(pk=user.pk).first()
    leased = at - timedelta(seconds=settings.LEROY_ALERTS_LEASE_SECONDS)
    manual = (Attempt.Trigger.TEST, Attempt.Trigger.REDELIVER)
    open_attempts = Attempt.objects.filter(
        delivery__rule__user=user, trigger__in=manual, finished_at__isnull=True, started_at__gt=leased
    )
    if open_attempts.exists():
        raise AlertError(
            "delivery_in_flight",
            "Another test or redelivery of this account is in flight; try again when it ends.",
            retry_after_seconds=MANUAL_RETRY_AFTER,
        )


def send_test_event(*, user: User, alert_id: str) -> Delivery:
    """Send a signed `alert.test` event now, once; returns its delivery with the attempt's outcome."""
    at = now()
    with transaction.atomic():
        _own_rule(user, alert_id)  # an unknown alert is refused as such, before the account's lock
        _manual_send_free(user, at)
        rule = _own_rule(user, alert_id, lock=True)
        if _hourly_budget_left(rule, at) <= 0:
            raise AlertError("rate_limited", "This alert's hourly delivery limit is used up.", alert_id=alert_id)
        delivery_id = _public_id("dlv")
        data = {"message": "A test delivery from Leroy. It carries no evidence and no match."}
        delivery = Delivery.objects.create(
            public_id=delivery_id,
            rule=rule,
            event=Delivery.Event.TEST,
            body=_body(event=Delivery.Event.TEST, delivery_id=delivery_id, rule=rule, at=at, expires_at=at, data=data),
            expires_at=at,
            created_at=at,
        )
        # Claimed under the rule's lock: its attempt counts against the budget before the next caller reads it.
        claimed = _claim(delivery.pk, Attempt.Trigger.TEST, at)
    if claimed is not None:
        _send(*claimed)
    delivery.refresh_from_db()
    return delivery


def redeliver(*, user: User, delivery_id: str) -> Delivery:
    """Send one of the account's deliveries again now (same id and body, fresh timestamp and signature)."""
    at = now()
    with transaction.atomic():
        delivery = Delivery.objects.filter(rule__user=user, public_id=delivery_id).select_related("rule").first()
        if delivery is None:
            raise AlertError("not_found", f"No delivery {delivery_id} in this account.", delivery_id=delivery_id)
        _manual_send_free(user, at)
        # The attempt is claimed (the delivery locked, its row written), then the rule locked and the budget read
        # with this attempt in it (the delivery's lock before the rule's, as an attempt's finish takes them): a
        # concurrent redelivery or test reads the budget only after this one's attempt is counted or undone.
        claimed = _claim(delivery.pk, Attempt.Trigger.REDELIVER, at)
        if claimed is not None:
            rule = AlertRule.objects.select_for_update().get(pk=delivery.rule_id)
            if _hourly_budget_left(rule, at) < 0:
                raise AlertError(
                    "rate_limited", "This alert's hourly delivery limit is used up.", delivery_id=delivery_id
                )
    if claimed is not None:
        _send(*claimed)
    delivery.refresh_from_db()
    return delivery


def deliveries_sweep() -> int:
    """Re-enqueue pending deliveries that are due and not in flight (lost messages, dead workers, the end of a
    window); returns how many were enqueued."""
    from alerts import tasks

    at = now()
    due = list(
        Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=at)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lte=at))
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:500]
    )
    for pk in due:
        tasks.delivery_send.delay(pk)
    return len(due)
