"""GitHub sign-in through the official SDK client against a live server pointed at a fake GitHub:
configure, setup, the user grants it, the poll that is due, check and clear; and a real worker
running the poll task."""

import asyncio
import json
import subprocess
import sys
import time
import uuid

import pytest

from accounts import github
from accounts.models import GitHubAuth
from accounts.tasks import github_auth_poll_task
from core.caller import Caller
from tests.conftest import make_member
from tests.fakes import GITHUB_CLIENT_ID, GITHUB_DEVICE_CODE, GITHUB_TOKEN, FakeGitHub
from tests.live.conftest import BASE_DIR, child_env, sdk_session, serve
from tests.live.test_live_elements import CREATE, READ, Session

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

DELETE = "mcp_aql_delete"
GITHUB_OPERATIONS = {"setup_github_auth", "check_github_auth", "clear_github_auth", "configure_oauth",
                     "oauth_helper_status"}


async def sign_in(mcp_url: str, token: str, fake: FakeGitHub) -> dict:
    async with sdk_session(mcp_url, token) as client:
        s = Session(client)
        configured = await s.ok(CREATE, "configure_oauth", client_id=GITHUB_CLIENT_ID)
        fake.script("authorization_pending", "granted")
        started = await s.ok(CREATE, "setup_github_auth")
        waiting = await s.ok(READ, "check_github_auth")
        checked = await s.ok(READ, "check_github_auth")
        helper = await s.ok(READ, "oauth_helper_status", verbose=True)
        cleared = await s.ok(DELETE, "clear_github_auth")
        return {"seen": s.seen, "configured": configured, "started": started, "waiting": waiting,
                "checked": checked, "helper": helper, "cleared": cleared}


def test_the_sdk_client_signs_in_to_a_fake_github_and_never_sees_the_token(tmp_path, fake_server):
    fake = FakeGitHub(fake_server)
    alice = make_member("alice")

    with serve(tmp_path, CELERY_BROKER_URL="", ATRIUM_GITHUB_URL=fake.url, ATRIUM_GITHUB_API_URL=fake.url,
               ATRIUM_GITHUB_CLIENT_ID="") as server:
        run = asyncio.run(sign_in(server.mcp_url, alice.token, fake))
        log = server.log.read_text()

    assert set(run["seen"]) >= GITHUB_OPERATIONS
    assert run["configured"]["source"] == "user"
    assert run["started"]["userCode"] == "WDJB-MJHT" and run["started"]["state"] == "pending"
    assert run["waiting"]["state"] == "pending" and run["waiting"]["pending"]["userCode"] == "WDJB-MJHT"
    assert run["checked"]["authenticated"] is True and run["checked"]["username"] == "octo-alice"
    assert run["helper"]["polls"] == 2 and run["helper"]["clientIdSource"] == "user"
    assert run["cleared"]["cleared"] is True
    text = json.dumps(run) + log
    assert GITHUB_TOKEN not in text and GITHUB_DEVICE_CODE not in text
    assert [r.path for r in fake.server.received] == ["/login/device/code", "/login/oauth/access_token",
                                                      "/login/oauth/access_token", "/user"]
    assert GitHubAuth.objects.get(user=alice.user).state == "none"


@pytest.mark.uses_broker
def test_a_worker_runs_the_poll_task_and_stores_the_grant(tmp_path, fake_server, broker_url, settings, monkeypatch):
    fake = FakeGitHub(fake_server)
    settings.ATRIUM_GITHUB_URL = settings.ATRIUM_GITHUB_API_URL = fake.url
    settings.ATRIUM_GITHUB_CLIENT_ID = GITHUB_CLIENT_ID
    # This test sends the first poll itself, to a queue of its own.
    monkeypatch.setattr("accounts.github._poll_schedule", lambda user_id, countdown: None)
    alice = make_member("alice")
    github.github_auth_start(caller=Caller.trusted(alice.user, via="mcp"))
    queue = f"test-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker.log"

    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo", "-Q", queue,
             "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
            cwd=BASE_DIR, env=child_env(CELERY_BROKER_URL=broker_url, ATRIUM_GITHUB_URL=fake.url,
                                        ATRIUM_GITHUB_API_URL=fake.url), stdout=out, stderr=out,
        )
    try:
        github_auth_poll_task.apply_async(args=(alice.user.pk,), queue=queue)
        deadline = time.monotonic() + 60
        while GitHubAuth.objects.get(user=alice.user).state == "pending":
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"the worker did not run the task:\n{log.read_text()}"
            time.sleep(0.25)
    finally:
        worker.terminate()
        worker.wait(timeout=20)

    assert github.github_token_for(alice.user) == GITHUB_TOKEN
    assert GitHubAuth.objects.get(user=alice.user).login == "octo-alice"
    assert GITHUB_TOKEN not in log.read_text()
