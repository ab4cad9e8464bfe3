"""`make demo`: prepare a local Leroy with demo data and serve the web pages, /api/mcp and a Celery worker."""

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from accounts import services
from accounts.models import ApiKey, User
from evidence.models import Frame, LiveBar, MarketMemoryArtifact
from leroy.clock import now

DEMO_EMAIL = "demo@leroy.local"
DEMO_KEY_NAME = "demo"


def issue_demo_credentials() -> tuple[str, str]:
    """(password, API key) for the demo user; earlier demo keys are revoked so the printed key is the live one."""
    password = secrets.token_urlsafe(12)
    with transaction.atomic():
        user = User.objects.filter(email=DEMO_EMAIL).first()
        if user is None:
            user = services.user_create(email=DEMO_EMAIL, password=password)
        else:
            user.set_password(password)
            user.save(update_fields=["password"])
        services.mcp_activate(user=user)
        ApiKey.objects.filter(user=user, name=DEMO_KEY_NAME, revoked_at__isnull=True).update(revoked_at=now())
        issued = services.api_key_create(user=user, name=DEMO_KEY_NAME, write=True)
    return password, issued.plaintext


class Command(BaseCommand):
    help = "Migrate, load demo data, build Market Memory, then serve uvicorn and a Celery worker until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-serve", action="store_true", help="prepare everything, then exit")
        parser.add_argument("--no-data", action="store_true", help="skip demo data and Market Memory")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        env = dict(os.environ)
        if not options["no_data"]:
            env["LEROY_CLOCK"] = self.prepare_evidence()
            # One feed tick before serving, on the replay clock, so the first evaluation already has a frame.
            subprocess.run([sys.executable, "manage.py", "feed_frames"], env=env, check=True, cwd=settings.BASE_DIR)
        from backtests.sandbox import startup_notice

        self.stdout.write(startup_notice())
        password, key = issue_demo_credentials()
        origin = f"http://127.0.0.1:{options['port']}"
        config = {
            "mcpServers": {
                "leroy": {"type": "http", "url": f"{origin}/api/mcp", "headers": {"Authorization": f"Bearer {key}"}}
            }
        }
        self.stdout.write(f"\nAccount page: {origin}/account/  (log in as {DEMO_EMAIL} / {password})")
        self.stdout.write("MCP client config:\n" + json.dumps(config, indent=2))
        self.stdout.write(f"LEROY_DEMO_API_KEY={key}\n")
        if options["no_serve"]:
            return
        env.setdefault("LEROY_PUBLIC_ORIGIN", origin)
        sys.exit(serve(port=options["port"], env=env))

    def prepare_evidence(self) -> str:
        """Load the synthetic universe and build Market Memory once; later runs reuse them. Returns LEROY_CLOCK."""
        clock_file = Path(settings.LEROY_VAR_DIR, "demo_clock")
        ready = clock_file.exists() and MarketMemoryArtifact.objects.filter(is_active=True).exists()
        if not ready:
            self.stdout.write("Loading the synthetic demo universe (source: synthetic) ...")
            loaded = StringIO()
            call_command("load_demo_data", stdout=loaded)
            clock = loaded.getvalue().strip().splitlines()[-1].removeprefix("LEROY_CLOCK=")
            self.stdout.write("Building Market Memory (progress on stderr) ...")
            call_command("build_market_memory", stdout=StringIO())
            clock_file.write_text(clock)
        clock = clock_file.read_text().strip()
        # The replay clock restarts at the same minute on every run, so the feed restarts with it.
        LiveBar.objects.all().delete()
        Frame.objects.all().delete()
        self.stdout.write(f"Market Memory ready; replaying the open session from LEROY_CLOCK={clock}")
        return clock


def serve(*, port: int, env: dict[str, str]) -> int:
    """Run uvicorn and a Celery worker side by side; stop both when either stops or on Ctrl-C/SIGTERM."""
    bin_dir = Path(sys.executable).parent
    Path(settings.LEROY_VAR_DIR, "celery").mkdir(parents=True, exist_ok=True)
    commands = [
        [
            str(bin_dir / "uvicorn"),
            "leroy.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--lifespan",
            "on",
        ],
        # -B embeds the beat scheduler that ticks the frame feed; production runs `celery beat` once, separately.
        [
            str(bin_dir / "celery"),
            "-A",
            "leroy",
            "worker",
            "-B",
            "--loglevel",
            "INFO",
            "--concurrency",
            "2",
            "--queues",
            "celery,dryruns",
            "--schedule",
            str(Path(settings.LEROY_VAR_DIR, "celery", "beat-schedule")),
        ],
    ]
    children = [subprocess.Popen(command, env=env, start_new_session=True) for command in commands]
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while not stopping and all(child.poll() is None for child in children):
        time.sleep(0.2)
    for child in children:
        if child.poll() is None:
            child.terminate()  # uvicorn and celery shut their own workers down gracefully
    deadline = time.monotonic() + 15
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return 0 if stopping else 1
