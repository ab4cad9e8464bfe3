from celery import current_app
from kombu import Queue

from backtests import sandbox, statistics, tasks
from backtests.dryrun import walk

SIM = {"initial_cash": 1000, "commission": 0, "leverage": 1, "buy_on_close": False}


def warmed(monkeypatch, queues: list[str]) -> bool:
    started = []
    selected = {name: Queue(name) for name in queues}
    monkeypatch.setattr(sandbox, "warm", lambda: started.append("template"))
    monkeypatch.setattr(statistics, "warm", lambda: started.append("statistics"))
    monkeypatch.setattr(current_app.amqp.queues, "_consume_from", selected)

    tasks._warm_sandbox()

    assert started in ([], ["template", "statistics"])
    return started == ["template", "statistics"]


def test_a_pool_process_taking_sandbox_queues_starts_its_template_at_once(monkeypatch):
    assert warmed(monkeypatch, ["celery", "dryruns"]) is True
    assert warmed(monkeypatch, ["optimizations"]) is True


def test_a_pool_process_taking_no_sandbox_queue_keeps_no_template(monkeypatch):
    assert warmed(monkeypatch, ["celery", "builds"]) is False


def test_the_warmed_template_is_the_one_the_next_job_forks_from():
    sandbox.warm()
    template = sandbox._template(sandbox.bubblewrap_usable())

    outcome = sandbox.run_job(
        source="class P(bt.Strategy):\n    pass\n", datas=[walk("WARM", bars=60)], simulation=SIM, parameters={}
    )

    assert outcome.ok is True
    assert sandbox._template(sandbox.bubblewrap_usable()) is template and template.usable()
