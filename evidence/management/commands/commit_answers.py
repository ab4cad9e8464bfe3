"""Commit answer hashes into the publication log: one `daily_answers_root` entry per day with uncommitted answers."""

from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evidence.publication import services
from leroy.clock import now


class Command(BaseCommand):
    help = "Append the daily answers root of --date (default: every day through today with uncommitted answers)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--date", help="UTC day, YYYY-MM-DD")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["date"]:
            try:
                day = date.fromisoformat(options["date"])
            except ValueError:
                raise CommandError(f"--date must be YYYY-MM-DD, not {options['date']!r}") from None
            entry = services.answers_commit(day=day)
            entries = [entry] if entry is not None else []
        else:
            entries = services.answers_commit_due(through=now().date())
        for entry in entries:
            self.stdout.write(f"log[{entry.index}] {entry.body}")
        if not entries:
            self.stdout.write("nothing to commit")
