"""Where each served row of an evaluation comes from: its tier key, the artifact file and row holding it, and the query
that recomputes it from the feature store, so a caller can check every number without trusting the server."""

import polars as pl

from accounts.models import User
from billing.models import UsageEvent
from evidence.memory.artifact import BAND_MAX, TIER_KEYS, BuildPlan, feature_store_path
from evidence.memory.reader import MemoryReader, artifact_dir
from evidence.memory.strategies import names_mask
from evidence.models import MarketMemoryArtifact
from evidence.research.analysis import ResearchError
from evidence.schemas import ExplainedRow, RecomputeQuery, ServedFrom

FIGURES = ("sample_size", "distinct_sessions", "distinct_symbols", "average_return_pct", "win_rate", "profit_factor")


def _sql(files: list[str], side: str, horizon: int, where: list[str], through: str) -> str:
    """DuckDB-flavoured SQL over the feature-store Parquet files (paths relative to the data directory)."""
    sign = "" if side == "buy" else "-"
    listed = ", ".join(f"'{name}'" for name in files)
    # Text handed to the caller, never executed here; every value in it comes from the artifact, not the request.
    return (
        f"WITH r AS (SELECT symbol, session, {sign}lbl_{horizon} AS r FROM read_parquet([{listed}]) "  # noqa: S608
        f"WHERE ready AND lbl_{horizon} IS NOT NULL AND session <= DATE '{through}' AND {' AND '.join(where)}) "
        "SELECT count(*) AS sample_size, count(DISTINCT session) AS distinct_sessions, "
        "count(DISTINCT symbol) AS distinct_symbols, round(sum(r) / count(*) / 1e6, 10) AS average_return_pct, "
        "round(count(*) FILTER (WHERE r > 0) / count(*), 6) AS win_rate, "
        "round(sum(greatest(r, 0)) / nullif(sum(greatest(-r, 0)), 0), 6) AS profit_factor FROM r"
    )


def evaluation_explain(*, evaluation_id: str, user: User | None) -> list[ExplainedRow]:
    """The served rows of one stored evaluation (the caller's own when `user` is given; any for an operator)."""
    events = UsageEvent.objects.filter(tool="evaluate_current_setup", response__evaluation_id=evaluation_id)
    if user is not None:
        events = events.filter(user=user)
    answer = events.values_list("response", flat=True).first()
    if not answer:
        raise ResearchError("unknown_evaluation", f"no evaluation {evaluation_id} in this account")
    if answer["market_memory"] is None or answer["active_confluence"] is None:
        return []
    sha = answer["market_memory"]["lineage"]["artifact_sha256"]
    artifact = MarketMemoryArtifact.objects.get(sha256=sha)
    root = artifact_dir(artifact.path, sha)
    reader = MemoryReader(root, sha)  # verified again: an artifact that rotted since explains nothing
    plan = BuildPlan(**reader.manifest["plan"])
    symbol, regime = answer["request"]["symbol"], answer["active_confluence"]["regime"]["id"]
    masks = {s["side"]: names_mask(s["active_signals"]) for s in answer["active_confluence"]["sides"]}
    pool = reader.pool(symbol)
    out = []
    for row in answer["historical_evidence"]:
        if row["availability"] != "available":
            continue
        side, horizon, tier = row["side"], row["horizon_minutes"], row["match_strength"]["score"]
        mask = masks[side]
        values = {"asset_class": pool, "symbol": symbol, "mask": mask, "regime": regime,
                  "band": min(mask.bit_count(), BAND_MAX)}  # fmt: skip
        key = {name: values[name] for name in TIER_KEYS[tier]}
        name = f"tier{tier}.parquet"
        stored = pl.read_parquet(root / name).with_row_index("row")
        match = stored.filter(pl.col("period") == 0, pl.col("side") == ("buy", "sell").index(side),
                              pl.col("horizon") == horizon, *[pl.col(k) == v for k, v in key.items()])  # fmt: skip
        where = [f"{side}_mask = {mask}" if k == "mask" else f"{k} = {v}" for k, v in key.items() if k != "symbol"]
        where = [w.replace("band = ", f"least(bit_count({side}_mask), {BAND_MAX}) = ") for w in where]
        where = [w for w in where if not w.startswith("asset_class")]  # the pool is the file list
        tickers = [symbol] if "symbol" in key else [t for t in plan.tickers if plan.asset_classes[t] == pool]
        files = [feature_store_path(t, plan) for t in tickers]
        out.append(
            ExplainedRow(
                side=side,
                horizon_minutes=horizon,
                served={k: row[k] for k in FIGURES},
                tier=tier,
                key=key,
                served_from=ServedFrom(
                    artifact_sha256=sha,
                    file=name,
                    file_sha256=reader.manifest["files"][name]["sha256"],
                    row=int(match.get_column("row")[0]),
                ),
                recompute=RecomputeQuery(
                    feature_store_files=files,
                    sql=_sql(files, side, horizon, where or ["true"], plan.historical_through),
                ),
            )
        )
    return out
