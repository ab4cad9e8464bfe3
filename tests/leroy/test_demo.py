from datetime import date
from io import StringIO

from django.core.management import call_command

from accounts import services
from accounts.models import ApiKey, User
from backtests.schemas import RunOptimizationArgs, RunWalkForwardArgs
from leroy.management.commands.demo import demo_optimizations


def test_demo_prints_a_working_write_key_and_revokes_the_previous_one(db):
    outputs = []
    for _ in range(2):
        out = StringIO()
        call_command("demo", "--no-serve", "--no-data", stdout=out)
        outputs.append(out.getvalue())

    keys = [
        line.split("=", 1)[1]
        for text in outputs
        for line in text.splitlines()
        if line.startswith("LEROY_DEMO_API_KEY=")
    ]
    user = User.objects.get(email="demo@leroy.local")
    assert len(keys) == 2
    assert services.api_key_authenticate(plaintext=keys[0]) is None
    assert services.api_key_authenticate(plaintext=keys[1]).scope_list == ["mcp:read", "mcp:write"]
    assert ApiKey.objects.filter(user=user, revoked_at__isnull=True).count() == 1
    assert '"url": "http://127.0.0.1:8000/api/mcp"' in outputs[1]
    assert f'"Authorization": "Bearer {keys[1]}"' in outputs[1]


def test_demo_prints_the_landing_page_url(db):
    out = StringIO()

    call_command("demo", "--no-serve", "--no-data", "--port", "8123", stdout=out)

    assert "Leroy: http://127.0.0.1:8123/\n" in out.getvalue()


def test_the_printed_demo_optimizations_are_valid_tool_arguments():
    optimization, walk_forward = demo_optimizations("s-1", "2", date(2017, 1, 3), date(2026, 5, 19))

    assert RunOptimizationArgs.from_arguments(optimization).target_metric == "annualized_sharpe_ratio"
    parsed = RunWalkForwardArgs.from_arguments(walk_forward)
    assert (parsed.train_period.months, parsed.test_period.months, parsed.anchored) == (24, 12, False)
