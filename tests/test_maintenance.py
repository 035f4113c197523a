"""Expired credentials and sessions are cleaned up by a periodic task."""

import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from accounts.models import McpSession, RedeemedCode
from accounts.services import expired_purge
from accounts.tasks import purge_expired

pytestmark = pytest.mark.django_db


def test_it_purges_idle_and_long_closed_sessions_only(alice):
    now = timezone.now()
    McpSession.objects.create(id="idle", user=alice.user, transport="http", last_seen_at=now - timedelta(days=30))
    McpSession.objects.create(id="closed", user=alice.user, transport="http", closed_at=now - timedelta(days=2))
    McpSession.objects.create(id="live", user=alice.user, transport="http")

    assert expired_purge() == {"sessions": 2, "toolCalls": 0}
    assert list(McpSession.objects.values_list("id", flat=True)) == ["live"]


def test_it_forgets_redeemed_codes_once_their_refresh_tokens_have_expired(db):
    now = timezone.now()
    lifetime = timedelta(seconds=settings.OAUTH2_PROVIDER["REFRESH_TOKEN_EXPIRE_SECONDS"])
    for digest, age in [("old", lifetime + timedelta(hours=1)), ("recent", lifetime - timedelta(hours=1))]:
        RedeemedCode.objects.create(digest=digest, client_id="c", token_family=uuid.uuid4(), redeemed_at=now - age)

    expired_purge()

    assert list(RedeemedCode.objects.values_list("digest", flat=True)) == ["recent"]


def test_without_a_broker_tasks_run_in_process(alice):
    McpSession.objects.create(id="idle", user=alice.user, transport="http",
                              last_seen_at=timezone.now() - timedelta(days=30))

    assert purge_expired.delay().get() == {"sessions": 1, "toolCalls": 0}
    assert not McpSession.objects.exists()
