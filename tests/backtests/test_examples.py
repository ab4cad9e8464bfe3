from pathlib import Path

import pytest

from backtests import services
from backtests.examples import DEMO_STRATEGY_NAME, SMA_CROSS
from backtests.models import DryRunPass, Strategy

DOCUMENTATION = Path(services.__file__).with_name("documentation.md")


def test_the_demo_strategy_is_the_documentations_sma_cross_to_the_letter():
    assert f"```python\n{SMA_CROSS}```" in DOCUMENTATION.read_text()


@pytest.mark.django_db
def test_seeding_dry_runs_the_source_once_and_saves_it_once(owner):
    first = services.strategy_seed(user=owner, name=DEMO_STRATEGY_NAME, code=SMA_CROSS)
    again = services.strategy_seed(user=owner, name=DEMO_STRATEGY_NAME, code=SMA_CROSS)

    assert again.pk == first.pk and first.code == SMA_CROSS
    assert Strategy.objects.filter(user=owner).count() == 1
    assert DryRunPass.objects.filter(user=owner, code_sha256=services.code_sha256(SMA_CROSS)).count() == 1


@pytest.mark.django_db
def test_seeding_a_source_whose_dry_run_fails_saves_nothing(owner):
    broken = "class Broken(bt.Strategy):\n    def next(self):\n        raise ValueError('no')\n"

    with pytest.raises(services.BacktestError) as refused:
        services.strategy_seed(user=owner, name="Broken", code=broken)

    assert refused.value.code == "dry_run_failed"
    assert (Strategy.objects.count(), DryRunPass.objects.count()) == (0, 0)
