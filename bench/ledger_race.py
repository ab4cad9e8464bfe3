"""Ledger race: concurrent lookup charges around a 100-lookup allowance, and concurrent retries of one key.

Runs on PostgreSQL in a throwaway database (`test_<name>` of DATABASE_URL, created and dropped here). The
baseline, measured in the same run, is one client making the same number of charges on its own account. Prints
one line: the rates (one account raced, the one-client baseline, one account per client), the included/overage
split, the retry outcome and the ledger drift (must be 0); exits 1 when any invariant is broken.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leroy_bench .venv/bin/python bench/ledger_race.py [--clients 16]
"""

import argparse
import os
import sys
from pathlib import Path

from cleanup import check_tree, exit_on_signals, throwaway_database  # bench/ is the script's directory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leroy.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-" + "x" * 40)
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/leroy_bench")

import django

django.setup()

from django.db import connection, transaction  # noqa: E402

from accounts.models import User  # noqa: E402
from billing import selectors, services  # noqa: E402
from billing.models import Plan, Transfer  # noqa: E402
from tests.races import race  # noqa: E402

ALLOWANCE = 100


def charge(user: User, key: str, fingerprint: str = "fp") -> services.LookupCharge:
    with transaction.atomic():
        result = services.lookup_charge(
            user=user, tool="evaluate_current_setup", units=1, request_fingerprint=fingerprint, client_request_id=key
        )
        services.lookup_store_response(charge=result, response={"evaluation_id": f"eval_{result.usage_event_id}"})
        return result


def main() -> int:
    check_tree()
    exit_on_signals()
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--calls", type=int, default=13, help="charges per client")
    options = parser.parse_args()
    if connection.vendor != "postgresql":
        print("ledger_race: needs PostgreSQL (set DATABASE_URL)")
        return 1
    total = options.clients * options.calls

    with throwaway_database():
        plan = Plan.objects.create(code="bench", name="Bench", included_lookups=ALLOWANCE, overage_allowed=True)
        solo, racer = (User.objects.create_user(email=f"{name}@bench.example") for name in ("solo", "racer"))
        for user in (solo, racer):
            services.plan_assign(user=user, plan=plan)

        baseline, baseline_seconds = race(1, total, lambda client, call: charge(solo, f"solo-{call}"))
        results, race_seconds = race(
            options.clients, options.calls, lambda client, call: charge(racer, f"race-{client}-{call}")
        )
        retries, _ = race(options.clients, 1, lambda client, call: charge(racer, "retried-once"))
        # The lock is per account: the same load spread over one account per client runs in parallel (on the same
        # plan; each account's few charges stay within its allowance, so none takes the overage path).
        spread = [User.objects.create_user(email=f"spread{n}@bench.example") for n in range(options.clients)]
        for user in spread:
            services.plan_assign(user=user, plan=plan)
        spread_results, spread_seconds = race(
            options.clients, options.calls, lambda client, call: charge(spread[client], f"spread-{call}")
        )

        usage = selectors.lookup_usage(user=racer)
        charged = sum(isinstance(r, services.LookupCharge) for r in results)
        originals = sum(not r.replayed for r in retries if isinstance(r, services.LookupCharge))
        drift = len(selectors.ledger_drift())
        race_rate, baseline_rate = total / race_seconds, total / baseline_seconds
        # A refusal (a BillingError) or a thread that died would leave a rate timed over fewer charges: every run's
        # results are counted, not only the raced one's.
        counted = [sum(isinstance(r, services.LookupCharge) for r in rs) for rs in (baseline, spread_results)]
        ok = (
            charged == total
            and counted == [total, total]
            and usage["included_lookups"] == ALLOWANCE
            # the raced charges plus the one retried key, split at the allowance
            and usage["lookups_remaining"] == max(0, ALLOWANCE - total - 1)
            and usage["overage_lookups"] == max(0, total + 1 - ALLOWANCE)
            and originals == 1
            and Transfer.objects.filter(usage_event__client_request_id="retried-once").count() == 1
            and drift == 0
        )
        print(
            f"ledger_race: {options.clients} clients x {options.calls} = {total} charges at {race_rate:.0f} charges/s "
            f"(baseline 1 client: {baseline_rate:.0f} charges/s, x{race_rate / baseline_rate:.2f}); "
            f"raced account (its {total} charges and the retried key's 1): included "
            f"{usage['included_lookups'] - usage['lookups_remaining']} overage {usage['overage_lookups']}; "
            f"{options.clients} retries of one key -> {originals} charge; "
            f"{options.clients} accounts in parallel: {total / spread_seconds:.0f} charges/s; "
            f"drift {drift}; {'OK' if ok else 'FAILED'}"
        )
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
