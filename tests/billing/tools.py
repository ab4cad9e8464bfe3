"""A metered probe tool (test settings only): the pattern every metered tool follows with billing."""

import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.db import transaction
from pydantic import BaseModel, Field

from accounts.models import User
from billing import services
from billing.schemas import LookupUsage
from billing.services import BillingError
from leroy.mcp.registry import ToolCall, ToolFailure, tool
from leroy.schemas import ToolArgs


class MeteredArgs(ToolArgs):
    side: Literal["buy", "sell", "both"] = Field(description="Direction; both costs two lookups")
    fail: bool = Field(default=False, description="Make the tool's own work fail after the charge")
    client_request_id: str | None = Field(default=None, max_length=255, description="Idempotency key")
    hold_seconds: float = Field(default=0, ge=0, le=60, description="Stay in the charge's transaction this long")


class MeteredOut(BaseModel):
    evaluation_id: str
    usage: LookupUsage


@tool(
    name="probe_metered",
    title="Metered probe",
    args=MeteredArgs,
    output=MeteredOut,
    access="subscriber",
    scope="mcp:read",
    metering="lookup",
)
async def probe_metered(call: ToolCall, args: MeteredArgs) -> MeteredOut:
    """Charge like a real lookup and answer (subscriber)."""
    assert call.principal is not None
    user_id = call.principal.user_id
    fingerprint = hashlib.sha256(args.model_dump_json(exclude={"client_request_id"}).encode()).hexdigest()

    def run() -> dict[str, Any] | None:
        user = User.objects.get(pk=user_id)
        with transaction.atomic():  # the charge and the tool's work commit or roll back together
            charge = services.lookup_charge(
                user=user,
                tool="probe_metered",
                units=2 if args.side == "both" else 1,
                request_fingerprint=fingerprint,
                client_request_id=args.client_request_id,
            )
            if charge.replayed:
                return charge.stored_response
            if args.fail:
                raise ToolFailure("probe_failed", "The probe's work failed after the charge.")
            if args.hold_seconds:
                # Charged, answer not stored yet: the moment a crash must not turn into a charge without an answer.
                Path(tempfile.gettempdir(), f"leroy-hold-{args.client_request_id}").touch()
                time.sleep(args.hold_seconds)
            answer = {"evaluation_id": f"eval_{charge.usage_event_id}", "usage": charge.usage}
            services.lookup_store_response(charge=charge, response=answer)
            return answer

    try:
        answer = await sync_to_async(run)()
    except BillingError as refused:
        raise ToolFailure(refused.code, refused.message, **refused.details) from None
    return MeteredOut.model_validate(answer)
