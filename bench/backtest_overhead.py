"""Backtest overhead: Leroy's sandboxed path vs a plain in-process Backtrader run of the same strategy and bars.

The baseline, measured in the same run, is the SMA-cross source executed directly with the real `backtrader`
module and its stock pandas feed. Leroy's path is what a worker does per backtest: a fresh sandbox child
(every available layer) forked from the worker's warm sandbox template, the list-backed feed, the analyzers, and
the statistics. The first job in a process also starts the template (imports backtrader once) and pays the
statistics' first imports (empyrical, pandas): it is printed separately as `first_job`; a worker process does both
when it starts, before its first task (`backtests.tasks._warm_sandbox`). Runs are interleaved (direct, sandboxed,
probed per round) so load on a shared machine hits them alike; each figure is the best of its rounds. The look-ahead
probe (the same run plus 3 reruns on cut data, which every backtest gets) is timed separately and printed as its
extra cost over the unprobed run. Prints one line.

    .venv/bin/python bench/backtest_overhead.py [--bars 2516] [--repeats 3]
"""

import argparse
import os
import sys
import time
import types
from pathlib import Path

from cleanup import check_tree, exit_on_signals  # bench/ is the script's directory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leroy.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-" + "x" * 40)

import django

django.setup()

import backtrader as bt  # noqa: E402
import pandas as pd  # noqa: E402
from sma_cross import SMA_CROSS  # noqa: E402  (bench/ is the script's directory)

from backtests import sandbox, statistics  # noqa: E402
from backtests.dryrun import walk  # noqa: E402

SIMULATION = {"initial_cash": 1_000_000.0, "commission": 0.0, "leverage": 1.0, "buy_on_close": False}


def direct(data: dict) -> float:
    module = types.ModuleType("bench_strategy")
    sys.modules[module.__name__] = module
    module.__dict__["bt"] = bt
    exec(SMA_CROSS, module.__dict__)  # noqa: S102 - the bench's own source
    frame = pd.DataFrame(
        {k: data[k] for k in ("open", "high", "low", "close", "volume")}, index=pd.to_datetime(data["ts_us"], unit="us")
    )
    cerebro = bt.Cerebro(stdstats=False)
    cerebro.adddata(bt.feeds.PandasData(dataname=frame))
    cerebro.addstrategy(module.SmaCross)
    cerebro.broker.setcash(SIMULATION["initial_cash"])
    cerebro.run()
    return cerebro.broker.getvalue()


def leroy(data: dict, probe: int = 0) -> tuple[float, list[str]]:
    outcome = sandbox.run_job(source=SMA_CROSS, datas=[data], simulation=SIMULATION, parameters={}, probe=probe)
    assert outcome.ok and outcome.result is not None, outcome.error
    statistics.compute(outcome.result)
    assert not probe or outcome.result["lookahead_check"]["status"] == "passed", outcome.result["lookahead_check"]
    return outcome.result["final_value"], outcome.layers


def leroy_probed(data: dict) -> tuple[float, list[str]]:
    """What a backtest costs with its look-ahead probe (the default: 3 cuts)."""
    return leroy(data, probe=3)


def timed(func, data: dict) -> tuple[float, object]:
    began = time.perf_counter()
    value = func(data)
    return time.perf_counter() - began, value


def main() -> None:
    check_tree()
    exit_on_signals()
    parser = argparse.ArgumentParser()
    parser.add_argument("--bars", type=int, default=2516)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = walk("BENCH", bars=args.bars)
    first_seconds, _ = timed(leroy, data)
    rounds = [[timed(func, data) for func in (direct, leroy, leroy_probed)] for _ in range(args.repeats)]
    direct_seconds, leroy_seconds, probed_seconds = (min(r[i][0] for r in rounds) for i in range(3))
    direct_value, (leroy_value, layers), (probed_value, _) = (rounds[-1][i][1] for i in range(3))
    assert leroy_value == direct_value == probed_value, (leroy_value, direct_value, probed_value)
    print(
        f"backtest_overhead bars={args.bars} direct={direct_seconds:.3f}s leroy_sandboxed={leroy_seconds:.3f}s "
        f"first_job={first_seconds:.3f}s "
        f"ratio={leroy_seconds / direct_seconds:.2f}x probe_extra={probed_seconds - leroy_seconds:.3f}s "
        f"probe_ratio={probed_seconds / leroy_seconds:.2f}x final_value_equal=True layers={','.join(layers)}"
    )


if __name__ == "__main__":
    main()
