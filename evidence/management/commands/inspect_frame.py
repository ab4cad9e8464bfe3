"""Print one feature-store minute of the active artifact as JSON: ready, features, states, regime, labels."""

import json
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evidence.memory.selectors import MemoryUnavailable, frame_inspect
from evidence.vocabulary import normalize_ticker


class Command(BaseCommand):
    help = "Inspect the point-in-time frame of SYMBOL at ISO_TIMESTAMP (bar open; naive means UTC)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("symbol")
        parser.add_argument("timestamp")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            ts = datetime.fromisoformat(options["timestamp"].replace("Z", "+00:00"))
        except ValueError as exc:
            raise CommandError(f"not an ISO timestamp: {options['timestamp']!r}") from exc
        ts = ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)
        try:
            frame = frame_inspect(ticker=normalize_ticker(options["symbol"]), ts=ts)
        except (MemoryUnavailable, LookupError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(frame, sort_keys=True))
