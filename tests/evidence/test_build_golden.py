"""The Market Memory build's bytes are pinned: a small deterministic universe gives exactly these files.

The hashes were taken on the build as it was before its fast path, so every later change to how the build computes
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
from evidence.models import MarketMemoryArtifact

pytestmark = pytest.mark.django_db

GOLDEN_FILES = {
    "coverage.parquet": "a0b2a43a1299d366fe74bc5f9deff0bd740770f4ca7ad79413a18ded077ae930",
    "execution.parquet": "a255768869b81899e263f9de081c397d530ced7fe89f1d895e9fe02e6cbf16cc",
    "regime_sessions.parquet": "709354c1f2cf0b9063ef1df5450e8f007d558e557a4561580086d7515e2de75b",
    "regimes.parquet": "eb4ccd09529c953a9cc2c677f91b319eabb1094763eb47f1b52a36e77b57357f",
    "reservoir.parquet": "606c53796f70a0000a46b69e91587eaf17c30b1f0e833e4cef554dbe7e6a33b0",
    "serve.sqlite3": "ebc232d2f667d902bc6c1f306bf8b78f7d08d588ef79a9c4bb4676aeedf510ca",
    "symbol_baseline.parquet": "f33bc08106977edf22c6bb2095ad30f3881c11c4598bce51f0e331465bfa329b",
    "tier1.parquet": "b5ccf185a7c845c8d644a44cfbdec7423085cda30d9aaf9dea27da298c96d89b",
    "tier2.parquet": "996266a1384d808eb6950f065eb7446d5fd1fac23ba0861bd865658a701205e8",
    "tier3.parquet": "54079e63fba52d75e04688cfc9971e10f212c1f7cf4cf0188530c480a975caaa",
    "tier4.parquet": "5f1b33eef3cd070bffd4ee9434b97bb51b0181f151da1904629610fa68a411c9",
    "tier5.parquet": "9e9fdf508e4df684052e6ad5667bd9a09a9914dc331dcba86301769ce81ca302",
}
GOLDEN_FEATURE_FILES = {
    "features.v1/ALFA/a9de1af30d224781.parquet": "d76e58d0895264bb61a25ef0878403ac21272bce71eaa112cc40508713149cc3",
    "features.v1/BRVO/dde7d6c4b0381f2f.parquet": "9a1cc3dd0ffdb8230716a07b51e6ecb8f4fb64cfd3d5ce9b06b2e7f820376bc0",
    "features.v1/SYNX/e30680b5d47aca9d.parquet": "a177d63b0d3e0d34efbdb90a33340d2aa3a26e0fe1537b32114c92bfd5a7e52d",
}
GOLDEN_MANIFEST = "47ab00ef723ac3b9f754a43b24f87bb9b3d0fed4cdbfb9a2df6e899428b1dd7d"


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
