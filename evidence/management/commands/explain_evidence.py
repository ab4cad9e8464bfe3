"""Print where each served row of one evaluation comes from: tier key, artifact file and row, recomputing query."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evidence.memory.reader import ArtifactRefused
from evidence.research.analysis import ResearchError
from evidence.research.explain import evaluation_explain


class Command(BaseCommand):
    help = "Explain EVALUATION_ID (any account): one JSON line per served row."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("evaluation_id")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            rows = evaluation_explain(evaluation_id=options["evaluation_id"], user=None)
        except (ResearchError, ArtifactRefused) as exc:
            raise CommandError(str(exc)) from exc
        for row in rows:
            self.stdout.write(json.dumps(row.model_dump(mode="json"), sort_keys=True))
