"""Run the end-of-day layer for one session (default: the latest closed XNYS session) and print its snapshot."""

import json
from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evidence.eod.services import EodError, eod_run, latest_closed_session
from leroy.clock import now


class Command(BaseCommand):
    help = "Compute and publish the end-of-day snapshot of a session (idempotent for identical inputs)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--date", type=date.fromisoformat, default=None, help="session, YYYY-MM-DD")

    def handle(self, *args: Any, **options: Any) -> None:
        session = options["date"] or latest_closed_session(now())
        if session is None:
            raise CommandError("no closed XNYS session")
        try:
            snapshot = eod_run(session=session)
        except EodError as error:
            raise CommandError(f"{error.code}: {error.message} {json.dumps(error.details)}") from error
        summary = {
            "session": snapshot.session.isoformat(),
            "revision": snapshot.revision,
            "publication_id": snapshot.log_index,
            "snapshot_sha256": snapshot.snapshot_sha256,
            "row_count": snapshot.row_count,
            "source": snapshot.components["data"]["source"],
        }
        self.stdout.write(json.dumps(summary, sort_keys=True))
