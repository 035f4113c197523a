"""A real Celery worker on a real broker (Redis in CI, in both of its passes) runs Atrium's tasks."""

import subprocess
import sys
import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import McpSession
from accounts.tasks import purge_expired
from tests.conftest import make_member
from tests.live.conftest import BASE_DIR, child_env

pytestmark = [
    pytest.mark.live,
    pytest.mark.uses_broker,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_a_worker_purges_expired_sessions(tmp_path, broker_url):
    alice = make_member("alice")
    stale = McpSession.objects.create(id="stale", user=alice.user, transport="http",
                                      last_seen_at=timezone.now() - timedelta(days=60))
    fresh = McpSession.objects.create(id="fresh", user=alice.user, transport="http")
    queue = f"test-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker.log"

    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo", "-Q", queue,
             "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
            cwd=BASE_DIR, env=child_env(CELERY_BROKER_URL=broker_url), stdout=out, stderr=out,
        )
    try:
        purge_expired.apply_async(queue=queue)
        deadline = time.monotonic() + 60
        while McpSession.objects.filter(pk=stale.pk).exists():
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"the worker did not run the task:\n{log.read_text()}"
            time.sleep(0.25)
    finally:
        worker.terminate()
        worker.wait(timeout=20)

    assert McpSession.objects.filter(pk=fresh.pk).exists()
    assert "accounts.tasks.purge_expired" in log.read_text()
