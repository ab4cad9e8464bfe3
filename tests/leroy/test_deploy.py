"""deploy/: the systemd units pass `systemd-analyze verify` and run exactly the commands leroy.serving defines."""

import shlex
import subprocess
from pathlib import Path

from django.test import override_settings

from leroy import serving

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SANDBOX_QUEUES = {"backtests", "optimizations", "dryruns"}


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections, each key with all its values (systemd allows repeated keys)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in (DEPLOY / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


def exec_argv(name: str, instance: str | None = None) -> list[str]:
    command = unit(name)["Service"]["ExecStart"][0]
    if instance is not None:
        command = command.replace("%i", instance)
    argv = shlex.split(command.replace("%%", "%"))
    assert argv[0].startswith("/opt/leroy/.venv/bin/")
    return argv[1:]


def target_instances() -> list[str]:
    return [w for line in unit("leroy.target")["Unit"]["Wants"] for w in line.split()]


def test_units_pass_systemd_analyze_verify(tmp_path):
    names = [p.name for p in DEPLOY.iterdir() if p.suffix in {".service", ".target"}]
    for name in names:  # the installed paths, pointed at this checkout so the executables exist
        text = (DEPLOY / name).read_text().replace("/opt/leroy/.venv/bin/", f"{ROOT}/.venv/bin/")
        (tmp_path / name).write_text(text.replace("/opt/leroy", str(ROOT)))
    instances = [w for w in target_instances() if "@" in w]

    verified = subprocess.run(
        ["systemd-analyze", "verify", *names, *instances], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )

    assert (verified.returncode, verified.stdout, verified.stderr) == (0, "", "")


def test_the_web_unit_runs_the_serving_command_with_an_explicit_proxy():
    expected = serving.uvicorn_command(port=8000, host="127.0.0.1", workers=4, forwarded_allow_ips="127.0.0.1")

    assert exec_argv("leroy-web.service") == expected[1:]
    assert "--forwarded-allow-ips" in expected
    assert unit("leroy-web.service")["Service"]["Environment"] == ["PROMETHEUS_MULTIPROC_DIR=/run/leroy-prometheus"]
    assert unit("leroy-web.service")["Service"]["RuntimeDirectory"] == ["leroy-prometheus"]


def test_the_target_runs_one_worker_per_queue_and_one_beat():
    from django.conf import settings

    wants = target_instances()
    workers = {w.split("@")[1].removesuffix(".service"): w.split("@")[0] for w in wants if "@" in w}

    assert set(workers) == set(settings.LEROY_CELERY_QUEUES)
    assert {q for q, template in workers.items() if template == "leroy-sandbox-worker"} == SANDBOX_QUEUES
    assert wants.count("leroy-beat.service") == 1
    assert "leroy-web.service" in wants
    for queue, template in workers.items():
        expected = serving.celery_worker_command(queues=[queue], concurrency=2, name=queue)
        assert exec_argv(f"{template}@.service", queue) == expected[1:]
    assert unit("leroy-sandbox-worker@.service")["Service"]["User"] == ["root"]
    assert unit("leroy-worker@.service")["Service"]["User"] == ["leroy"]


def test_the_beat_unit_runs_the_serving_command():
    with override_settings(LEROY_VAR_DIR=Path("/var/lib/leroy")):
        expected = serving.celery_beat_command()

    assert exec_argv("leroy-beat.service") == expected[1:]
