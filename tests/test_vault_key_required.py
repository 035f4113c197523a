"""A server without DEBUG refuses to start without vault keys; with DEBUG it derives one."""

import subprocess
import sys

from tests.live.conftest import BASE_DIR, child_env

CHECK = ["manage.py", "check"]


def run(**env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in child_env(**env).items() if k != "ATRIUM_VAULT_KEYS" or v}
    return subprocess.run([sys.executable, *CHECK], cwd=BASE_DIR, env=environment, capture_output=True, text=True,
                          timeout=120)


def test_without_debug_a_missing_vault_key_refuses_to_start():
    refused = run(ATRIUM_VAULT_KEYS="", DEBUG="0")
    assert refused.returncode != 0
    assert "ATRIUM_VAULT_KEYS must be set when DEBUG is off" in refused.stderr


def test_with_debug_a_key_is_derived_and_the_server_starts():
    assert run(ATRIUM_VAULT_KEYS="", DEBUG="1").returncode == 0
