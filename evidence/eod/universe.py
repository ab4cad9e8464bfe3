"""The fixed public universe: a versioned JSON file (settings.LEROY_EOD_UNIVERSE) whose canonical hash is the
universe hash. It names the tickers, the replay window, the held-out tail and the first walk-forward year."""

import json
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from django.conf import settings

from evidence.eod.engine import canonical_sha256
from evidence.vocabulary import normalize_ticker

DEMO_UNIVERSE = Path(__file__).with_name("universes") / "demo.json"


@dataclass(frozen=True)
class Universe:
    name: str
    version: str
    tickers: tuple[str, ...]
    replay_sessions: int
    heldout_first: date
    heldout_last: date
    walk_forward_first_year: int
    sha256: str
    document: dict[str, Any]


def universe_load(path: str | Path | None = None) -> Universe:
    document = json.loads(Path(path or settings.LEROY_EOD_UNIVERSE or DEMO_UNIVERSE).read_text())
    heldout = document["heldout"]
    first, last = date.fromisoformat(heldout["first"]), date.fromisoformat(heldout["last"])
    if first > last or not document["tickers"] or document["replay_sessions"] < 2:
        raise ValueError("the universe needs tickers, a replay window of 2+ sessions and heldout.first <= last")
    return Universe(
        name=document["name"],
        version=document["version"],
        tickers=tuple(sorted({normalize_ticker(t) for t in document["tickers"]})),
        replay_sessions=int(document["replay_sessions"]),
        heldout_first=first,
        heldout_last=last,
        walk_forward_first_year=int(document["walk_forward_first_year"]),
        sha256=canonical_sha256(document),
        document=document,
    )
