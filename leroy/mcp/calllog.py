"""One JSON log line and the metrics per MCP tool call, read from what the transport sent back.

The line names the tool (a registered name, else "unknown"), the principal (`apikey:<id>` or `oauth:<client>` and
the user id; never a credential), the protocol era, the HTTP status, an outcome code, the lookups the call was
charged as its charge committed (0 for a replay or an answer that cost nothing; null when none committed before the
call ended: nothing metered, or a client gone first, whose charge the ledger has), the latency and the request id.
Never arguments, answers or headers.
"""

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Message, Send

from leroy import metrics

logger = logging.getLogger("leroy.mcp.calls")

REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
OUTCOME = re.compile(r"[a-z0-9_]{1,48}")
CAPTURE_LIMIT = 1024 * 1024  # larger answers are logged without an outcome read from the body
MODERN = "2026-07-28"


def request_id_of(header: str | None) -> str:
    """The caller's X-Request-Id when it is a plain token, else a fresh one (never echo arbitrary bytes)."""
    return header if header and REQUEST_ID.fullmatch(header) else uuid.uuid4().hex


def _payload(content_type: str, body: bytes) -> Any:
    text = body.decode("utf-8", "replace")
    if content_type.startswith("text/event-stream"):
        for line in reversed(text.splitlines()):
            if line.startswith("data:"):
                try:
                    message = json.loads(line[5:])
                except ValueError:
                    continue
                if isinstance(message, dict) and ("result" in message or "error" in message):
                    return message
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def outcome_of(status: int, payload: Any) -> str:
    """The outcome code of one answer."""
    outcome = f"http_{status}"
    if isinstance(payload, dict):
        error, result = payload.get("error"), payload.get("result")
        if isinstance(error, str):  # the transport's own 401 body
            outcome = error
        elif isinstance(error, dict):
            data = error.get("data")
            code = data.get("code") if isinstance(data, dict) else None
            outcome = code if isinstance(code, str) else f"jsonrpc_{error.get('code')}".replace("-", "m")
        elif isinstance(result, dict):
            structured = result.get("structuredContent")
            structured = structured if isinstance(structured, dict) else {}
            if result.get("isError"):
                tool_error = structured.get("error")
                code = tool_error.get("code") if isinstance(tool_error, dict) else None
                outcome = code if isinstance(code, str) else "tool_error"
            else:
                outcome = "ok"
    return outcome if OUTCOME.fullmatch(outcome) else "other"


@dataclass
class CallLog:
    """Collects one tool call's answer as it is sent; `finish()` writes the line and the metrics."""

    tool: str
    era: str
    request_id: str
    principal: str = "anonymous"
    user_id: int | None = None
    started: float = field(default_factory=time.perf_counter)
    status: int = 0
    content_type: str = ""
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    # The lookups the call was charged, as the metering edge noted them (`leroy.charged`): empty when nothing was
    # metered. Not read from the answer: a replay carries the charged call's usage, and an undelivered answer none.
    charged: list[int] = field(default_factory=list)

    def wrap(self, send: Send) -> Send:
        async def logged_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
                for key, value in message.get("headers", []):
                    if key.lower() == b"content-type":
                        self.content_type = value.decode("latin-1")
            elif message["type"] == "http.response.body":
                chunk = message.get("body", b"")
                self.size += len(chunk)
                if self.size <= CAPTURE_LIMIT:
                    self.chunks.append(chunk)
            await send(message)

        return logged_send

    def finish(self) -> None:
        latency = time.perf_counter() - self.started
        payload = _payload(self.content_type, b"".join(self.chunks)) if self.size <= CAPTURE_LIMIT else None
        outcome = outcome_of(self.status, payload)
        lookups = sum(self.charged) if self.charged else None
        if self.status == 0:
            outcome = "disconnected"  # nothing was sent: the client went away or the process is stopping
        metrics.TOOL_CALLS.labels(self.tool, outcome).inc()
        metrics.TOOL_LATENCY.labels(self.tool, outcome).observe(latency)
        line = {
            "event": "mcp_tool_call",
            "tool": self.tool,
            "principal": self.principal,
            "user_id": self.user_id,
            "protocol": self.era,
            "status": self.status,
            "outcome": outcome,
            "lookups_charged": lookups,
            "latency_ms": round(latency * 1000, 1),
            "request_id": self.request_id,
        }
        logger.info(json.dumps(line, separators=(",", ":")))
