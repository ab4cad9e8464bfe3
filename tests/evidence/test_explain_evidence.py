"""explain_evidence: each served row of an evaluation traced to its tier key, artifact file and row, and recomputed
from the feature store with independent pandas code."""

import json
from io import StringIO
from pathlib import Path

import pandas as pd
import polars as pl
import pytest
from django.core.management import CommandError, call_command

from accounts import services as account_services
from evidence import schemas
from evidence.memory.selectors import memory_reader
from evidence.memory.strategies import STRATEGIES
from leroy.errors import DomainError
from tests.calls import call_tool

pytestmark = pytest.mark.django_db


def pandas_figures(data_dir: Path, explained: dict, through: str) -> dict:
    """The row's figures from the feature-store files it names, filtered by its key, aggregated by hand."""
    key, side, h = explained["key"], explained["side"], explained["horizon_minutes"]
    key = {name: key.get(name) for name in ("mask", "regime", "band")}
    files = explained["recompute"]["feature_store_files"]
    rows = pd.concat([pd.read_parquet(data_dir / name) for name in files], ignore_index=True)
    rows = rows[rows["ready"] & rows[f"lbl_{h}"].notna()]
    rows = rows[pd.to_datetime(rows["session"]) <= pd.Timestamp(through)]
    rows = rows.assign(mask=rows[f"{side}_mask"].astype("int64"))
    if key["mask"] is not None:
        rows = rows[rows["mask"] == key["mask"]]
    if key["regime"] is not None:
        rows = rows[rows["regime"] == key["regime"]]
    if key["band"] is not None:
        rows = rows[rows["mask"].map(lambda m: min(int(m).bit_count(), 4)) == key["band"]]
    r = rows[f"lbl_{h}"].astype("int64") * (1 if side == "buy" else -1)
    losses = int((-r).clip(lower=0).sum())
    return {
        "sample_size": len(r),
        "distinct_sessions": rows["session"].nunique(),
        "distinct_symbols": rows["symbol"].nunique(),
        "average_return_pct": round(int(r.sum()) / len(r) / 1_000_000, 10),
        "win_rate": round(int((r > 0).sum()) / len(r), 6),
        "profit_factor": round(int(r.clip(lower=0).sum()) / losses, 6) if losses else None,
    }


def test_three_served_rows_are_recomputed_from_the_feature_store(fed_world):
    user = account_services.user_create(email="agent@example.com", password=None)
    answer = call_tool(user, "evaluate_current_setup", schemas.EvaluateArgs(symbol="ALFA", side="both"))
    available = [row for row in answer.historical_evidence if row.availability == "available"]
    assert len(available) >= 3

    out = StringIO()
    call_command("explain_evidence", answer.evaluation_id, stdout=out)
    explained = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(e["side"], e["horizon_minutes"]) for e in explained] == [(r.side, r.horizon_minutes) for r in available]
    for row, e in list(zip(available, explained, strict=True))[:3]:
        assert e["served"]["sample_size"] == row.sample_size
        assert e["tier"] == row.match_strength.score
        assert e["served_from"]["artifact_sha256"] == fed_world.sha256
        # The named file and row hold the key's sums ...
        stored = pl.read_parquet(fed_world.data_dir / f"market_memory/{fed_world.sha256}" / e["served_from"]["file"])
        held = stored.row(e["served_from"]["row"], named=True)
        counts = (row.sample_size, row.distinct_sessions)
        assert (held["tier"], held["n"], held["n_sessions"]) == (e["tier"], *counts)
        assert held["asset_class"] == e["key"]["asset_class"] == "equity"
        if "mask" in e["key"]:
            assert held["mask"] == e["key"]["mask"] < 1 << len(STRATEGIES)
        # ... and the feature store, filtered by the key, gives the stored sums exactly and every served figure again.
        figures = pandas_figures(fed_world.data_dir, e, memory_reader().manifest["plan"]["historical_through"])
        assert figures == {
            "sample_size": held["n"],
            "distinct_sessions": held["n_sessions"],
            "distinct_symbols": held["n_symbols"],
            "average_return_pct": round(held["sum_r"] / held["n"] / 1_000_000, 10),
            "win_rate": round(held["n_win"] / held["n"], 6),
            "profit_factor": round(held["sum_pos"] / held["sum_neg"], 6) if held["sum_neg"] else None,
        }
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}  # the answer's rounding
        assert shown == e["served"]
        assert f"lbl_{row.horizon_minutes}" in e["recompute"]["sql"]

    # The same through get_data_lineage, for the owner only.
    lineage = call_tool(user, "get_data_lineage", schemas.LineageArgs(evaluation_id=answer.evaluation_id))
    assert [r.model_dump(mode="json") for r in lineage.evaluation_rows] == explained
    other = account_services.user_create(email="other@example.com", password=None)
    with pytest.raises(DomainError) as refused:
        call_tool(other, "get_data_lineage", schemas.LineageArgs(evaluation_id=answer.evaluation_id))
    assert refused.value.code == "unknown_evaluation"


def test_an_unknown_evaluation_is_refused(world):
    with pytest.raises(CommandError, match="no evaluation eval_nope"):
        call_command("explain_evidence", "eval_nope")
