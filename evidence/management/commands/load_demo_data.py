"""Generate the synthetic demo universe; the last line names a replay minute inside the open overlay session."""

import json
from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evidence.marketdata import demo
from evidence.marketdata.importers import ImportRejected, demo_data_load


class Command(BaseCommand):
    help = "Load deterministic synthetic minute and daily bars (source: synthetic) and the demo corpus."
    # The system checks import the URLconf and mount every MCP tool (about 1.1 s) for a command that uses neither.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--symbols", type=int, default=demo.DEFAULT_SYMBOLS)
        parser.add_argument("--sessions", type=int, default=demo.DEFAULT_SESSIONS)
        parser.add_argument("--seed", type=int, default=demo.DEFAULT_SEED)
        parser.add_argument("--start", type=date.fromisoformat, default=demo.DEFAULT_START)
        parser.add_argument("--overlay-sessions", type=int, default=demo.DEFAULT_OVERLAY_SESSIONS)
        parser.add_argument(
            "--daily-history-from",
            type=date.fromisoformat,
            default=None,
            help="also load synthetic daily bars from this date up to the minute history (end-of-day layer)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = demo_data_load(
                symbols=options["symbols"],
                sessions=options["sessions"],
                seed=options["seed"],
                start=options["start"],
                overlay_sessions=options["overlay_sessions"],
                daily_history_from=options["daily_history_from"],
            )
        except (ImportRejected, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        summary = {
            "source": "synthetic",
            "tickers": report.tickers,
            "sessions": report.sessions,
            "first_session": report.first_session.isoformat(),
            "last_session": report.last_session.isoformat(),
            "historical_through": report.historical_through.isoformat(),
            "minute_rows": report.minute_rows,
        }
        self.stdout.write(json.dumps(summary, sort_keys=True))
        self.stdout.write(f"LEROY_CLOCK=replay:{report.replay_minute.strftime('%Y-%m-%dT%H:%MZ')}")
