"""constraints.txt fixes the versions a checkout installs; the environment the suite runs in is exactly that."""

from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

CONSTRAINTS = Path(__file__).resolve().parents[2] / "constraints.txt"


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "=="
            pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def test_every_installed_distribution_is_the_pinned_version() -> None:
    pins = _pins()
    installed: dict[str, str] = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}

    assert {name: installed.get(name) for name in pins if name in installed} == {
        name: version for name, version in pins.items() if name in installed
    }
    assert {"django", "polars", "exchange-calendars", "backtrader", "mcp"} <= pins.keys()


def test_every_dependency_the_project_declares_is_pinned() -> None:
    pins = _pins()
    declared = metadata.requires("leroy") or []

    unpinned = sorted({canonicalize_name(Requirement(r).name) for r in declared} - pins.keys())

    assert unpinned == []
