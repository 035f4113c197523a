"""The official MCP SDK client of the current major version (mcp 2.x) against a live server, in
each connect mode: auto (server/discover, which Atrium answers: 2026-07-28), legacy (initialize)
and the modern version pinned; over HTTP (ending with auth_logout) and over stdio."""

import os
import subprocess
import sys

import pytest

from accounts.models import McpSession, PersonalToken
from elements.models import Element
from tests.conftest import make_member
from tests.live.conftest import BASE_DIR, child_env
from tests.live.sdk_current import walk

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

MODES = {"auto": "2026-07-28", "2026-07-28": "2026-07-28", "legacy": "2025-11-25"}


def assert_walked(seen: dict, mode: str) -> None:
    assert seen["protocol_version"] == MODES[mode]
    assert {"auth_status", "auth_logout", "mcp_aql_read", "create_workflow", "capabilities_search"} \
        <= set(seen["tools"])
    status = seen["auth_status"]
    assert status["is_error"] is False and status["structured"] == status["text"]
    assert status["structured"]["user"]["username"] == "alice"
    assert seen["list_personas"]["is_error"] is False
    assert seen["list_personas"]["structured"]["success"] is True
    created = seen["create_persona"]
    assert created["is_error"] is False and created["structured"]["success"] is True, created


@pytest.mark.parametrize("mode", MODES)
def test_the_current_sdk_walks_atrium_over_http_and_logs_out(live_atrium, sdk_python, mode):
    alice = make_member("alice")

    seen = walk(sdk_python, "http", live_atrium.mcp_url, alice.token, mode)

    assert_walked(seen, mode)
    session = seen["auth_status"]["structured"]["session"]
    assert session["protocol_version"] == MODES[mode]
    logout = seen["auth_logout"]
    assert logout["is_error"] is False, logout
    assert logout["structured"]["logged_out"] is True and logout["structured"]["revoked"] == "personal"
    assert "mcp_error" in seen["after_logout"] or seen["after_logout"].get("is_error"), seen["after_logout"]
    assert PersonalToken.objects.get(user=alice.user).revoked_at is not None
    assert Element.objects.filter(owner=alice.user, name="SDK walker").exists()
    if MODES[mode] == "2026-07-28":  # both clients' calls shared the token's standing session: logout closed it
        assert McpSession.objects.get(pk=session["id"]).closed_at is not None


@pytest.mark.parametrize("mode", MODES)
def test_the_current_sdk_walks_atrium_over_stdio(db, sdk_python, mode):
    make_member("alice")
    command = [sys.executable, str(BASE_DIR / "manage.py"), "mcp_stdio", "--user", "alice"]

    seen = walk(sdk_python, "stdio", mode, "--", *command, env=child_env())

    assert_walked(seen, mode)
    assert seen["auth_status"]["structured"]["token"]["kind"] == "stdio"
    session = McpSession.objects.get(user__username="alice")
    assert session.transport == "stdio" and session.closed_at is not None
    assert session.protocol_version == MODES[mode]


def test_the_docs_python_example_runs_as_written(live_atrium, sdk_python, tmp_path):
    alice = make_member("alice")
    page = (BASE_DIR / "docs" / "connecting-clients.md").read_text()
    example = page.split("This example uses the official Python SDK", 1)[1].split("```python\n", 1)[1]
    example = example.split("```", 1)[0]
    assert 'URL = "http://127.0.0.1:8000/mcp"' in example
    script = tmp_path / "example.py"
    script.write_text(example.replace("http://127.0.0.1:8000/mcp", live_atrium.mcp_url))

    done = subprocess.run([str(sdk_python), str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ATRIUM_TOKEN": alice.token})

    assert done.returncode == 0, done.stderr[-3000:]
    version, tools, status = done.stdout.strip().splitlines()
    assert version == "2026-07-28"
    assert "'auth_status'" in tools and "'mcp_aql_read'" in tools
    assert "'username': 'alice'" in status
