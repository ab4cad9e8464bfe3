"""A metered probe tool (test settings only), metered the way every lookup tool is (billing.metering)."""

import tempfile
import time
import uuid
from pathlib import Path
from typing import Literal

from asgiref.sync import sync_to_async
from pydantic import BaseModel, Field

from billing.metering import metered_answer
from billing.schemas import LookupUsage
from leroy.mcp.registry import ToolCall, ToolFailure, tool
from leroy.schemas import Answer, ToolArgs


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

    def fail_after_the_charge(result: MeteredOut) -> MeteredOut:
        if args.fail:
            raise ToolFailure("probe_failed", "The probe's work failed after the charge.")
        if args.hold_seconds:
            # Charged, answer not stored yet: the moment a crash must not turn into a charge without an answer.
            Path(tempfile.gettempdir(), f"leroy-hold-{args.client_request_id}").touch()
            time.sleep(args.hold_seconds)
        return result

    def run() -> MeteredOut:
        return metered_answer(
            user=call.user(),
            tool=call.tool,
            args=args,
            output=MeteredOut,
            compute=lambda: Answer(
                {"evaluation_id": f"eval_{uuid.uuid4().hex}"}, lookups=2 if args.side == "both" else 1
            ),
            finish=fail_after_the_charge,
        )

    return await sync_to_async(run)()
