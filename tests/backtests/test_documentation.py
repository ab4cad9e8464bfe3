import re

import pytest

from backtests import sandbox
from backtests.dryrun import dry_run_datas
from backtests.services import DRY_RUN_SIMULATION
from backtests.tools import DOCUMENTATION

EXAMPLES = re.findall(r"```python\n(.*?)```", DOCUMENTATION.read_text(), re.S)


def test_documentation_covers_the_contract_topics():
    text = DOCUMENTATION.read_text()

    for topic in (
        "Execution environment",
        "The `bt` object",
        "Several symbols",
        "Orders",
        "Parameters",
        "No imports",
        "visualization",
    ):
        assert topic.lower() in text.lower()
    assert len(EXAMPLES) == 4


@pytest.mark.parametrize("code", EXAMPLES, ids=[re.search(r"class (\w+)\(bt\.Strategy", c).group(1) for c in EXAMPLES])
def test_every_documented_example_runs_in_the_sandbox_and_trades(code):
    outcome = sandbox.run_job(source=code, datas=dry_run_datas(), simulation=DRY_RUN_SIMULATION, parameters={})

    assert outcome.ok is True, outcome.error
    assert len(outcome.result["trades"]) >= 1
