"""Write one UTC month's ledger entries (or usage summary) to a CSV file with a checksum manifest beside it."""

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing import exports


class Command(BaseCommand):
    help = (
        "Export a month's ledger entries or usage summary: FILE.csv plus FILE.csv.manifest.json (rows, totals, sha256)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--month", required=True, help="UTC month, YYYY-MM")
        parser.add_argument("--out", required=True, type=Path, help="CSV file to write")
        parser.add_argument("--kind", choices=exports.KINDS, default="ledger_entries", help="which finance CSV")

    def handle(self, *args: Any, month: str, out: Path, kind: str, **options: Any) -> None:
        try:
            batch, body = exports.finance_export(month=month, kind=kind)
        except ValueError as error:
            raise CommandError(str(error)) from error
        out.write_bytes(body)
        manifest = out.with_name(out.name + ".manifest.json")
        manifest.write_text(json.dumps(exports.manifest_of(batch, out.name), indent=2) + "\n")
        self.stdout.write(f"{out}: {batch.row_count} {kind} rows, sha256 {batch.sha256}; manifest {manifest}")
