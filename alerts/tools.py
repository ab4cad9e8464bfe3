"""The evidence-alert MCP tools: thin edges over alerts.selectors and alerts.services.

Reads need `mcp:read`, anything that changes a rule or sends a request needs `mcp:write`. Nothing is metered:
creating rules is free and a delivery costs no lookup.
"""

from collections.abc import Callable

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from pydantic import BaseModel

from alerts import selectors, services
from alerts.models import AlertRule
from alerts.schemas import (
    AlertCreated,
    AlertDeleted,
    AlertIdArgs,
    AlertList,
    AlertOut,
    CreateAlertArgs,
    DeliveryIdArgs,
    DeliveryList,
    DeliveryOut,
    ListDeliveriesArgs,
    SecretRotated,
)
from leroy.mcp.registry import Handler, ToolCall, tool
from leroy.schemas import ToolArgs

FREE = "Free: creating and managing rules costs no lookup, and neither does a delivery."


class NoArgs(ToolArgs):
    pass


def _tool(
    name: str,
    title: str,
    args: type[ToolArgs],
    output: type[BaseModel],
    *,
    write: bool,
    idempotent: bool | None = None,
    destructive: bool = False,
    open_world: bool = False,
) -> Callable[[Handler], Handler]:
    """Writes need mcp:write; a tool that sends a webhook reaches outside Leroy (open world)."""
    return tool(
        name=name, title=title, args=args, output=output, access="subscriber",
        scope="mcp:write" if write else "mcp:read", metering="free", read_only=not write,
        idempotent=not write if idempotent is None else idempotent, destructive=destructive, open_world=open_world,
    )  # fmt: skip


async def _run[Built: BaseModel](build: Callable[[], Built]) -> Built:
    return await sync_to_async(build)()


async def _network[Built: BaseModel](build: Callable[[], Built]) -> Built:
    """Run a block that sends a webhook (up to the connect + read timeouts) off the shared ORM thread, so one slow
    receiver does not hold up every other call of this process."""

    def run() -> Built:
        try:
            return build()
        finally:
            connections.close_all()  # this pool thread's own connections

    return await sync_to_async(run, thread_sensitive=False)()


def _alert(rule: AlertRule) -> AlertOut:
    return AlertOut.of(rule, selectors.last_delivery(rule=rule))


@_tool("create_evidence_alert", "Create evidence alert", CreateAlertArgs, AlertCreated, write=True)
async def create_evidence_alert(call: ToolCall, args: CreateAlertArgs) -> AlertCreated:
    """Create a wake rule: when a fresh open-session frame of a watched symbol matches, Leroy POSTs a signed JSON
    webhook (`alert.matched`) to endpoint_url.

    Watch `symbols` or set universe=true. The rule matches when evaluate_current_setup's own evidence for `side`
    and `horizon_minutes` is available and meets min_active_signals, min_match_tier (1..5), min_win_rate (0..1) and
    min_average_return_pct. Never on stale frames, a closed market or evidence below the minimum sample. At most
    one delivery per rule and frame; retried with backoff until its window ends. The endpoint must be https to a
    public host. Returns `signing_secret` ONCE: verify X-Leroy-Signature `v1=<hex HMAC-SHA256 of
    "{X-Leroy-Delivery}.{X-Leroy-Timestamp}.{raw body}">` with it. Free: creating and managing rules costs no
    lookup, and neither does a delivery. Research only: no order is ever placed."""

    def run() -> AlertCreated:
        rule, secret = services.rule_create(
            user=call.user(),
            name=args.name,
            symbols=args.symbols,
            universe=args.universe,
            side=args.side,
            horizon_minutes=args.horizon_minutes,
            min_active_signals=args.min_active_signals,
            min_match_tier=args.min_match_tier,
            min_win_rate=args.min_win_rate,
            min_average_return_pct=args.min_average_return_pct,
            endpoint_url=args.endpoint_url,
            expires_at=args.expires_at,
        )
        return AlertCreated(alert=AlertOut.of(rule, None), signing_secret=secret, metering=FREE)

    return await _run(run)


@_tool("list_evidence_alerts", "List evidence alerts", NoArgs, AlertList, write=False)
async def list_evidence_alerts(call: ToolCall, args: NoArgs) -> AlertList:
    """Your alert rules (newest first) with status, the reason for a pause, and the last delivery. Free."""

    def run() -> AlertList:
        alerts = [_alert(rule) for rule in selectors.rule_list(user=call.user())]
        return AlertList(alerts=alerts, total=len(alerts), limit=settings.LEROY_ALERTS_MAX_RULES)

    return await _run(run)


@_tool("pause_evidence_alert", "Pause evidence alert", AlertIdArgs, AlertOut, write=True, idempotent=True)
async def pause_evidence_alert(call: ToolCall, args: AlertIdArgs) -> AlertOut:
    """Pause a rule: it is no longer evaluated and its pending deliveries stop. Free."""
    return await _run(lambda: _alert(services.rule_pause(user=call.user(), alert_id=args.alert_id)))


@_tool("resume_evidence_alert", "Resume evidence alert", AlertIdArgs, AlertOut, write=True, idempotent=True)
async def resume_evidence_alert(call: ToolCall, args: AlertIdArgs) -> AlertOut:
    """Resume a paused or disabled rule; the endpoint is checked again and the failure count starts over. Free."""
    return await _run(lambda: _alert(services.rule_resume(user=call.user(), alert_id=args.alert_id)))


@_tool("delete_evidence_alert", "Delete evidence alert", AlertIdArgs, AlertDeleted, write=True, destructive=True)
async def delete_evidence_alert(call: ToolCall, args: AlertIdArgs) -> AlertDeleted:
    """Delete a rule and its delivery log. Free."""

    def run() -> AlertDeleted:
        services.rule_delete(user=call.user(), alert_id=args.alert_id)
        return AlertDeleted(alert_id=args.alert_id, deleted=True)

    return await _run(run)


@_tool("test_evidence_alert", "Test evidence alert", AlertIdArgs, DeliveryOut, write=True, open_world=True)
async def test_evidence_alert(call: ToolCall, args: AlertIdArgs) -> DeliveryOut:
    """Send a signed `alert.test` event to the rule's endpoint now (one attempt) and return the delivery with its
    outcome: status code, duration, error kind. Counts toward the rule's hourly delivery limit. Free."""
    return await _network(lambda: DeliveryOut.of(services.send_test_event(user=call.user(), alert_id=args.alert_id)))


@_tool("rotate_evidence_alert_secret", "Rotate alert secret", AlertIdArgs, SecretRotated, write=True, destructive=True)
async def rotate_evidence_alert_secret(call: ToolCall, args: AlertIdArgs) -> SecretRotated:
    """Replace the rule's signing secret. The new secret is returned ONCE; from now on every delivery, retries
    included, is signed with it and the old secret signs nothing. Free."""

    def run() -> SecretRotated:
        rule, secret = services.secret_rotate(user=call.user(), alert_id=args.alert_id)
        return SecretRotated(alert=_alert(rule), signing_secret=secret)

    return await _run(run)


@_tool("list_alert_deliveries", "List alert deliveries", ListDeliveriesArgs, DeliveryList, write=False)
async def list_alert_deliveries(call: ToolCall, args: ListDeliveriesArgs) -> DeliveryList:
    """Recent deliveries of your alerts (newest first): event, status, the exact body, and every attempt with its
    request headers, response status, duration and error. Free."""

    def run() -> DeliveryList:
        user = call.user()
        if args.alert_id is not None and selectors.rule_get(user=user, alert_id=args.alert_id) is None:
            # Not an empty list: that would say this account has such an alert, with nothing delivered yet.
            raise services.AlertError("not_found", f"No alert {args.alert_id} in this account.", alert_id=args.alert_id)
        rows = selectors.delivery_list(user=user, alert_id=args.alert_id, limit=args.limit)
        return DeliveryList(deliveries=[DeliveryOut.of(d) for d in rows])

    return await _run(run)


@_tool("redeliver_alert_delivery", "Redeliver alert delivery", DeliveryIdArgs, DeliveryOut, write=True, open_world=True)
async def redeliver_alert_delivery(call: ToolCall, args: DeliveryIdArgs) -> DeliveryOut:
    """Send one of your deliveries again now: same delivery id and body, a fresh timestamp and signature. Returns
    the delivery with the new attempt. Counts toward the rule's hourly delivery limit. Free."""
    return await _network(lambda: DeliveryOut.of(services.redeliver(user=call.user(), delivery_id=args.delivery_id)))
