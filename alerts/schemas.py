"""Arguments and results of the evidence-alert tools; results are built from rows by their own `of()`."""

from datetime import datetime
from typing import Literal, Self

from pydantic import BaseModel, Field

from alerts.models import AlertRule, Attempt, Delivery
from evidence.memory.strategies import MAX_ACTIVE_SIGNALS
from evidence.vocabulary import Ticker
from leroy.schemas import Instant, Name, ToolArgs

ALERT_ID = r"^alr_[0-9a-f]{24}$"
DELIVERY_ID = r"^dlv_[0-9a-f]{24}$"


class CreateAlertArgs(ToolArgs):
    name: Name = Field(min_length=1, max_length=100, description="A name for the rule, shown in lists and payloads")
    symbols: list[Ticker] | None = Field(
        default=None,
        min_length=1,
        max_length=50,
        description="Tickers to watch (any case), e.g. ['AAPL']; omit and set universe=true for every followed symbol",
    )
    universe: bool = Field(default=False, description="Watch every symbol the frame feed follows (instead of symbols)")
    side: Literal["buy", "sell"] = Field(description="Direction whose evidence must match: buy or sell")
    horizon_minutes: Literal[5, 15, 30, 60] = Field(description="The one forward horizon the thresholds apply to")
    min_active_signals: int = Field(
        default=1, ge=0, le=MAX_ACTIVE_SIGNALS, description="Minimum active strategy signals on the side"
    )
    min_match_tier: int = Field(
        default=1, ge=1, le=5, description="Minimum Market Memory match strength: 1 baseline .. 5 exact setup"
    )
    min_win_rate: float | None = Field(default=None, ge=0, le=1, description="Minimum historical win rate, 0..1")
    min_average_return_pct: float | None = Field(
        default=None, ge=-100, le=100, description="Minimum historical average forward return, in percent"
    )
    endpoint_url: str = Field(
        min_length=8, max_length=2000, description="The https:// URL Leroy POSTs signed deliveries to"
    )
    expires_at: Instant | None = Field(
        default=None,
        description="When the rule stops (ISO 8601 with an offset, or a date: its first UTC instant); none: never",
    )


class AlertIdArgs(ToolArgs):
    alert_id: str = Field(pattern=ALERT_ID, description="The alert's id (alr_...)")


class DeliveryIdArgs(ToolArgs):
    delivery_id: str = Field(
        pattern=DELIVERY_ID, description="The delivery's id (dlv_..., the X-Leroy-Delivery header)"
    )


class ListDeliveriesArgs(ToolArgs):
    alert_id: str | None = Field(default=None, pattern=ALERT_ID, description="Only this alert's deliveries")
    limit: int = Field(default=20, ge=1, le=50, description="How many recent deliveries (newest first)")


class LastDelivery(BaseModel):
    delivery_id: str
    event: str
    status: str
    created_at: datetime
    last_status_code: int | None


class AlertOut(BaseModel):
    alert_id: str
    name: str
    status: Literal["active", "paused", "disabled"]
    status_reason: str
    universe: bool
    symbols: list[str]
    side: Literal["buy", "sell"]
    horizon_minutes: int
    min_active_signals: int
    min_match_tier: int
    min_win_rate: float | None
    min_average_return_pct: float | None
    endpoint_url: str
    expires_at: datetime | None
    secret_prefix: str
    consecutive_failures: int
    suppressed_matches: int
    created_at: datetime
    last_delivery: LastDelivery | None

    @classmethod
    def of(cls, rule: AlertRule, last: Delivery | None) -> Self:
        return cls(
            alert_id=rule.public_id,
            name=rule.name,
            status=rule.status,  # type: ignore[arg-type]
            status_reason=rule.status_reason,
            universe=rule.universe,
            symbols=list(rule.symbols),
            side=rule.side,  # type: ignore[arg-type]
            horizon_minutes=rule.horizon_minutes,
            min_active_signals=rule.min_active_signals,
            min_match_tier=rule.min_match_tier,
            min_win_rate=rule.min_win_rate,
            min_average_return_pct=rule.min_average_return_pct,
            endpoint_url=rule.endpoint_url,
            expires_at=rule.expires_at,
            secret_prefix=rule.secret_prefix,
            consecutive_failures=rule.consecutive_failures,
            suppressed_matches=rule.suppressed_matches,
            created_at=rule.created_at,
            last_delivery=None
            if last is None
            else LastDelivery(
                delivery_id=last.public_id,
                event=last.event,
                status=last.status,
                created_at=last.created_at,
                last_status_code=last.last_status_code,
            ),
        )


class AlertCreated(BaseModel):
    alert: AlertOut
    signing_secret: str = Field(description="Shown once: store it now; it signs every delivery of this alert")
    metering: str


class AlertList(BaseModel):
    alerts: list[AlertOut]
    total: int
    limit: int


class AlertDeleted(BaseModel):
    alert_id: str
    deleted: bool


class SecretRotated(BaseModel):
    alert: AlertOut
    signing_secret: str = Field(description="Shown once; the previous secret no longer signs anything")


class AttemptOut(BaseModel):
    number: int
    trigger: str
    started_at: datetime
    finished_at: datetime | None
    duration_ms: int | None
    request_headers: dict[str, str]
    resolved_ip: str
    status_code: int | None
    outcome: str
    error: str
    response_snippet: str

    @classmethod
    def of(cls, attempt: Attempt) -> Self:
        return cls(
            number=attempt.number,
            trigger=attempt.trigger,
            started_at=attempt.started_at,
            finished_at=attempt.finished_at,
            duration_ms=attempt.duration_ms,
            request_headers=attempt.request_headers,
            resolved_ip=attempt.resolved_ip,
            status_code=attempt.status_code,
            outcome=attempt.outcome or "in_flight",
            error=attempt.error,
            response_snippet=attempt.response_snippet,
        )


class DeliveryOut(BaseModel):
    delivery_id: str
    alert_id: str
    event: str
    status: Literal["pending", "delivered", "failed"]
    symbol: str | None
    frame_time: datetime | None
    created_at: datetime
    expires_at: datetime
    next_attempt_at: datetime | None
    attempt_count: int
    last_status_code: int | None
    last_error: str
    request_body: str = Field(description="The exact JSON body sent on every attempt")
    attempts: list[AttemptOut]

    @classmethod
    def of(cls, delivery: Delivery) -> Self:
        return cls(
            delivery_id=delivery.public_id,
            alert_id=delivery.rule.public_id,
            event=delivery.event,
            status=delivery.status,  # type: ignore[arg-type]
            symbol=delivery.ticker or None,
            frame_time=delivery.frame_time,
            created_at=delivery.created_at,
            expires_at=delivery.expires_at,
            next_attempt_at=delivery.next_attempt_at,
            attempt_count=delivery.attempt_count,
            last_status_code=delivery.last_status_code,
            last_error=delivery.last_error,
            request_body=delivery.body,
            attempts=[AttemptOut.of(a) for a in delivery.attempts.order_by("number")],
        )


class DeliveryList(BaseModel):
    deliveries: list[DeliveryOut]
