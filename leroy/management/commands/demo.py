"""`make demo`: prepare a local Leroy with demo data and serve the web pages, /api/mcp and a Celery worker."""

import json
import os
import secrets
import subprocess
import sys
from datetime import UTC, date, datetime
from io import StringIO
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.db.models import Max, Min
from django.test import override_settings

from accounts import services
from accounts.models import ApiKey, User
from backtests import services as backtests
from backtests.examples import DEMO_STRATEGY_NAME, SMA_CROSS
from evidence.marketdata import demo
from evidence.models import (
    AnswerReceipt,
    BarPartition,
    Corpus,
    EodSnapshot,
    Frame,
    LiveBar,
    LogCheckpoint,
    LogEntry,
    MarketMemoryArtifact,
)
from evidence.publication import selectors as publication_selectors
from evidence.publication import services as publication
from evidence.publication import signing
from evidence.schemas import EvaluateArgs, EvaluationOut
from leroy.clock import anchored, now
from leroy.errors import DomainError
from leroy.management.commands.serve import serve
from leroy.mcp.registry import call_for

DEMO_EMAIL = "demo@leroy.local"
DEMO_KEY_NAME = "demo"


def _recorded_answer_id(path: Path, user: User) -> str | None:
    """The id of the demo answer an earlier run saved at `path`, if its receipt is still in this database."""
    try:
        answer_id = json.loads(path.read_text())["evaluation_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return answer_id if AnswerReceipt.objects.filter(answer_id=answer_id, user=user).exists() else None


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


def demo_optimizations(strategy_id: str, data_id: str, first: date, last: date) -> tuple[dict, dict]:
    """run_optimization and run_walk_forward_optimization arguments for the demo strategy over one daily history."""
    optimization = {
        "strategy_id": strategy_id, "name": "demo sweep", "data_ids": [data_id], "frequency": "1d",
        "start_date": first.isoformat(), "end_date": last.isoformat(),
        "grids": [{"name": "fast", "min": 5, "max": 20, "step": 5}, {"name": "slow", "min": 30, "max": 60, "step": 10}],
        "target_metric": "annualized_sharpe_ratio", "target_direction": "maximize",
    }  # fmt: skip
    periods = {"train_period": {"months": 24}, "test_period": {"months": 12}}
    return optimization, optimization | {"name": "demo walk-forward", **periods}


def served_origin(port: int) -> str:
    return f"http://127.0.0.1:{port}"


class Command(BaseCommand):
    help = "Migrate, load demo data, build Market Memory, then `serve` (uvicorn, a Celery worker, beat) until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-serve", action="store_true", help="prepare everything, then exit")
        parser.add_argument("--no-data", action="store_true", help="skip demo data and Market Memory")

    def run_from_argv(self, argv: list[str]) -> None:
        origin = served_origin(self.create_parser(argv[0], argv[1]).parse_args(argv[2:]).port)
        named: dict[str, str] = {}
        if "LEROY_PUBLIC_ORIGIN" not in os.environ and origin != settings.LEROY_PUBLIC_ORIGIN:
            # Settings derive the log's origin (its key's name, every checkpoint's first line), the CSRF origin and
            # the OAuth issuer from LEROY_PUBLIC_ORIGIN as they load, before a command runs: start again with the
            # served port's, so this process and every one it starts name one origin from the first checkpoint on.
            named["LEROY_PUBLIC_ORIGIN"] = origin
        kept = signing.key_name()
        if "LEROY_LOG_ORIGIN" not in os.environ and kept is not None and (named or kept != settings.LEROY_LOG_ORIGIN):
            # A var dir first served on another port holds a log whose key is named for that port's origin, and a
            # log keeps its origin: it goes on under that name here rather than being signed as a second log.
            named["LEROY_LOG_ORIGIN"] = kept
        if named:
            os.execve(sys.executable, [sys.executable, *argv], {**os.environ, **named})  # noqa: S606
        super().run_from_argv(argv)

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        head = LogCheckpoint.objects.order_by("-tree_size").first()
        if head is not None:
            try:  # a log already signed under another origin cannot be appended to: say so before anything runs
                publication.log_signer(head)
            except (ImproperlyConfigured, DomainError) as refused:
                raise CommandError(str(refused)) from None
        env = dict(os.environ)
        origin = served_origin(options["port"])
        env.setdefault("LEROY_PUBLIC_ORIGIN", origin)  # before the first process that may write the log starts
        # The README's local alert receiver (`python -m alerts.receiver 9000`) may take deliveries over http.
        env.setdefault("LEROY_WEBHOOK_ALLOW_HOSTS", "127.0.0.1:9000")
        if not options["no_data"]:
            env["LEROY_CLOCK"] = self.prepare_evidence()
        if env.get("LEROY_CLOCK"):
            # Anchored now: this process, the feed tick and every served process read one replayed time.
            env["LEROY_CLOCK"] = anchored(env["LEROY_CLOCK"], datetime.now(UTC))
        if not options["no_data"]:
            # One feed tick before serving, on the replay clock, so the first evaluation already has a frame.
            subprocess.run([sys.executable, "manage.py", "feed_frames"], env=env, check=True, cwd=settings.BASE_DIR)
        from backtests.sandbox import startup_notice

        self.stdout.write(startup_notice())
        clock = env.get("LEROY_CLOCK")
        with override_settings(LEROY_CLOCK=clock or settings.LEROY_CLOCK):
            password, key = issue_demo_credentials()
        config = {
            "mcpServers": {
                "leroy": {"type": "http", "url": f"{origin}/api/mcp", "headers": {"Authorization": f"Bearer {key}"}}
            }
        }
        self.stdout.write(f"\nLeroy: {origin}/")
        self.stdout.write(
            f"Publication log origin (its key and checkpoints are named for it): {settings.LEROY_LOG_ORIGIN}"
        )
        host = urlsplit(settings.LEROY_PUBLIC_ORIGIN).netloc
        if f"{host}/log" != settings.LEROY_LOG_ORIGIN:  # kept from the run that started this var dir's log
            self.stdout.write(
                f"  (not the served host's: a log keeps the origin it was started under; for a log named for "
                f"{host}, start from a fresh LEROY_VAR_DIR)"
            )
        self.stdout.write(f"Account page: {origin}/account/  (log in as {DEMO_EMAIL} / {password})")
        self.stdout.write("E-mail (sign-up and password-reset links) is printed on this console.")
        self.stdout.write("MCP client config:\n" + json.dumps(config, indent=2))
        self.stdout.write(f"LEROY_DEMO_API_KEY={key}\n")
        if clock is not None:
            with override_settings(LEROY_CLOCK=clock):
                self.publish_demo_answer(origin=origin)
                self.save_demo_strategy()
        if options["no_serve"]:
            return
        ready = (
            f"Leroy ready: {origin}/ · log in as {DEMO_EMAIL} / {password} · LEROY_DEMO_API_KEY={key} · "
            f"MCP client config: {json.dumps(config)}"
        )

        def announce() -> None:
            self.stdout.write(ready)
            self.stdout.flush()

        # one worker process: no proxy header is trusted
        sys.exit(serve(port=options["port"], env=env, on_ready=announce))

    def prepare_evidence(self) -> str:
        """Load the synthetic universe and build Market Memory once; later runs reuse them. Returns LEROY_CLOCK."""
        clock_file = Path(settings.LEROY_VAR_DIR, "demo_clock")
        ready = clock_file.exists() and MarketMemoryArtifact.objects.filter(is_active=True).exists()
        if not ready:
            self.stdout.write("Loading the synthetic demo universe (source: synthetic) ...")
            loaded = StringIO()
            history_from = demo.DEFAULT_DAILY_HISTORY_FROM.isoformat()
            call_command("load_demo_data", "--daily-history-from", history_from, stdout=loaded)
            clock = loaded.getvalue().strip().splitlines()[-1].removeprefix("LEROY_CLOCK=")
            self.stdout.write("Building Market Memory (progress on stderr) ...")
            call_command("build_market_memory", stdout=StringIO())
            clock_file.write_text(clock)
        clock = clock_file.read_text().strip()
        if not EodSnapshot.objects.exists():
            # The end-of-day layer's first snapshot: the last verified session (the replay's open one is not).
            corpus = Corpus.objects.filter(source="synthetic").first()
            if corpus is not None and corpus.verified_through is not None:
                published = StringIO()
                call_command("eod_run", "--date", corpus.verified_through.isoformat(), stdout=published)
                self.stdout.write(f"End-of-day snapshot published: {published.getvalue().strip()}")
        # The replay clock restarts at the same minute on every run, so the feed restarts with it.
        LiveBar.objects.all().delete()
        Frame.objects.all().delete()
        self.stdout.write(f"Market Memory built; replaying the open session from LEROY_CLOCK={clock}")
        return clock

    def save_demo_strategy(self) -> None:
        """Give the demo account the documentation's SMA cross (after a real dry run) and print a ready optimization
        of it over a demo symbol's daily history, and its walk-forward twin."""
        user = User.objects.get(email=DEMO_EMAIL)
        try:
            strategy = backtests.strategy_seed(user=user, name=DEMO_STRATEGY_NAME, code=SMA_CROSS)
        except backtests.BacktestError as refused:
            self.stdout.write(f"Demo strategy not saved: {refused.message}")
            return
        daily = BarPartition.objects.filter(frequency="1d", symbol__asset_class="equity")
        span = daily.filter(symbol=daily.order_by("symbol__ticker").values("symbol")[:1]).aggregate(
            first=Min("first_ts"), last=Max("last_ts"), symbol=Min("symbol")
        )
        if span["symbol"] is None:
            return
        first, last, symbol_id = span["first"].date(), span["last"].date(), span["symbol"]
        optimization, walk_forward = demo_optimizations(str(strategy.pk), str(symbol_id), first, last)
        self.stdout.write(f"Demo strategy {DEMO_STRATEGY_NAME!r} saved as {strategy.pk}. Try, over MCP:")
        self.stdout.write(f"  run_optimization {json.dumps(optimization)}")
        self.stdout.write(f"  run_walk_forward_optimization {json.dumps(walk_forward)}")

    def publish_demo_answer(self, *, origin: str) -> None:
        """Make sure the publication log names the served artifact, answer one evaluation for the demo account
        (1 lookup) unless an earlier run's answer is still on record, commit its day, and save the answer and its
        proof (against the log as it is now) for leroy-verify to check on this server. The replay clock repeats the
        same month on every run, so a later run must not spend the account's lookups again, nor stop when an agent
        has used them up: then the demo serves without an answer to verify."""
        user = User.objects.get(email=DEMO_EMAIL)
        frame = Frame.objects.filter(ready=True).select_related("symbol").order_by("symbol__ticker").first()
        out = Path(settings.LEROY_VAR_DIR, "demo")
        answer_id = _recorded_answer_id(out / "answer.json", user)
        publication.artifact_published(artifact=MarketMemoryArtifact.objects.get(is_active=True))
        if answer_id is None and frame is not None:
            args = EvaluateArgs(symbol=frame.symbol.ticker, side="buy")
            try:
                answer = call_for(user_id=user.pk, tool="evaluate_current_setup", args=args)
            except DomainError as refusal:
                self.stdout.write(f"No demo answer to verify this time: {refusal.message}")
            else:
                assert isinstance(answer, EvaluationOut)
                out.mkdir(exist_ok=True)
                (out / "answer.json").write_text(answer.model_dump_json(indent=2))
                answer_id = answer.evaluation_id
        if answer_id is not None:
            publication.answers_commit(day=now().date())
            proof = publication_selectors.answer_proof(user=user, answer_id=answer_id)
            (out / "answer_proof.json").write_text(proof.model_dump_json(indent=2))
        kinds = ", ".join(f"{row.index}: {row.kind}" for row in LogEntry.objects.order_by("-index")[:5][::-1])
        self.stdout.write(f"Publication log: {LogEntry.objects.count()} entries (latest {kinds}). Verify it here:")
        command = f".venv/bin/leroy-verify --log {origin} --key '{publication_selectors.verifier_key()}' --entries"
        if answer_id is not None:
            command += f" --answer {out / 'answer.json'} --proof {out / 'answer_proof.json'}"
        self.stdout.write(f"  {command}\n")
