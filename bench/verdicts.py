"""The verdict's extra cost next to the optimization it judges: a 20-point grid (SMA fast x slow) over a daily
random walk, run in-process (Celery eager: every point's sandboxed backtest, the look-ahead probe, the close).

The verdict's work is timed where it happens, by wrapping the functions that do it: the trial row each point
writes (`trial_record`), each point's CSCV block sums (`verdicts.return_blocks`), the grid's CSCV with S = 16
(`optimization_pbo`) and the close's verdict (`optimization_verdict`: trial tally, deflated Sharpe, and the CSCV
when it was not computed before). Prints one line: the optimization's own time (its wall time less all that work),
the verdict's time and their ratio (target <= 0.25). The grid's CSCV runs beside the probe's sandbox job, so the
wall time holds less of it than is counted here: the ratio errs high, never low.

    .venv/bin/python bench/verdicts.py [--bars 2516]
"""

import argparse
import os
import sys
import threading
import time
from pathlib import Path

from cleanup import check_tree, exit_on_signals, scratch_directory  # bench/ is the script's directory

ROOT = Path(__file__).resolve().parents[1]
exit_on_signals()
VAR = scratch_directory("leroy-bench-verdicts-")
for name in [k for k in os.environ if k.startswith("LEROY_") or k in ("DATABASE_URL", "REDIS_URL")]:
    del os.environ[name]
os.environ.update(
    DJANGO_SETTINGS_MODULE="leroy.settings",
    LEROY_VAR_DIR=VAR,
    SECRET_KEY="bench-only-secret-key-" + "x" * 40,
    CELERY_TASK_ALWAYS_EAGER="1",
)
sys.path.insert(0, str(ROOT))

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from sma_cross import SMA_CROSS  # noqa: E402  (bench/ is the script's directory)

GRIDS = [{"name": "fast", "min": 5, "max": 25, "step": 5}, {"name": "slow", "min": 30, "max": 60, "step": 10}]


def main() -> None:
    check_tree()
    import polars as pl
    from django.utils.dateparse import parse_datetime

    from accounts.services import user_create
    from backtests import services
    from backtests.dryrun import walk
    from backtests.models import DryRunPass, Status
    from evidence.marketdata.importers import bars_import
    from evidence.models import Symbol
    from leroy.clock import now

    parser = argparse.ArgumentParser()
    parser.add_argument("--bars", type=int, default=2516)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    user = user_create(email="bench@example.com", password="bench password 123")  # noqa: S106 - a throwaway account
    data = walk("BENCHUSD", bars=args.bars)
    frame = pl.DataFrame(
        {
            "ts": pl.Series(data["ts_us"], dtype=pl.Int64).cast(pl.Datetime("us", "UTC")),
            **{k: data[k] for k in ("open", "high", "low", "close", "volume")},
        }
    )
    bars_import(ticker="BENCHUSD", frequency="1d", frame=frame, asset_class="crypto")
    # The bench times optimizations, not dry runs: record the pass a dry run of this exact code would leave.
    DryRunPass.objects.create(user=user, code_sha256=services.code_sha256(SMA_CROSS), created_at=now())
    strategy = services.strategy_create(user=user, name="bench", code=SMA_CROSS)

    spent = {"trial_record": 0.0, "return_blocks": 0.0, "optimization_pbo": 0.0, "optimization_verdict": 0.0}
    calls = dict.fromkeys(spent, 0)  # printed: a function that moved would show as never called

    outermost = threading.local()  # a timed function called by another (the close's CSCV) is counted once

    def timed(module: object, name: str) -> None:
        inner = getattr(module, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            if getattr(outermost, "name", None) is not None:
                return inner(*args, **kwargs)
            outermost.name, began = name, time.perf_counter()
            calls[name] += 1
            try:
                return inner(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - began
                outermost.name = None

        setattr(module, name, wrapper)

    timed(services, "trial_record")
    timed(services.verdicts, "return_blocks")
    timed(services, "optimization_pbo")
    timed(services, "optimization_verdict")
    began = time.perf_counter()
    optimization = services.optimization_submit(
        user=user, strategy_id=str(strategy.pk), name="verdict bench",
        data_ids=[str(Symbol.objects.get(ticker="BENCHUSD").pk)], frequency="1d",
        start=parse_datetime("2000-01-01T00:00:00Z"), end=parse_datetime("2100-01-01T00:00:00Z"), grids=GRIDS,
        parameters={}, simulation_parameters={"initial_cash": 1_000_000, "buy_on_close": False,
                                              "commission_schema": {"commission": 0, "leverage": 1}},
        target_metric="realized_pnl", target_direction="maximize", additional_metrics=[],
        use_free_optimization=True,
    )  # fmt: skip
    total = time.perf_counter() - began
    optimization.refresh_from_db()
    assert optimization.status == Status.COMPLETED and optimization.completed_iterations == 20, optimization.error
    pbo = optimization.verdict["pbo"]
    assert pbo is not None, optimization.verdict
    extra = sum(spent.values())
    own = total - extra
    print(
        f"verdicts points=20 bars={args.bars} blocks={pbo['blocks']} combinations={pbo['combinations']} "
        f"optimization={own:.2f}s verdict={extra:.3f}s ("
        + ", ".join(f"{name} x{calls[name]} {spent[name]:.3f}s" for name in spent)
        + f") ratio={extra / own:.3f} target<=0.25"
    )


if __name__ == "__main__":
    main()
