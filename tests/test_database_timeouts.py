"""On PostgreSQL every statement carries a timeout (longer for workers), and connecting to a database
that is down, directly or through the pool, gives up within 3 seconds."""

import importlib.util
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
POSTGRES = "postgres://atrium@127.0.0.1:5432/atrium"


def load_settings(monkeypatch, **env: str):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("settings_under_test", BASE_DIR / "config" / "settings.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "settings_under_test", module)
    spec.loader.exec_module(module)
    return module


def test_postgresql_statements_carry_a_timeout_and_connecting_gives_up_within_3_seconds(monkeypatch):
    settings = load_settings(monkeypatch, DATABASE_URL=POSTGRES,
                             SECRET_KEY="test-only-not-secret")
    worker = load_settings(monkeypatch, DATABASE_URL=POSTGRES,
                           SECRET_KEY="test-only-not-secret", ATRIUM_STATEMENT_TIMEOUT_MS="600000")

    options = settings.DATABASES["default"]["OPTIONS"]
    assert options["options"] == "-c statement_timeout=15000"
    assert options["connect_timeout"] == 3
    assert options["pool"]["timeout"] == 3
    assert worker.DATABASES["default"]["OPTIONS"]["options"] == "-c statement_timeout=600000"
