import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRINT = (
    "import json; from django.conf import settings as s; "
    "print(json.dumps({'db': s.DATABASES['default'], 'hosts': s.ALLOWED_HOSTS, 'debug': s.DEBUG, "
    "'cache': s.CACHES['default']['BACKEND'], 'broker': s.CELERY_BROKER_URL, 'data': s.LEROY_DATA_DIR}, default=str))"
)


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "DATABASE_URL", "REDIS_URL", "SECRET"))}
    env.update({"DJANGO_SETTINGS_MODULE": "leroy.settings", "LEROY_VAR_DIR": str(tmp_path / "var"), **extra})
    env.pop("DEBUG", None)
    return env


def django(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_defaults_are_embedded_and_safe(tmp_path):
    result = django(clean_env(tmp_path), "-c", f"import django; django.setup(); {PRINT}")

    values = json.loads(result.stdout)
    assert values["db"]["ENGINE"] == "django.db.backends.sqlite3"
    assert values["db"]["NAME"] == str(tmp_path / "var" / "leroy.sqlite3")
    assert "journal_mode=WAL" in values["db"]["OPTIONS"]["init_command"]
    assert values["hosts"] == ["127.0.0.1", "localhost"]
    assert values["debug"] is False
    assert values["cache"] == "django.core.cache.backends.locmem.LocMemCache"
    assert values["broker"] == "leroyfs://"
    assert values["data"] == str(tmp_path / "var" / "data")
    secret = (tmp_path / "var" / "secret_key").read_text()
    assert len(secret) >= 50
    assert oct((tmp_path / "var" / "secret_key").stat().st_mode & 0o777) == "0o600"


def test_production_env_selects_postgres_and_redis(tmp_path):
    env = clean_env(
        tmp_path,
        DATABASE_URL="postgres://leroy@db.internal:5432/leroy",
        REDIS_URL="redis://cache:6379/0",
        LEROY_ALLOWED_HOSTS="leroy.example.com",
        SECRET_KEY="x" * 60,
    )
    result = django(env, "-c", f"import django; django.setup(); {PRINT}")

    values = json.loads(result.stdout)
    assert values["db"]["ENGINE"] == "django.db.backends.postgresql"
    assert values["db"]["HOST"] == "db.internal"
    assert values["hosts"] == ["leroy.example.com"]
    assert values["cache"] == "leroy.cache.FailSoftRedisCache"
    assert values["broker"] == "redis://cache:6379/0"
    assert not (tmp_path / "var" / "secret_key").exists()


def test_check_deploy_is_clean_under_production_like_env(tmp_path):
    env = clean_env(
        tmp_path,
        SECRET_KEY="k3y-" + "q8Zr!f2Lp@w9Xm#c4Tn$v7Bh%j1Gd^s6Ky&e0Ua*" * 2,
        LEROY_PUBLIC_ORIGIN="https://leroy.example.com",
        LEROY_ALLOWED_HOSTS="leroy.example.com",
        LEROY_EMAIL_HOST="smtp.example.com",  # sign-up and reset links need real mail; the check says so without
    )
    result = django(env, "manage.py", "check", "--deploy", "--fail-level", "WARNING")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
