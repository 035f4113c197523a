"""Atrium settings, read from the environment (12-factor).

Everything has a default that suits `make run` on a laptop: SQLite under var/, tasks run
eagerly in-process, an in-memory cache. Production sets DATABASE_URL, CELERY_BROKER_URL,
CACHE_URL, SECRET_KEY, ALLOWED_HOSTS and ATRIUM_PUBLIC_URL.
"""

import ipaddress
import os
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DEBUG")

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    SECRET_KEY = "atrium-dev-only-secret-key-never-use-in-production"

PORT = int(os.environ.get("PORT", "8000"))
ATRIUM_PUBLIC_URL = os.environ.get("ATRIUM_PUBLIC_URL", f"http://127.0.0.1:{PORT}").rstrip("/")
ATRIUM_MCP_URL = f"{ATRIUM_PUBLIC_URL}/mcp"
_public = urlsplit(ATRIUM_PUBLIC_URL)
ATRIUM_PUBLIC_ORIGIN = f"{_public.scheme}://{_public.netloc}"

ALLOWED_HOSTS = [*env_list("ALLOWED_HOSTS", "127.0.0.1,localhost"), _public.hostname or "127.0.0.1"]
CSRF_TRUSTED_ORIGINS = [ATRIUM_PUBLIC_ORIGIN, *env_list("CSRF_TRUSTED_ORIGINS")]

# Browser origins allowed to call /mcp. Requests without an Origin header (every desktop and
# CLI client) are unaffected; a browser page from any other origin gets 403, which is what
# stops DNS-rebinding attacks against a server on localhost.
ATRIUM_ALLOWED_ORIGINS = [
    ATRIUM_PUBLIC_ORIGIN,
    "http://localhost:*",
    "http://127.0.0.1:*",
    *env_list("ATRIUM_ALLOWED_ORIGINS"),
]

# Personal access tokens and MCP sessions.
ATRIUM_TOKEN_LAST_USED_PRECISION = 300  # seconds between last_used writes
ATRIUM_MCP_SESSION_IDLE_DAYS = int(os.environ.get("ATRIUM_MCP_SESSION_IDLE_DAYS", "7"))
# How long the record of each MCP tool call (the performance log, the console's metrics) is kept.
ATRIUM_TOOL_CALL_RETENTION_DAYS = int(os.environ.get("ATRIUM_TOOL_CALL_RETENTION_DAYS", "30"))
ATRIUM_OPEN_SIGNUP = env_bool("ATRIUM_OPEN_SIGNUP")
# Whether a workflow tool's `cwd` is looked up on this server's own disk (git root, remote, skill
# files). Right for local use; off on a shared server, where a `cwd` resolves only through the
# caller's registered project roots and no user can make the server read its own files.
ATRIUM_SERVER_PATHS = env_bool("ATRIUM_SERVER_PATHS", DEBUG)

# Load balancers and reverse proxies whose X-Forwarded-For is believed (addresses or CIDRs).
# From anyone else the header is ignored, so a client cannot pick the address it is counted as.
ATRIUM_TRUSTED_PROXIES = env_list("ATRIUM_TRUSTED_PROXIES")
for _proxy in ATRIUM_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError as _error:
        raise ImproperlyConfigured(f"ATRIUM_TRUSTED_PROXIES: {_error}") from None
if os.environ.get("NUM_PROXIES"):
    # Counting hops trusted the header's shape rather than who wrote it; refuse to start rather
    # than silently count every client as the load balancer.
    raise ImproperlyConfigured("NUM_PROXIES is replaced by ATRIUM_TRUSTED_PROXIES: list the proxies' addresses.")

# Where script nodes run: "bwrap" (bubblewrap namespaces, an unprivileged uid, a read-only system; the
# only choice a hosted server has) or "subprocess" (a plain child process of the server, honoured only
# with DEBUG on, for a local single-user server without bubblewrap). See docs/operations.md.
ATRIUM_SCRIPT_SANDBOX = os.environ.get("ATRIUM_SCRIPT_SANDBOX", "bwrap").strip().lower()
if ATRIUM_SCRIPT_SANDBOX not in {"bwrap", "subprocess"}:
    raise ImproperlyConfigured("ATRIUM_SCRIPT_SANDBOX must be bwrap or subprocess.")

# Failed authentications (tokens, passwords, OAuth token requests) per client address before
# it gets 429, and the window they count in.
ATRIUM_AUTH_FAILURE_LIMIT = int(os.environ.get("ATRIUM_AUTH_FAILURE_LIMIT", "20"))
ATRIUM_AUTH_FAILURE_WINDOW = int(os.environ.get("ATRIUM_AUTH_FAILURE_WINDOW", "300"))
# Anonymous OAuth client registrations per client address per hour.
ATRIUM_REGISTRATIONS_PER_HOUR = int(os.environ.get("ATRIUM_REGISTRATIONS_PER_HOUR", "60"))
# Tool calls per token per minute; 0 turns the limit off.
ATRIUM_TOOL_CALLS_PER_MINUTE = int(os.environ.get("ATRIUM_TOOL_CALLS_PER_MINUTE", "600"))

# The vault's keys (Fernet, comma-separated; the first seals, all unseal). Without DEBUG a server
# with none refuses to start: credentials would otherwise be sealed under a key derived from
# SECRET_KEY, which rotating SECRET_KEY would silently lose. See docs/vault.md for rotation.
ATRIUM_VAULT_KEYS = env_list("ATRIUM_VAULT_KEYS")
if not ATRIUM_VAULT_KEYS:
    if not DEBUG:
        raise ImproperlyConfigured("ATRIUM_VAULT_KEYS must be set when DEBUG is off "
                                   "(python -c 'from cryptography.fernet import Fernet; "
                                   "print(Fernet.generate_key().decode())').")
    import base64 as _base64
    import hashlib as _hashlib

    ATRIUM_VAULT_KEYS = [_base64.urlsafe_b64encode(_hashlib.sha256(f"vault:{SECRET_KEY}".encode()).digest()).decode()]
# Hosts that http_tools and webhook_tools may send requests to (exact names, or *.example.com for
# its subdomains). Empty: none, so a fresh server reaches nothing on anyone's behalf.
ATRIUM_HTTP_ALLOWED_HOSTS = env_list("ATRIUM_HTTP_ALLOWED_HOSTS")
# The community collection: a directory, the URL of a collection-index.json (files beside it), or a
# git repository (git+https://… or a path ending .git). The starter collection ships in collection/.
ATRIUM_COLLECTION_SOURCE = os.environ.get("ATRIUM_COLLECTION_SOURCE", str(BASE_DIR / "collection"))
ATRIUM_COLLECTION_TTL_SECONDS = int(os.environ.get("ATRIUM_COLLECTION_TTL_SECONDS", "3600"))
# Elements one user may submit to the collection per hour (a resubmission while pending counts once).
ATRIUM_COLLECTION_SUBMISSIONS_PER_HOUR = int(os.environ.get("ATRIUM_COLLECTION_SUBMISSIONS_PER_HOUR", "10"))
ATRIUM_HTTP_TIMEOUT_SECONDS = float(os.environ.get("ATRIUM_HTTP_TIMEOUT_SECONDS", "20"))
# capabilities_execute calls per user per minute; 0 turns the limit off.
ATRIUM_CAPABILITY_EXECUTIONS_PER_MINUTE = int(os.environ.get("ATRIUM_CAPABILITY_EXECUTIONS_PER_MINUTE", "60"))
# permission_prompt evaluations per MCP session per minute (a client asks before each of its own
# tool calls); 0 turns the limit off.
ATRIUM_PERMISSION_PROMPTS_PER_MINUTE = int(os.environ.get("ATRIUM_PERMISSION_PROMPTS_PER_MINUTE", "120"))
# How long a connect URL from the vault stays usable.
ATRIUM_VAULT_CONNECT_MINUTES = int(os.environ.get("ATRIUM_VAULT_CONNECT_MINUTES", "30"))

# GitHub sign-in (the OAuth device flow): the web and API bases (a GitHub Enterprise Server, or a
# fake in tests), the OAuth app users sign in through unless they configure their own, and the
# scopes asked for.
ATRIUM_GITHUB_URL = os.environ.get("ATRIUM_GITHUB_URL", "https://github.com").rstrip("/")
ATRIUM_GITHUB_API_URL = os.environ.get("ATRIUM_GITHUB_API_URL", "https://api.github.com").rstrip("/")
ATRIUM_GITHUB_CLIENT_ID = os.environ.get("ATRIUM_GITHUB_CLIENT_ID", "").strip()
ATRIUM_GITHUB_SCOPES = os.environ.get("ATRIUM_GITHUB_SCOPES", "repo read:user").strip()
# Portfolio sync: a portfolio repository must be cloned over https, unless this allows a local
# path or file: URL (tests, or a server run on one's own machine). Auto-sync pushes this long after a change.
ATRIUM_PORTFOLIO_LOCAL_REMOTES = os.environ.get("ATRIUM_PORTFOLIO_LOCAL_REMOTES", "") == "1"
ATRIUM_PORTFOLIO_AUTO_SYNC_DELAY_SECONDS = int(os.environ.get("ATRIUM_PORTFOLIO_AUTO_SYNC_DELAY_SECONDS", "10"))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "corsheaders",
    "django_htmx",
    "django_ace",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "oauth2_provider",
    "allauth",
    "allauth.account",
    "mcp_server",
    "core",
    "accounts",
    "elements",
    "workflows",
    "runs",
    "docs_kb",
    "integrations",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.security.ContentSecurityPolicyMiddleware",
    # /mcp and /mcp/discrete are answered here, before the browser middlewares below.
    "core.http.McpRouteMiddleware",
    "corsheaders.middleware.CorsMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
]

# Browser-based MCP clients (the MCP Inspector) read the OAuth metadata, register and get tokens
# from their own origin. Those endpoints carry no cookies and no user data beyond what the request
# itself proves, so any origin may call them; /mcp keeps its own origin check (core.http).
CORS_URLS_REGEX = r"^/(\.well-known/oauth-[a-z-]+(/.*)?|oauth/(token|revoke|register)/.*)$"
CORS_ALLOW_ALL_ORIGINS = True
CORS_ALLOW_CREDENTIALS = False
CORS_ALLOW_HEADERS = ("accept", "authorization", "content-type", "mcp-protocol-version")
CORS_PREFLIGHT_MAX_AGE = 600

# The largest request body any endpoint reads (Django refuses a larger one); /mcp answers a
# JSON-RPC error for it. An element import of 4 MB, escaped into a JSON string, fits.
ATRIUM_MAX_REQUEST_BYTES = int(os.environ.get("ATRIUM_MAX_REQUEST_BYTES", str(10 * 1024 * 1024)))
DATA_UPLOAD_MAX_MEMORY_SIZE = ATRIUM_MAX_REQUEST_BYTES

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

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
                "config.context_processors.atrium",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'atrium.sqlite3'}"),
        # Connections outlive requests (each web thread keeps its own), checked before reuse, so a
        # request does not pay for opening one; CONN_MAX_AGE=0 closes each after its request.
        conn_max_age=int(os.environ.get("CONN_MAX_AGE", "600")),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web threads read while one writes; IMMEDIATE takes the write lock at
    # BEGIN so two writers queue on the busy timeout instead of failing mid-transaction.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
    # A file, not :memory:, so a server or worker started by a live test sees the test data;
    # one per test process, so two test runs never share one.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}

# A statement from a web request that runs longer than this is cancelled, so one slow query
# cannot hold a web thread (and its connection) indefinitely; 0 means no limit. Celery workers,
# which run long syncs and imports, set ATRIUM_WORKER_STATEMENT_TIMEOUT_MS on their connections
# instead (config/celery.py). A database that is down fails a request within
# ATRIUM_DATABASE_CONNECT_TIMEOUT seconds instead of hanging it.
ATRIUM_STATEMENT_TIMEOUT_MS = int(os.environ.get("ATRIUM_STATEMENT_TIMEOUT_MS", "15000"))
ATRIUM_WORKER_STATEMENT_TIMEOUT_MS = int(os.environ.get("ATRIUM_WORKER_STATEMENT_TIMEOUT_MS", "600000"))
ATRIUM_DATABASE_CONNECT_TIMEOUT = int(os.environ.get("ATRIUM_DATABASE_CONNECT_TIMEOUT", "3"))
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options.setdefault("connect_timeout", ATRIUM_DATABASE_CONNECT_TIMEOUT)
    _options["options"] = " ".join(filter(None, [_options.get("options", ""),
                                                 f"-c statement_timeout={ATRIUM_STATEMENT_TIMEOUT_MS}"]))

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool("DATABASE_POOL", True):
    # Every ASGI request runs in a fresh thread, so per-thread persistent connections are never
    # reused; a process-wide pool saves a connection handshake on every request.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": int(os.environ.get("DATABASE_POOL_MIN", "2")),
        "max_size": int(os.environ.get("DATABASE_POOL_MAX", "20")),
        # How long a request waits for a connection: a pool that cannot connect fails it here.
        "timeout": ATRIUM_DATABASE_CONNECT_TIMEOUT,
    }

CACHE_URL = os.environ.get("CACHE_URL", "")
if CACHE_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_USER_MODEL = "accounts.User"
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_SIGNUP_FIELDS = ["username*", "email", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_ADAPTER = "accounts.adapters.AccountAdapter"
ACCOUNT_LOGOUT_ON_GET = False

# Password-reset mail. Without EMAIL_HOST, mail is written to the log instead of sent.
if os.environ.get("EMAIL_HOST"):
    EMAIL_HOST = os.environ["EMAIL_HOST"]
    EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "587"))
    EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
    EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
    EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
else:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "atrium@localhost")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if not DEBUG:
    SESSION_COOKIE_SECURE = _public.scheme == "https"
    CSRF_COOKIE_SECURE = _public.scheme == "https"
if env_bool("ATRIUM_BEHIND_PROXY"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if _public.scheme == "https":
    # SecurityMiddleware sends the header only on requests that arrived over https (behind a
    # TLS-terminating proxy that needs ATRIUM_BEHIND_PROXY), so plain-http development is unaffected.
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS")
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD")

# Scripts only from our own files, so markup that slips into a page (a docs page, an element's
# text) cannot run. Inline styles stay allowed: admin and Swagger UI use them, and they cannot
# run code. No form-action: browsers apply it to the redirect after the consent form, which
# goes to each OAuth client's own callback.
# Check every tool answer against the tool's output schema (the test suite sets it; costs a
# schema validation per call).
ATRIUM_CHECK_TOOL_OUTPUT = os.environ.get("ATRIUM_CHECK_TOOL_OUTPUT", "") == "1"

ATRIUM_CONTENT_SECURITY_POLICY = os.environ.get("ATRIUM_CONTENT_SECURITY_POLICY", "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "frame-ancestors 'none'",
]))

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.BearerAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "accounts.api.exception_handler",
    # DRF throttles would read X-Forwarded-For from anyone; none is used, and any added must key
    # on accounts.ratelimit.client_address. Zero makes DRF's own reading ignore the header.
    "NUM_PROXIES": 0,
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Atrium API",
    "DESCRIPTION": "Atrium's REST API for integrations. Authenticate with `Authorization: Bearer <token>` "
    "using a personal access token (atr_...) or an OAuth access token.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

OAUTH2_PROVIDER = {
    "SCOPES_BACKEND_CLASS": "accounts.oauth.DatabaseScopes",
    "OAUTH2_VALIDATOR_CLASS": "accounts.oauth.OAuth2Validator",
    "PKCE_REQUIRED": True,
    "ALLOW_LOCALHOST_LOOPBACK": True,
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "ACCESS_TOKEN_EXPIRE_SECONDS": 8 * 3600,
    "REFRESH_TOKEN_EXPIRE_SECONDS": 30 * 24 * 3600,
    "DCR_ENABLED": True,
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
    "OIDC_ISS_ENDPOINT": ATRIUM_PUBLIC_URL,
    "OAUTH2_PROTECTED_RESOURCE_IDENTIFIER": ATRIUM_MCP_URL,
    "OAUTH2_PROTECTED_RESOURCE_AUTHORIZATION_SERVERS": [ATRIUM_PUBLIC_URL],
    "OAUTH2_PROTECTED_RESOURCE_NAME": "Atrium MCP",
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_basic", "client_secret_post"],
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "COMPLIANT_BCP_RFC9700_REFRESH_TOKEN": True,
    "COMPLIANT_BCP_RFC9700_REDIRECT_URI_SCHEME": True,
    "COMPLIANT_BCP_RFC9700_REDIRECT_URI_MATCHING": True,
    "COMPLIANT_BCP_RFC9700_PKCE_REQUIRED": True,
}

# django-mcp-server: sessions are Atrium's own (accounts.McpSession, in the database), so the
# package runs stateless and never touches django_session.
DJANGO_MCP_GLOBAL_SERVER_CONFIG = {
    "name": "Atrium",
    "instructions": "Atrium serves your team's personas, skills, templates, memories, agents, "
    "workflows and playbooks. Call auth_status to see who you are and which scopes your token has.",
    "stateless": True,
}
DJANGO_MCP_GET_SERVER_INSTRUCTIONS_TOOL = False

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
# Without a broker, tasks run in the calling process: `make run` needs no worker.
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE = {
    "purge-expired-credentials": {"task": "accounts.tasks.purge_expired", "schedule": 3600.0},
    "reap-scripts": {"task": "runs.tasks.scripts_reap", "schedule": 60.0},
    "reap-skill-executions": {"task": "integrations.tasks.executions_reap", "schedule": 60.0},
    "resend-model-steps": {"task": "runs.tasks.model_steps_resend", "schedule": 60.0},
    "refresh-collection": {"task": "elements.tasks.collection_refresh",
                           "schedule": float(os.environ.get("ATRIUM_COLLECTION_TTL_SECONDS", "3600"))},
    "fire-due-triggers": {"task": "workflows.tasks.triggers_fire_due",
                          "schedule": float(os.environ.get("ATRIUM_TRIGGER_TICK_SECONDS", "30"))},
}
# The queue tasks are sent to and workers read when started without -Q.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "celery")

# Playbook triggers: how many executions one event trigger starts per minute (more are recorded
# `skipped`; 0 turns the cap off), the largest inbound webhook body, and how far a webhook's
# X-Atrium-Timestamp may be from the server's clock.
ATRIUM_TRIGGER_EVENT_FIRINGS_PER_MINUTE = int(os.environ.get("ATRIUM_TRIGGER_EVENT_FIRINGS_PER_MINUTE", "30"))
ATRIUM_WEBHOOK_MAX_BYTES = int(os.environ.get("ATRIUM_WEBHOOK_MAX_BYTES", "262144"))
ATRIUM_WEBHOOK_TOLERANCE_SECONDS = int(os.environ.get("ATRIUM_WEBHOOK_TOLERANCE_SECONDS", "300"))

# What one trigger-started playbook execution may spend on model answers unless its playbook says.
ATRIUM_PLAYBOOK_SPENDING_CAP_USD = os.environ.get("ATRIUM_PLAYBOOK_SPENDING_CAP_USD", "1.00")

# Script nodes: how long a web request waits for a script before answering with the run
# `running` (a worker, or a thread without a broker, carries it on); how many of one user's
# scripts run at once (the rest wait their turn); and how long past its timeout a script's worker
# may stay silent before its node fails as `worker_lost`.
ATRIUM_SCRIPT_WAIT_SECONDS = float(os.environ.get("ATRIUM_SCRIPT_WAIT_SECONDS", "10"))
ATRIUM_SCRIPT_CONCURRENCY_PER_USER = int(os.environ.get("ATRIUM_SCRIPT_CONCURRENCY_PER_USER", "4"))
ATRIUM_SCRIPT_LEASE_GRACE_SECONDS = float(os.environ.get("ATRIUM_SCRIPT_LEASE_GRACE_SECONDS", "60"))
# How many of one user's executable skills run at once; past it capabilities_execute answers
# rate_limited. 0 turns the limit off.
ATRIUM_SKILL_CONCURRENCY_PER_USER = int(os.environ.get("ATRIUM_SKILL_CONCURRENCY_PER_USER", "4"))

# The model backend: an OpenAI-compatible chat completions API (POST {URL}/chat/completions) that
# answers the ai_agent and ai_judge steps of runs started by triggers, which have no host present
# (runs.answerers). Unset URL: no backend, and those steps wait for a host. The key is sent as a
# bearer token and is never stored on a run.
ATRIUM_MODEL_BACKEND_URL = os.environ.get("ATRIUM_MODEL_BACKEND_URL", "").strip().rstrip("/")
ATRIUM_MODEL_BACKEND_MODEL = os.environ.get("ATRIUM_MODEL_BACKEND_MODEL", "").strip()
ATRIUM_MODEL_BACKEND_KEY = os.environ.get("ATRIUM_MODEL_BACKEND_KEY", "")
ATRIUM_MODEL_BACKEND_TIMEOUT_SECONDS = float(os.environ.get("ATRIUM_MODEL_BACKEND_TIMEOUT_SECONDS", "60"))
# What one playbook execution may spend when its playbook sets no cap of its own (dollars).
ATRIUM_PLAYBOOK_SPENDING_CAP_USD = os.environ.get("ATRIUM_PLAYBOOK_SPENDING_CAP_USD", "1.00").strip()

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["stderr"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        # The MCP SDK logs every request at INFO; keep it for debugging only.
        "mcp": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
    },
}
