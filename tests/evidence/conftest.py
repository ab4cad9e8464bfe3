from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from tests.evidence.tsa import tsa, tsa_server  # noqa: F401 (fixtures: a local RFC 3161 time-stamp authority)


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """Every evidence test gets its own bar store and artifact directory."""
    root = tmp_path / "data"
    root.mkdir()
    with override_settings(LEROY_DATA_DIR=str(root)):
        yield root
