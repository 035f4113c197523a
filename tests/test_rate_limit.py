"""Repeated failed authentications from one address are slowed down before any token lookup."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

pytestmark = pytest.mark.django_db


def test_an_address_that_keeps_failing_gets_429(alice, mcp_client, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 3
    guesser = mcp_client("atr_guess")

    assert [guesser.post("initialize", {}).status_code for _ in range(3)] == [401, 401, 401]
    blocked = guesser.post("initialize", {})

    assert blocked.status_code == 429
    assert 0 < int(blocked["Retry-After"]) <= settings.ATRIUM_AUTH_FAILURE_WINDOW


def test_a_blocked_address_is_refused_without_a_token_lookup(alice, mcp_client, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 1
    mcp_client("atr_guess").post("initialize", {})

    with CaptureQueriesContext(connection) as queries:
        response = mcp_client(alice).post("initialize", {})

    assert response.status_code == 429
    assert not [q for q in queries.captured_queries if "personaltoken" in q["sql"]]


def test_successful_calls_do_not_count(alice, mcp_client, settings):
    settings.ATRIUM_AUTH_FAILURE_LIMIT = 2
    client = mcp_client(alice)

    for _ in range(5):
        client.initialize()
    assert mcp_client("atr_guess").post("initialize", {}).status_code == 401
