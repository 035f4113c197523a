"""Who a token is stays known to a process for at most a second (accounts.authentication)."""

import pytest
from django.utils import timezone

from accounts import authentication
from accounts.models import PersonalToken
from accounts.services import token_revoke
from core.caller import Caller
from core.process_cache import ProcessCache

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(authentication, "_authenticated",
                        ProcessCache(authentication.AUTH_CACHE_SECONDS, timer=clock))
    return clock


def status(mcp_client, alice):
    client = mcp_client(alice)
    client.session_id = None
    return client.post("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                      "clientInfo": {"name": "t", "version": "1"}}).status_code


def test_a_token_changed_behind_the_servers_back_is_refused_after_the_cache_second(alice, mcp_client, clock):
    assert status(mcp_client, alice) == 200
    PersonalToken.objects.filter(user=alice.user).update(revoked_at=timezone.now())  # no signal: another process

    assert status(mcp_client, alice) == 200  # still known to this process
    clock.now += authentication.AUTH_CACHE_SECONDS + 0.01
    assert status(mcp_client, alice) == 401


def test_a_token_revoked_in_this_process_is_refused_at_once(alice, mcp_client, clock):
    assert status(mcp_client, alice) == 200

    token_revoke(caller=Caller.trusted(alice.user, via="web"), token=PersonalToken.objects.get(user=alice.user))

    assert status(mcp_client, alice) == 401


def test_a_deactivated_user_is_refused_at_once(alice, mcp_client, clock):
    assert status(mcp_client, alice) == 200

    alice.user.is_active = False
    alice.user.save()

    assert status(mcp_client, alice) == 401
