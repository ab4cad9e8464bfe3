from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """Every evidence test gets its own bar store and artifact directory."""
    root = tmp_path / "data"
    root.mkdir()
    with override_settings(LEROY_DATA_DIR=str(root)):
        yield root
