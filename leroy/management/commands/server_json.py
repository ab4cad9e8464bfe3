"""Print this deployment's server.json for the MCP registry (from settings: LEROY_PUBLIC_ORIGIN names it)."""

import json
from typing import Any

from django.core.management.base import BaseCommand

from leroy.mcp.discovery import server_json


class Command(BaseCommand):
    help = "Print the MCP registry's server.json for this deployment."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(json.dumps(server_json(), indent=2))
