"""Leroy settings. Every value comes from the environment; production differs from the demo only by env."""

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from leroy.runtime import keep_private

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool = False) -> bool:
    value = env_str(name)
    if not value:
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {value!r}")


def env_int(name: str, default: int) -> int:
    value = env_str(name)
    try:
        return int(value) if value else default
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}") from None


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def _generated_secret(path: Path) -> str:
    """A secret kept in the var dir, created on first use and never committed."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


LEROY_VAR_DIR = Path(env_str("LEROY_VAR_DIR") or BASE_DIR / "var").resolve()
# Bars, feature files and Market Memory artifacts: a local path or any fsspec URL (s3://…, gs://…; install its backend).
LEROY_DATA_DIR = env_str("LEROY_DATA_DIR") or str(LEROY_VAR_DIR / "data")
LEROY_PUBLIC_ORIGIN = env_str("LEROY_PUBLIC_ORIGIN", "http://127.0.0.1:8000").rstrip("/")
LEROY_CORS_ORIGINS = [origin.rstrip("/") for origin in env_list("LEROY_CORS_ORIGINS")]
LEROY_CLOCK = env_str("LEROY_CLOCK")
MCP_CONFORMANCE_FIXTURES = env_bool("MCP_CONFORMANCE_FIXTURES")

DEBUG = env_bool("DEBUG")
keep_private(LEROY_VAR_DIR, data_dir=LEROY_DATA_DIR)  # the sandbox's uid must read nothing of it
SECRET_KEY = env_str("SECRET_KEY") or _generated_secret(LEROY_VAR_DIR / "secret_key")
# API keys are HMAC-ed with a pepper derived from SECRET_KEY: a leaked database alone cannot be brute-forced.
LEROY_API_KEY_PEPPER = hmac.new(SECRET_KEY.encode(), b"leroy.api-key-pepper", hashlib.sha256).digest()

ALLOWED_HOSTS = env_list("LEROY_ALLOWED_HOSTS", "127.0.0.1,localhost")
_public = urlsplit(LEROY_PUBLIC_ORIGIN)
CSRF_TRUSTED_ORIGINS = [LEROY_PUBLIC_ORIGIN]
if _public.scheme == "https":
    SECURE_SSL_REDIRECT = env_bool("LEROY_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = 31536000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Every page: our own stylesheet and script only, nothing inline, nothing from elsewhere, never framed. No
# form-action: browsers apply it to the redirect back to an OAuth client after Authorize.
SECURE_CSP = {
    "default-src": [CSP.NONE],
    "style-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
    "base-uri": [CSP.NONE],
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "oauth2_provider",
    "ninja",  # its bundled Swagger UI and ReDoc assets, so /api/v1/docs works offline (no CDN)
    "leroy",
    "accounts",
    "billing",
    "evidence",
    "backtests",
    "alerts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "leroy.middleware.unreadable_form_refused",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "leroy.middleware.AdminUnreadableValueRefused",
    "leroy.middleware.method_not_allowed_page",  # inside the CSRF and messages middleware: its page uses both
    "leroy.middleware.unknown_method_refused",  # last: its refusal passes every other middleware, as a view's does
]

ROOT_URLCONF = "leroy.urls"
ASGI_APPLICATION = "leroy.asgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL") or f"sqlite:///{LEROY_VAR_DIR / 'leroy.sqlite3'}", conn_max_age=0
    )
}
LEROY_DB_POOL_MAX = env_int("LEROY_DB_POOL_MAX", 20)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A per-process psycopg pool: every MCP request would otherwise open and close its own connection. The
    # admission limit below keeps in-flight requests under its size; the timeout is only the backstop.
    # Each connection is checked as it leaves the pool (one empty round trip), so connections the server dropped
    # while idle (a restart, a failover) are replaced instead of failing the next requests and tasks.
    from psycopg_pool import ConnectionPool

    DATABASES["default"]["OPTIONS"] = {
        "pool": {"min_size": 2, "max_size": LEROY_DB_POOL_MAX, "timeout": 5, "check": ConnectionPool.check_connection}
    }
# Admission (leroy/admission.py): in-flight requests per process stay below the pool (the rest is headroom for
# /readyz, /metrics and beat-free work), per principal below that; a request waits at most this long for a slot.
LEROY_ADMISSION_MAX_INFLIGHT = env_int("LEROY_ADMISSION_MAX_INFLIGHT", max(1, LEROY_DB_POOL_MAX - 4))
LEROY_ADMISSION_PER_PRINCIPAL = env_int("LEROY_ADMISSION_PER_PRINCIPAL", 4)
LEROY_ADMISSION_WAIT_SECONDS = float(env_str("LEROY_ADMISSION_WAIT_SECONDS") or 2.0)
if LEROY_ADMISSION_MAX_INFLIGHT >= LEROY_DB_POOL_MAX:
    raise ImproperlyConfigured("LEROY_ADMISSION_MAX_INFLIGHT must be below LEROY_DB_POOL_MAX")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    keep_private(LEROY_VAR_DIR, sqlite_file=str(DATABASES["default"]["NAME"]))
    # WAL lets the web process read while the worker writes; IMMEDIATE avoids lock upgrades mid-transaction.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;",
        "transaction_mode": "IMMEDIATE",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def redis_cache(url: str) -> dict[str, object]:
    """The cache on Redis: reads miss and writes are skipped when it fails (leroy.cache); short socket timeouts so
    a Redis that hangs fails fast and the rate limiter fails open (leroy.ratelimit)."""
    return {
        "BACKEND": "leroy.cache.FailSoftRedisCache",
        "LOCATION": url,
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 1.0},
    }


REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CACHES = {"default": redis_cache(REDIS_URL)}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "leroy"}}

AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "accounts:account"
LOGOUT_REDIRECT_URL = "home"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Sign-in lockout (accounts.throttle): this many failed passwords lock that address, or that client, for a while.
LEROY_LOGIN_FAILURES_PER_ACCOUNT = env_int("LEROY_LOGIN_FAILURES_PER_ACCOUNT", 5)
LEROY_LOGIN_FAILURES_PER_ADDRESS = env_int("LEROY_LOGIN_FAILURES_PER_ADDRESS", 20)
LEROY_LOGIN_LOCKOUT_SECONDS = env_int("LEROY_LOGIN_LOCKOUT_SECONDS", 15 * 60)
# Sign-up and password-reset e-mails Leroy sends per hour to one address and at the request of one client address.
LEROY_EMAILS_PER_ADDRESS_PER_HOUR = env_int("LEROY_EMAILS_PER_ADDRESS_PER_HOUR", 3)
LEROY_EMAILS_PER_CLIENT_PER_HOUR = env_int("LEROY_EMAILS_PER_CLIENT_PER_HOUR", 20)
PASSWORD_RESET_TIMEOUT = 3 * 24 * 3600  # also the life of a sign-up link

# E-mail (sign-up and password-reset links): the console in the demo, SMTP when LEROY_EMAIL_HOST is set.
DEFAULT_FROM_EMAIL = env_str("LEROY_EMAIL_FROM", "Leroy <no-reply@leroy.local>")
if env_str("LEROY_EMAIL_HOST"):
    MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {
                "host": env_str("LEROY_EMAIL_HOST"),
                "port": env_int("LEROY_EMAIL_PORT", 587),
                "username": env_str("LEROY_EMAIL_USER"),
                "password": env_str("LEROY_EMAIL_PASSWORD"),
                "use_tls": env_bool("LEROY_EMAIL_TLS", True),
            },
        }
    }
else:
    MAILERS = {"default": {"BACKEND": "leroy.mail.ReadableConsoleBackend"}}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = LEROY_VAR_DIR / "static"

# Celery: Redis when configured, else a filesystem broker under the var dir (one machine).
_broker_dir = LEROY_VAR_DIR / "celery"
# `leroyfs`: kombu's filesystem transport with each message renamed into place whole (leroy.broker, registered
# by leroy.celery under that scheme, so a broker URL set anywhere else still picks its own transport).
CELERY_BROKER_URL = REDIS_URL or "leroyfs://"
if not REDIS_URL:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),  # fanout (worker control) messages; default is the cwd
        "store_processed": False,
    }
    for _folder in ("queue", "processed", "control"):
        (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
if REDIS_URL:
    # A message a worker took but never acknowledged (its main process died) returns to the queue after this
    # long. Longer than any task runs (the sandbox wall limit is 3 min), so a live task is never delivered twice.
    # Each worker looks for such messages every `unacked_restore_interval` (10 s); kombu's default throttle would
    # scan only every tenth time (100 s), so a message a scan just missed would wait that long again. A scan holds a
    # lock in Redis for its few milliseconds; a worker killed inside one leaves it held until it expires (kombu's
    # default 5 min, during which no worker restores anything): a minute here.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("LEROY_BROKER_VISIBILITY_TIMEOUT", 900),
        "unacked_restore_throttle": 1,
        "unacked_mutex_expire": 60,
    }
CELERY_TASK_IGNORE_RESULT = True  # job state lives in our own models
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes a prefork process's connection pool around every task unless this is set; it then
# recycles it every this many tasks, and leroy.celery hands each task's connections back as a request does.
CELERY_DB_REUSE_MAX = 1000
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER")
# One queue per workload, so a flood of one kind cannot starve another; `celery` keeps the periodic housekeeping
# (frame feed, reaper, OAuth). Workers pick theirs with -Q (deploy/, `manage.py serve`).
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_ROUTES = {
    "backtests.backtest_run": {"queue": "backtests"},
    "backtests.optimization_point": {"queue": "optimizations"},
    "backtests.optimization_points": {"queue": "optimizations"},
    "backtests.optimization_probe_cut": {"queue": "optimizations"},
    "backtests.dry_run*": {"queue": "dryruns"},
    "evidence.tasks.market_memory_*": {"queue": "builds"},
    "alerts.*": {"queue": "deliveries"},
    "billing.*": {"queue": "billing"},
}
LEROY_CELERY_QUEUES = ["celery", "backtests", "optimizations", "dryruns", "builds", "deliveries", "billing"]

# MCP bridge.
LEROY_MCP_PATH = "/api/mcp"
LEROY_MCP_TOOL_MODULES: list[str] = []  # extra tool modules beyond each app's tools.py (tests use this)
LEROY_MCP_MAX_BODY_BYTES = 1024 * 1024
# /metrics: with a token, `Authorization: Bearer <token>` is required; without one only loopback callers get it.
LEROY_METRICS_TOKEN = env_str("LEROY_METRICS_TOKEN")
LEROY_RATE_LIMIT_PRINCIPAL_PER_MINUTE = env_int("LEROY_RATE_LIMIT_PRINCIPAL_PER_MINUTE", 120)
LEROY_RATE_LIMIT_ANONYMOUS_PER_MINUTE = env_int("LEROY_RATE_LIMIT_ANONYMOUS_PER_MINUTE", 40)
LEROY_API_KEYS_MAX_ACTIVE = 10

# OAuth 2.1 authorization server for /api/mcp (django-oauth-toolkit, stock models; accounts/oauth.py adds the
# exact resource binding, S256-before-consent, code-replay and refresh-race fixes).
LEROY_OAUTH_SCOPES = {
    "mcp:read": "Read research evidence and your own Leroy data through MCP",
    "mcp:write": "Create strategies, backtests, optimizations, alerts and notes through MCP, spending your credits",
}
LEROY_OAUTH_REGISTRATIONS_PER_MINUTE = 10  # dynamic client registrations per client address
LEROY_OAUTH_UNUSED_CLIENT_HOURS = 24  # registrations that never obtained a token are then deleted


def oauth2_provider_settings(origin: str) -> dict[str, object]:
    """DOT's settings, all URL-shaped values derived from the one public origin (issuer = origin, no path)."""
    return {
        "PKCE_REQUIRED": True,
        "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
        "ACCESS_TOKEN_EXPIRE_SECONDS": 3600,
        # Also enforced from each refresh token's own issue in accounts.oauth (DOT counts from access expiry).
        "REFRESH_TOKEN_EXPIRE_SECONDS": 30 * 24 * 3600,
        "ROTATE_REFRESH_TOKEN": True,
        "REFRESH_TOKEN_REUSE_PROTECTION": True,
        "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": 0,
        "REQUEST_APPROVAL_PROMPT": "force",
        "SCOPES": LEROY_OAUTH_SCOPES,
        "DEFAULT_SCOPES": ["mcp:read"],
        "OIDC_ENABLED": False,
        "OIDC_ISS_ENDPOINT": origin,
        "OAUTH2_PROTECTED_RESOURCE_IDENTIFIER": origin + LEROY_MCP_PATH,
        "OAUTH2_PROTECTED_RESOURCE_AUTHORIZATION_SERVERS": [origin],
        "OAUTH2_PROTECTED_RESOURCE_NAME": "Leroy MCP",
        "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
        "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
        "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none"],
        "OAUTH2_VALIDATOR_CLASS": "accounts.oauth.LeroyValidator",
        # Only so RFC 8414 metadata advertises registration_endpoint; the endpoint is accounts' own view.
        "DCR_ENABLED": True,
        "CIMD_ENABLED": False,
        "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
        "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
        "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
        "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
        "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
        "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
        "COMPLIANT_BCP_RFC9700_REFRESH_TOKEN": True,
        "COMPLIANT_BCP_RFC9700_REDIRECT_URI_MATCHING": True,
        "COMPLIANT_BCP_RFC9700_PKCE_REQUIRED": True,
        # REDIRECT_URI_SCHEME stays a warning: http is needed for loopback; registration restricts it.
    }


OAUTH2_PROVIDER = oauth2_provider_settings(LEROY_PUBLIC_ORIGIN)
# W008 (http redirect URIs allowed) is intended: native clients use http loopback (RFC 8252); registration
# (accounts.oauth) refuses http to any other host.
SILENCED_SYSTEM_CHECKS = ["oauth2_provider.W008"]

LOGGING = {
    "version": 1,
    # Keep uvicorn's and the SDK's loggers alive: the default hides tracebacks on the MCP branch.
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "bare": {"format": "%(message)s"},  # the message is already one JSON object
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "json_lines": {"class": "logging.StreamHandler", "formatter": "bare"},
    },
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {
        # One JSON line per MCP tool call (leroy.mcp.calllog).
        "leroy.mcp.calls": {"handlers": ["json_lines"], "level": "INFO", "propagate": False},
        "mcp.server.streamable_http": {"level": "WARNING"},
        "mcp.server.streamable_http_manager": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
    },
}

# Stripe: with no secret key, billing runs ledger-only (nothing is sent, the ledger still decides everything).
LEROY_STRIPE_SECRET_KEY = env_str("LEROY_STRIPE_SECRET_KEY")
LEROY_STRIPE_WEBHOOK_SECRET = env_str("LEROY_STRIPE_WEBHOOK_SECRET")
LEROY_STRIPE_METER_EVENT_NAME = env_str("LEROY_STRIPE_METER_EVENT_NAME", "leroy_overage_lookup")
LEROY_STRIPE_METERED_PRICE_ID = env_str("LEROY_STRIPE_METERED_PRICE_ID")  # the $0.01/unit price on the meter

# Backtests: the sandbox child's limits (notes/backtesting.md §3) and credit prices.
LEROY_SANDBOX_UID = int(env_str("LEROY_SANDBOX_UID", "61000"))
LEROY_SANDBOX_CPU_SECONDS = int(env_str("LEROY_SANDBOX_CPU_SECONDS", "120"))
LEROY_SANDBOX_WALL_SECONDS = float(env_str("LEROY_SANDBOX_WALL_SECONDS", "180"))
LEROY_SANDBOX_MEMORY_MB = int(env_str("LEROY_SANDBOX_MEMORY_MB", "1536"))
LEROY_SANDBOX_OUTPUT_BYTES = int(env_str("LEROY_SANDBOX_OUTPUT_BYTES", str(32 * 1024 * 1024)))
LEROY_SANDBOX_BWRAP = env_str("LEROY_SANDBOX_BWRAP", "auto")  # auto: use bubblewrap when it works here; off
LEROY_BACKTEST_CREDITS = int(env_str("LEROY_BACKTEST_CREDITS", "10"))
# The truncation probe reruns a backtest on 3 cuts of its data: priced, and reserved with the backtest up front.
LEROY_LOOKAHEAD_PROBE_CREDITS = int(env_str("LEROY_LOOKAHEAD_PROBE_CREDITS", "5"))
# Dry runs execute on workers consuming the `dryruns` queue: one in flight per account, at most this many at once
# per worker host, and a caller waits this long for a worker to take one before the answer is `busy`.
LEROY_DRY_RUNS_PER_WORKER = int(env_str("LEROY_DRY_RUNS_PER_WORKER", "2"))
LEROY_DRY_RUN_QUEUE_SECONDS = float(env_str("LEROY_DRY_RUN_QUEUE_SECONDS", "15"))
# A dry run's own limits: 520 daily bars take a strategy well under a CPU-second, so a loop is told as `cpu_limit`
# within seconds (the backtest's 120 CPU-s could not be reached within its wall clock on a busy worker).
LEROY_DRY_RUN_CPU_SECONDS = int(env_str("LEROY_DRY_RUN_CPU_SECONDS", "15"))
LEROY_DRY_RUN_WALL_SECONDS = float(env_str("LEROY_DRY_RUN_WALL_SECONDS", "60"))
LEROY_OPTIMIZATION_POINT_CREDITS = int(env_str("LEROY_OPTIMIZATION_POINT_CREDITS", "5"))
# Grid points per Celery task: start-up paid once per chunk, chunks small enough to share out over the workers.
LEROY_OPTIMIZATION_POINTS_PER_TASK = int(env_str("LEROY_OPTIMIZATION_POINTS_PER_TASK", "2"))
# CSCV over an optimization's grid (the PBO in its verdict): reserved with the grid, refunded when refused.
LEROY_PBO_CREDITS = int(env_str("LEROY_PBO_CREDITS", "1"))
LEROY_PBO_BLOCKS = int(env_str("LEROY_PBO_BLOCKS", "16"))  # CSCV's S (even); recorded on each optimization
LEROY_PBO_MIN_BLOCK_OBSERVATIONS = int(env_str("LEROY_PBO_MIN_BLOCK_OBSERVATIONS", "5"))
# The verdict's thresholds (documentation.md, "Verdicts"); each verdict names the values it used.
LEROY_VERDICT_MIN_DEFLATED_SHARPE = float(env_str("LEROY_VERDICT_MIN_DEFLATED_SHARPE", "0.95"))
LEROY_VERDICT_MAX_PBO = float(env_str("LEROY_VERDICT_MAX_PBO", "0.5"))
LEROY_VERDICT_MIN_TRADES = int(env_str("LEROY_VERDICT_MIN_TRADES", "30"))
LEROY_MARKET_DATA_URL = env_str("LEROY_MARKET_DATA_URL", "https://api.tiingo.com")  # a Tiingo-compatible API
LEROY_MARKET_DATA_TOKEN = env_str("LEROY_MARKET_DATA_TOKEN")

# Evidence / Market Memory.
LEROY_MM_MIN_SESSIONS = int(env_str("LEROY_MM_MIN_SESSIONS", "30"))  # a tier counts only with this many sessions
LEROY_MM_RELOAD_SECONDS = float(env_str("LEROY_MM_RELOAD_SECONDS", "5"))  # how often a process checks activation
# How often beat re-hashes the active artifact (a mismatch withdraws it everywhere within one reload check more).
LEROY_MM_VERIFY_SECONDS = float(env_str("LEROY_MM_VERIFY_SECONDS", "300"))
# The frame feed: a frame whose bar closed longer ago than this, during an open session, is stale.
LEROY_FRAME_STALE_SECONDS = env_int("LEROY_FRAME_STALE_SECONDS", 180)
# "replay" feeds the stored provisional session on the replay clock (the demo); "provider" takes pushed live bars.
LEROY_FRAME_FEED = env_str("LEROY_FRAME_FEED") or ("replay" if LEROY_CLOCK else "provider")

# Evidence alerts: wake rules evaluated on new frames, signed webhooks (alerts app; README "Evidence alerts").
# `host:port` receivers allowed http and loopback/private addresses (self-hosted receivers, tests); empty by default.
LEROY_WEBHOOK_ALLOW_HOSTS = [entry.lower() for entry in env_list("LEROY_WEBHOOK_ALLOW_HOSTS")]
LEROY_WEBHOOK_PORTS = [int(port) for port in env_list("LEROY_WEBHOOK_PORTS", "443,8443")]  # for https receivers
LEROY_WEBHOOK_CA_BUNDLE = env_str("LEROY_WEBHOOK_CA_BUNDLE")  # PEM file of trusted CAs; empty: the system store
LEROY_WEBHOOK_CONNECT_TIMEOUT = 5.0
LEROY_WEBHOOK_READ_TIMEOUT = 10.0
LEROY_WEBHOOK_TOTAL_TIMEOUT = 15.0  # an attempt in all: connect, TLS, the answer's status and its first bytes
LEROY_WEBHOOK_RESPONSE_BYTES = 1024  # of a receiver's answer, kept in the delivery log
LEROY_ALERTS_MAX_RULES = env_int("LEROY_ALERTS_MAX_RULES", 25)  # per account
# Per rule and hour: matched deliveries plus test and redeliver sends.
LEROY_ALERTS_DELIVERIES_PER_HOUR = env_int("LEROY_ALERTS_DELIVERIES_PER_HOUR", 60)
LEROY_ALERTS_PAUSE_AFTER_FAILURES = env_int("LEROY_ALERTS_PAUSE_AFTER_FAILURES", 10)  # failed deliveries in a row
LEROY_ALERTS_DELIVERY_WINDOW_MINUTES = 60  # after the frame; also ends at the session close and the rule's expiry
LEROY_ALERTS_RETRY_BASE_SECONDS = 10.0  # exponential backoff with full jitter
LEROY_ALERTS_RETRY_CAP_SECONDS = 600.0
LEROY_ALERTS_LEASE_SECONDS = 60  # an attempt still open after this is presumed lost with its worker
# The publication log (evidence.publication): checkpoints name the log by origin and are signed with an Ed25519
# key in the signed-note form `PRIVATE+KEY+<name>+<hash>+<base64>`, given inline or as a file path; unset, one is
# generated into the var dir (fine for the demo; production sets it so every node signs with the same key).
LEROY_LOG_ORIGIN = env_str("LEROY_LOG_ORIGIN") or f"{_public.netloc}/log"
LEROY_LOG_SIGNING_KEY = env_str("LEROY_LOG_SIGNING_KEY")
LEROY_LOG_KEY_FILE = LEROY_VAR_DIR / "log_signing_key"
# Optional RFC 3161 time-stamp authority: each checkpoint note is stamped after it is committed (a failure is
# recorded and reported, never blocks an append). LEROY_LOG_TSA_ROOTS, a PEM file of the TSA's root (and
# intermediate) certificates, makes Leroy check the token's signature chain too; unset, it checks status, imprint
# and nonce only, and says so.
LEROY_LOG_TSA_URL = env_str("LEROY_LOG_TSA_URL")
if LEROY_LOG_TSA_URL and urlsplit(LEROY_LOG_TSA_URL).scheme not in ("http", "https"):
    raise ImproperlyConfigured("LEROY_LOG_TSA_URL must be an http(s) URL")
LEROY_LOG_TSA_ROOTS = env_str("LEROY_LOG_TSA_ROOTS")
LEROY_LOG_TSA_TIMEOUT = float(env_str("LEROY_LOG_TSA_TIMEOUT", "10"))
# The end-of-day evidence layer (evidence.eod): the universe file (tickers, replay window, held-out tail, first
# walk-forward year); unset, the demo universe shipped with the code.
LEROY_EOD_UNIVERSE = env_str("LEROY_EOD_UNIVERSE")
CELERY_BEAT_SCHEDULE = {
    "frames-tick": {"task": "evidence.tasks.frames_tick_task", "schedule": 20.0, "options": {"expires": 20}},
    "alerts-evaluate": {"task": "alerts.frames_evaluate", "schedule": 10.0, "options": {"expires": 10}},
    "alerts-sweep": {"task": "alerts.deliveries_sweep", "schedule": 15.0, "options": {"expires": 15}},
    "frames-compact": {"task": "evidence.tasks.frames_compact_task", "schedule": 3600.0},
    "market-memory-verify": {"task": "evidence.tasks.market_memory_verify_task", "schedule": LEROY_MM_VERIFY_SECONDS},
    "oauth-housekeeping": {"task": "accounts.tasks.oauth_housekeeping_task", "schedule": 24 * 3600.0},
    "meter-reports": {"task": "billing.meter_reports_send", "schedule": 60.0, "options": {"expires": 60}},
    "subscriptions-sync": {"task": "billing.subscriptions_sync", "schedule": 600.0, "options": {"expires": 600}},
    "periods-close": {"task": "billing.periods_close", "schedule": 3600.0},
    "ledger-verify": {"task": "billing.ledger_verify", "schedule": 24 * 3600.0},
    "backtests-reap": {"task": "backtests.stale_jobs_reap", "schedule": 300.0},
    # After the NYSE close in both EST and EDT: commit the day's answer hashes into the publication log.
    "answers-commit": {"task": "evidence.answers_commit", "schedule": crontab(minute=30, hour=21)},
    # After the close in both EST and EDT, Monday to Friday; the task itself skips days that are not XNYS sessions.
    "log-timestamp": {"task": "evidence.log_timestamp", "schedule": 600.0, "options": {"expires": 600}},
    "eod-run": {"task": "evidence.eod_run", "schedule": crontab(minute=15, hour=22, day_of_week="mon-fri")},
}
