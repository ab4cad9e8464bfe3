"""The Market Memory build's bytes are pinned: a small deterministic universe gives exactly these files.

The hashes were taken on the build as it was before its fast path (re-taken on issue-12's features.v2 / schema 3
build, with the old code path, when that branch was merged), so every later change to how the build computes
must reproduce the artifact byte for byte. The manifest is compared without `code_sha256` and `version`, the two
fields that name the code itself (they change with any edit of the build modules, by design).
"""

import hashlib
import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

from evidence.marketdata import store
from evidence.memory import build
from evidence.models import MarketMemoryArtifact

pytestmark = pytest.mark.django_db

GOLDEN_FILES = {
    "coverage.parquet": "a0b2a43a1299d366fe74bc5f9deff0bd740770f4ca7ad79413a18ded077ae930",
    "execution.parquet": "a255768869b81899e263f9de081c397d530ced7fe89f1d895e9fe02e6cbf16cc",
    "regime_sessions.parquet": "709354c1f2cf0b9063ef1df5450e8f007d558e557a4561580086d7515e2de75b",
    "regimes.parquet": "c0eca263584879aaafa9114a2aa98a3897eff3a5766e816bd1774ba4382e8bf9",
    "reservoir.parquet": "fc1fd9ae225e7d55ab387fb5a19f72e904934a2d2bb75593819cc26d1fb913ed",
    "serve.sqlite3": "b512f3e18359fce765bba4fb7a3f4a07baf54da8af832990f94020289f6ff209",
    "symbol_baseline.parquet": "c5709918570b6ad1b707d4c58b656bb6054ef26ef9bffa6f2ed7bd8a83eae9a1",
    "tier1.parquet": "8cac1ac630eb4a4a5ee8ad660d4662248fc88a35e88e166457eb94c32a3af3a4",
    "tier2.parquet": "09721819b8c6b3759ab8b3ac4e6f8f13b3285060e681f6b823b54f7056864ad0",
    "tier3.parquet": "7302847a2f23e7b84cb04e675c1e4a1192f3cea6956642ea1f849c236398aee8",
    "tier4.parquet": "2456e41bad4e9e654c0d57f585bfe5abf8a32d37626366064367710b0cdbe676",
    "tier5.parquet": "a037319ea4618a15317f8076a2cc6995d4081c0e393f26a88a902ec91d53c9e1",
}
GOLDEN_FEATURE_FILES = {
    "features.v2/ALFA/a9de1af30d224781.parquet": "90c569e6864a85f842ef6942f6fd19ed4239ff78cb703b69bad772e271b359de",
    "features.v2/BRVO/dde7d6c4b0381f2f.parquet": "a03307ff4078d640d77225e8286825bc6305be4ada1262d91eae2397c978875a",
    "features.v2/SYNX/e30680b5d47aca9d.parquet": "cddd27e5e08d123e65944a544dbf0ac05c4ab0ded3511a0c00b0a00f37eaabf3",
}
GOLDEN_MANIFEST = "c14d451d08e94199c69ae43cb01067a33066eff7d3e7920fb9f65db7bce1e3b5"


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build(data_dir: Path) -> tuple[dict[str, str], dict[str, str], str]:
    call_command("load_demo_data", "--symbols", "2", "--sessions", "66", "--overlay-sessions", "2", "--seed", "5",
                 "--start", "2024-01-02", stdout=io.StringIO())  # fmt: skip
    with override_settings(LEROY_MM_MIN_SESSIONS=2):
        call_command("build_market_memory", stdout=io.StringIO())
    artifact = MarketMemoryArtifact.objects.get()
    root = data_dir / artifact.path
    files = {name: _hash(root / name) for name in sorted(artifact.manifest["files"])}
    assert files == {name: entry["sha256"] for name, entry in artifact.manifest["files"].items()}
    stored = sorted((data_dir / "features").rglob("*.parquet"))
    feature_files = {str(path.relative_to(data_dir / "features")): _hash(path) for path in stored}
    manifest = {k: v for k, v in json.loads(store.read_bytes(f"{artifact.path}/manifest.json")).items()
                if k not in ("code_sha256", "version")}  # fmt: skip
    return files, feature_files, hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def test_the_build_reproduces_the_pinned_artifact_bytes(data_dir: Path) -> None:
    files, feature_files, manifest = _build(data_dir)

    assert files == GOLDEN_FILES
    assert feature_files == GOLDEN_FEATURE_FILES
    assert manifest == GOLDEN_MANIFEST


def test_cutting_the_reservoirs_after_every_symbol_changes_no_byte(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "RESERVOIR_CUT_GROWTH", 0)  # a cut after every symbol, its bars on the next one

    files, _, manifest = _build(data_dir)

    assert files == GOLDEN_FILES
    assert manifest == GOLDEN_MANIFEST
