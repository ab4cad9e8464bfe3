"""Issue an API key for an operator; the last stdout line is the key alone."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from accounts import services
from accounts.models import User


class Command(BaseCommand):
    help = "Issue an MCP API key for EMAIL (printed once, on the last line)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("email")
        parser.add_argument("--create-user", action="store_true", help="create the user and activate MCP")
        parser.add_argument("--write", action="store_true", help="add the mcp:write scope")
        parser.add_argument("--name", default="operator key")

    def handle(self, *args: Any, **options: Any) -> None:
        email = options["email"].strip().lower()
        with transaction.atomic():
            user = User.objects.filter(email__iexact=email).first()
            if user is None:
                if not options["create_user"]:
                    raise CommandError(f"No user {email}; pass --create-user to create one.")
                user = services.user_create(email=email, password=None)
                services.mcp_activate(user=user)
            try:
                issued = services.api_key_create(user=user, name=options["name"], write=options["write"])
            except services.AccountError as error:
                raise CommandError(error.message) from None
        self.stderr.write(f"Issued {issued.api_key.scopes} key {issued.api_key.name!r} for {user.email}")
        self.stdout.write(issued.plaintext)
