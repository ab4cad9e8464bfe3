"""The read model: one verified, read-only view of an artifact's serving file, shared by every request in a process.

A reader is immutable once opened; activation swaps which reader new requests get (selectors.memory_reader), so a
request that already holds one keeps reading one consistent artifact.
"""

import hashlib
import json
import shutil
import sqlite3
import tempfile
import threading
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from django.conf import settings

from evidence.marketdata import calendar, store
from evidence.memory.artifact import (
    BAND_MAX,
    BPS,
    EXCURSION_LEVELS_BPS,
    EXECUTION_BUCKET_MINUTES,
    REGIME_TABLE,
    SCHEMA_VERSION,
    SYMBOL_BASELINE,
)
from evidence.vocabulary import DEFAULT_ASSET_CLASS, HORIZONS, SIDES, TIER_NAMES, Source

PCT = 1_000_000  # label units (1e-8) per percent
TABLE_NAMES = {**TIER_NAMES, SYMBOL_BASELINE: "symbol_baseline", REGIME_TABLE: "regime_bucket"}


class ArtifactRefused(Exception):
    """The artifact on disk does not match its recorded hashes; it is never served."""


@dataclass(frozen=True)
class Evidence:
    """Displayed statistics of one key, derived from its integer sums (returns are side-oriented)."""

    tier: int
    tier_name: str
    side: str
    horizon_minutes: int
    row_count: int
    distinct_sessions: int  # distinct market dates, exact across the symbols a tier pools
    distinct_symbols: int
    average_return_pct: float
    median_return_pct: float | None
    win_rate: float
    profit_factor: float | None
    lift_vs_baseline_bps: float | None
    mean_favourable_excursion_pct: float
    mean_adverse_excursion_pct: float
    favourable_reached: dict[str, float]  # excursion level in bps -> share of rows that reached it
    adverse_reached: dict[str, float]


@dataclass(frozen=True)
class Resolution:
    """How one side and horizon was resolved: the match (tier >= 2 or None), the stronger tiers passed over (tier,
    stats or None when the key was never observed or pruned below the minimum), the direction-only baseline, and
    the asset class the cross-ticker tiers pooled."""

    match: Evidence | None
    unusable: tuple[tuple[int, Evidence | None], ...]
    baseline: Evidence | None
    asset_class: str


def _derive(row: dict[str, Any], *, side: str, baseline: dict[str, Any] | None, min_sessions: int) -> Evidence:
    n = row["n"]
    lift = None
    if baseline is not None and baseline["n_sessions"] >= min_sessions and row["tier"] != 1:
        lift = round((row["sum_r"] / n - baseline["sum_r"] / baseline["n"]) / BPS, 4)
    return Evidence(
        tier=row["tier"],
        tier_name=TABLE_NAMES[row["tier"]],
        side=side,
        horizon_minutes=row["horizon"],
        row_count=n,
        distinct_sessions=row["n_sessions"],
        distinct_symbols=row["n_symbols"],
        average_return_pct=round(row["sum_r"] / n / PCT, 10),
        median_return_pct=None if row["median_r"] is None else round(row["median_r"] / PCT, 10),
        win_rate=round(row["n_win"] / n, 6),
        profit_factor=round(row["sum_pos"] / row["sum_neg"], 6) if row["sum_neg"] else None,
        lift_vs_baseline_bps=lift,
        mean_favourable_excursion_pct=round(row["sum_fav"] / n / PCT, 10),
        mean_adverse_excursion_pct=round(row["sum_adv"] / n / PCT, 10),
        favourable_reached={str(lv): round(row[f"n_fav_{lv}"] / n, 6) for lv in EXCURSION_LEVELS_BPS},
        adverse_reached={str(lv): round(row[f"n_adv_{lv}"] / n, 6) for lv in EXCURSION_LEVELS_BPS},
    )


def verified_manifest(root: Path, sha256: str) -> dict[str, Any]:
    """The manifest of a local artifact directory, after checking it hashes to `sha256` and every file it lists
    hashes to its entry; raises ArtifactRefused otherwise."""
    body = (root / "manifest.json").read_bytes()
    if hashlib.sha256(body).hexdigest() != sha256:
        raise ArtifactRefused(f"manifest of {root.name} does not hash to {sha256}")
    manifest: dict[str, Any] = json.loads(body)
    for name, entry in manifest["files"].items():
        if store.file_sha256(root / name) != entry["sha256"]:
            raise ArtifactRefused(f"{name} in {root.name} does not match its manifest hash")
    return manifest


def artifact_dir(relative: str, sha256: str) -> Path:
    """A local directory holding the artifact (SQLite opens only local files): the stored directory itself when the
    data directory is local, else a cache under LEROY_VAR_DIR copied from the store once and kept only if verified."""
    root = store.local_root()
    if root is not None:
        return root / relative
    cache = Path(settings.LEROY_VAR_DIR) / "cache" / "market_memory" / sha256
    if cache.exists():
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    fetched = Path(tempfile.mkdtemp(dir=cache.parent, prefix=".fetch-"))
    try:
        store.fetch_file(f"{relative}/manifest.json", fetched / "manifest.json")
        body = (fetched / "manifest.json").read_bytes()
        if hashlib.sha256(body).hexdigest() != sha256:
            raise ArtifactRefused(f"manifest of {relative} does not hash to {sha256}")
        for name in json.loads(body)["files"]:
            store.fetch_file(f"{relative}/{name}", fetched / name)
        verified_manifest(fetched, sha256)
        try:
            fetched.rename(cache)
        except OSError:
            if not cache.exists():  # else another process filled the cache first; its copy was verified too
                raise
    finally:
        shutil.rmtree(fetched, ignore_errors=True)
    return cache


class MemoryReader:
    def __init__(self, root: Path, sha256: str) -> None:
        manifest = verified_manifest(root, sha256)
        if manifest["schema_version"] != SCHEMA_VERSION:  # v1 counted pairs as sessions, v2 float noise
            raise ArtifactRefused(
                f"{root.name} has artifact schema {manifest['schema_version']}, this reader serves {SCHEMA_VERSION}: "
                "rebuild Market Memory"
            )
        self.root = root
        self.sha256 = sha256
        self.manifest: dict[str, Any] = manifest
        self.version: str = manifest["version"]
        self.source: Source = manifest["source"]  # as the build recorded it (evidence.memory.build.build_plan)
        self.min_sessions: int = manifest["min_sessions"]
        self.asset_classes: dict[str, str] = manifest["plan"]["asset_classes"]
        self._uri = f"file:{root / 'serve.sqlite3'}?mode=ro&immutable=1"
        self._local = threading.local()

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            self._local.db = db
        return db

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        cursor = self._db().execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def pool(self, symbol: str = "", asset_class: str = DEFAULT_ASSET_CLASS) -> str:
        """The asset class a key pools: the symbol's own when one is named, else `asset_class`."""
        return self.asset_classes.get(symbol, "") if symbol else asset_class

    def _fetch(self, keys: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        # A VALUES CTE cross-joined on the primary key: one index search per key (a row-value IN would scan).
        values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(keys))
        columns = "period, tier, side, horizon, asset_class, symbol, mask, regime, band"
        sql = (
            f"WITH k({columns}) AS (VALUES {values}) "  # noqa: S608
            f"SELECT s.* FROM k CROSS JOIN stats AS s USING ({columns})"
        )
        cursor = self._db().execute(sql, [v for key in keys for v in key])
        rows = cursor.fetchall()
        if not rows:
            return {}
        names = [d[0] for d in cursor.description]
        # The key columns come first in the table, so a row's first nine values are its key.
        return {tuple(row[:9]): dict(zip(names, row, strict=True)) for row in rows}

    def resolve_keys(
        self, *, symbol: str, side: str, mask: int, regime: int, horizons: tuple[int, ...] = HORIZONS, period: int = 0
    ) -> list[tuple[Any, ...]]:
        """The keys `resolve` reads for a setup: per horizon, tiers 5 to 1, then the symbol's own baseline."""
        s = SIDES.index(side)
        band = min(mask.bit_count(), BAND_MAX)
        pool = self.pool(symbol)  # pooled tiers pool only the symbol's asset class
        keys = []
        for h in horizons:
            keys += [
                (period, 5, s, h, pool, symbol, mask, regime, -1),
                (period, 4, s, h, pool, "", mask, regime, -1),
                (period, 3, s, h, pool, "", mask, -1, -1),
                (period, 2, s, h, pool, "", -1, regime, band),
                (period, 1, s, h, pool, "", -1, -1, -1),
                (period, SYMBOL_BASELINE, s, h, pool, symbol, -1, -1, -1),
            ]
        return keys

    def resolve(
        self,
        *,
        symbol: str,
        side: str,
        mask: int,
        regime: int,
        horizons: tuple[int, ...] = HORIZONS,
        period: int = 0,
        context: bool = True,
    ) -> dict[int, Resolution]:
        """Per horizon, the strongest tier >= 2 whose key has at least the minimum distinct sessions (never pooled),
        the stronger tiers that were not usable (with their counts where stored), and the direction-only baseline
        (tier 1), which is the lift reference and never the match; `context=False` skips the last two."""
        s, pool = SIDES.index(side), self.pool(symbol)
        keys = self.resolve_keys(symbol=symbol, side=side, mask=mask, regime=regime, horizons=horizons, period=period)
        found = self._fetch(keys)
        out: dict[int, Resolution] = {}
        for h in horizons:
            universe = found.get((period, 1, s, h, pool, "", -1, -1, -1))
            own = found.get((period, SYMBOL_BASELINE, s, h, pool, symbol, -1, -1, -1))
            match, unusable = None, []
            for key in keys:
                if key[3] != h or key[1] in (1, SYMBOL_BASELINE):
                    continue
                row = found.get(key)
                if row is not None and row["n_sessions"] >= self.min_sessions:
                    baseline = own if row["tier"] == 5 else universe
                    match = _derive(row, side=side, baseline=baseline, min_sessions=self.min_sessions)
                    break
                if context:
                    stats = None if row is None else _derive(row, side=side, baseline=None, min_sessions=0)
                    unusable.append((key[1], stats))
            usable_baseline = context and universe is not None and universe["n_sessions"] >= self.min_sessions
            out[h] = Resolution(
                match=match,
                unusable=tuple(unusable),
                baseline=_derive(universe, side=side, baseline=None, min_sessions=0) if usable_baseline else None,  # type: ignore[arg-type]
                asset_class=pool,
            )
        return out

    def lookup(
        self,
        *,
        symbol: str,
        side: str,
        mask: int,
        regime: int,
        horizons: tuple[int, ...] = HORIZONS,
        period: int = 0,
    ) -> dict[int, Evidence | None]:
        """Per horizon, the matched evidence of `resolve` (tier >= 2), or None: the baseline is never a match."""
        resolved = self.resolve(
            symbol=symbol, side=side, mask=mask, regime=regime, horizons=horizons, period=period, context=False
        )
        return {h: r.match for h, r in resolved.items()}

    def key_evidence(
        self, *, tier: int, side: str, horizon: int, symbol: str = "", mask: int = -1, regime: int = -1,
        band: int = -1, period: int = 0, asset_class: str = DEFAULT_ASSET_CLASS,
    ) -> Evidence | None:  # fmt: skip
        """The statistics of one stored key as served (no minimum applied here: callers decide what may be shown)."""
        key = (period, tier, SIDES.index(side), horizon, self.pool(symbol, asset_class), symbol, mask, regime, band)
        row = self._fetch([key]).get(key)
        return None if row is None else _derive(row, side=side, baseline=None, min_sessions=self.min_sessions)

    def search(
        self, *, side: str, horizon: int, tiers: tuple[int, ...], min_sessions: int, required_mask: int = 0,
        symbol: str | None = None, limit: int = 20, period: int = 0, asset_class: str = DEFAULT_ASSET_CLASS,
    ) -> list[tuple[dict[str, Any], Evidence]]:  # fmt: skip
        """Served keys of `tiers` for a side and horizon in one asset class (the symbol's, when one is named) with at
        least `min_sessions` (never below the artifact's minimum) whose active set contains `required_mask`; most
        distinct sessions first. Returns (key, stats)."""
        floor = max(min_sessions, self.min_sessions)
        marks = ", ".join("?" * len(tiers))
        sql = (
            f"SELECT * FROM stats WHERE period=? AND side=? AND horizon=? AND tier IN ({marks}) "  # noqa: S608
            "AND asset_class=? AND n_sessions>=? AND (? = 0 OR (mask >= 0 AND (mask & ?) = ?))"
        )
        params: list[Any] = [period, SIDES.index(side), horizon, *tiers, self.pool(symbol or "", asset_class), floor,
                             required_mask, required_mask, required_mask]  # fmt: skip
        if symbol is not None:
            sql += " AND symbol=?"
            params.append(symbol)
        sql += " ORDER BY n_sessions DESC, n DESC, tier DESC, symbol, mask, regime, band LIMIT ?"
        rows = self._rows(sql, (*params, limit))
        keys = ("tier", "asset_class", "symbol", "mask", "regime", "band")
        return [
            ({k: row[k] for k in keys}, _derive(row, side=side, baseline=None, min_sessions=self.min_sessions))
            for row in rows
        ]

    def examples(
        self, *, tier: int, side: str, symbol: str = "", mask: int = -1, regime: int = -1, band: int = -1,
        period: int = 0, asset_class: str = DEFAULT_ASSET_CLASS,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """The reservoir rows stored for a served key (a fixed pseudo-random sample, at most RESERVOIR_SIZE)."""
        return self._rows(
            "SELECT * FROM reservoir WHERE period=? AND tier=? AND side=? AND asset_class=? AND symbol=? AND mask=? "
            "AND regime=? AND band=? ORDER BY rank",
            (period, tier, SIDES.index(side), self.pool(symbol, asset_class), symbol, mask, regime, band),
        )

    def regime_table(
        self, *, side: str, horizon: int, period: int = 0, asset_class: str = DEFAULT_ASSET_CLASS
    ) -> list[dict[str, Any]]:
        rows = self._rows(
            "SELECT * FROM stats WHERE period=? AND tier=? AND side=? AND horizon=? AND asset_class=? ORDER BY regime",
            (period, REGIME_TABLE, SIDES.index(side), horizon, asset_class),
        )
        return [
            {"regime": row["regime"], **vars(_derive(row, side=side, baseline=None, min_sessions=0))} for row in rows
        ]

    def regime_of_session(self, session: date) -> dict[str, Any] | None:
        rows = self._rows("SELECT * FROM regime_sessions WHERE session=?", (session.isoformat(),))
        return rows[0] if rows else None

    def execution_conditions(self, *, symbol: str) -> dict[str, Any]:
        rows = self._rows("SELECT * FROM execution WHERE symbol=? ORDER BY bucket", (symbol,))
        return {
            "symbol": symbol,
            "volume_by_half_hour": [
                {
                    "minutes_from_open": row["bucket"] * EXECUTION_BUCKET_MINUTES,
                    "bars": row["n_bars"],
                    "sessions": row["n_sessions"],
                    "mean_volume_per_bar": round(row["sum_volume"] / row["n_bars"], 2) if row["n_bars"] else None,
                    "zero_volume_bars": row["zero_volume_bars"],
                }
                for row in rows
            ],
            "spread": None,
            "spread_status": self.manifest["execution"]["spread"],
        }

    def coverage(self) -> dict[str, Any]:
        return self.manifest["coverage"]

    def lineage(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "artifact_version": self.version,
            "artifact_sha256": self.sha256,
            "source": self.source,
            "data_as_of": m["data_as_of"],
            "corpus": m["corpus"],
            "inputs_sha256": m["inputs"]["plan_sha256"],
            "code_sha256": m["code_sha256"],
            "features": {"version": m["features"]["version"], "count": len(m["features"]["features"])},
            "registry": {k: m["registry"][k] for k in ("version", "count", "registry_sha256")},
            "calendar": m["calendar"],
            "min_sessions": self.min_sessions,
            "coverage": m["coverage"],
        }

    def freshness(self, *, at: Any) -> dict[str, Any]:
        """Forward-overlay freshness: lag in completed XNYS sessions between its last session and `at`."""
        overlay = self.manifest["coverage"]["forward_overlay"]
        if overlay.get("status") != "available":
            return {"status": "unavailable", "last_verified_session": None, "lag_sessions": None}
        last = date.fromisoformat(overlay["last_session"])
        latest = calendar.xnys_minutes().minute_to_past_session(at.replace(second=0, microsecond=0), count=1).date()
        if last > latest:
            # The artifact claims a session the clock says has not closed: the clock or the data is wrong.
            return {"status": "unknown", "last_verified_session": last.isoformat(), "lag_sessions": None}
        lag = len(calendar.sessions_between(last, latest)) - 1
        return {
            "status": "current" if lag == 0 else "behind",
            "last_verified_session": last.isoformat(),
            "latest_completed_session": latest.isoformat(),
            "lag_sessions": lag,
        }
