"""GitHub sign-in by the device flow, against a fake GitHub on loopback: setup answers the code at
once, the polls store the token sealed, and no answer, log line or audit row ever carries it."""

import json
import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts import github, tasks
from accounts.models import AuditEvent, GitHubAuth
from integrations.crypto import unseal
from tests.conftest import in_threads
from tests.fakes import GITHUB_CLIENT_ID, GITHUB_DEVICE_CODE, GITHUB_TOKEN, FakeGitHub

CREATE, READ, DELETE = "mcp_aql_create", "mcp_aql_read", "mcp_aql_delete"


@pytest.fixture
def fake_github(settings, fake_server) -> FakeGitHub:
    settings.ATRIUM_GITHUB_URL = fake_server.url
    settings.ATRIUM_GITHUB_API_URL = fake_server.url
    settings.ATRIUM_GITHUB_CLIENT_ID = GITHUB_CLIENT_ID
    settings.ATRIUM_HTTP_TIMEOUT_SECONDS = 5
    return FakeGitHub(fake_server)


def secrets_absent(*answers) -> bool:
    text = json.dumps(answers, default=str)
    return GITHUB_TOKEN not in text and GITHUB_DEVICE_CODE not in text


def confirmed(p):
    """A session whose user has agreed to the sign-in operations (CREATE asks once per session)."""
    for op in ("setup_github_auth", "configure_oauth"):
        assert p.call("mcp_aql_execute", "confirm_operation", operation=op)["success"]
    return p


def poll_now(user) -> GitHubAuth:
    """The next poll, as if its interval had passed."""
    GitHubAuth.objects.filter(user=user).update(last_polled_at=timezone.now() - timedelta(hours=1))
    return github.github_auth_poll(user=user)


@pytest.mark.django_db
def test_setup_answers_the_code_at_once_and_a_grant_after_pending_and_slow_down_connects(
        alice, portfolio, fake_github, caplog):
    caplog.set_level(logging.DEBUG)
    fake_github.interval = 1
    fake_github.script("authorization_pending", "slow_down", "granted")
    p = portfolio(alice)

    started = p.ok(CREATE, "setup_github_auth")

    assert started["state"] == "pending" and started["userCode"] == "WDJB-MJHT"
    assert started["verificationUri"] == "https://github.com/login/device" and started["expiresAt"]
    assert fake_github.token_requests == []  # the first poll waits its interval
    assert github.github_auth_poll(user=alice.user).state == "pending"
    assert poll_now(alice.user).state == "pending"
    slowed = poll_now(alice.user)
    assert slowed.state == "pending" and slowed.interval == 1 + github.SLOW_DOWN_SECONDS
    assert github.github_auth_poll(user=alice.user).state == "pending"  # not due yet: GitHub is not asked
    assert len(fake_github.token_requests) == 2
    assert poll_now(alice.user).state == "connected"
    checked = p.ok(READ, "check_github_auth")
    helper = p.ok(READ, "oauth_helper_status", verbose=True)

    assert checked["authenticated"] is True and checked["username"] == "octo-alice"
    assert checked["scopes"] == ["repo", "read:user"] and checked["state"] == "connected"
    assert "pending" not in checked
    assert helper["polls"] == 3 and helper["running"] is False and helper["clientIdSource"] == "server"
    assert fake_github.token_requests[0] == {"client_id": [GITHUB_CLIENT_ID], "device_code": [GITHUB_DEVICE_CODE],
                                             "grant_type": [github.DEVICE_GRANT]}
    row = GitHubAuth.objects.get(user=alice.user)
    assert row.login == "octo-alice" and row.connected_at and row.sealed_device_code == ""
    assert GITHUB_TOKEN not in row.sealed_token and unseal(row.sealed_token) == GITHUB_TOKEN
    assert github.github_token_for(alice.user) == GITHUB_TOKEN
    details = list(AuditEvent.objects.filter(action__startswith="github_auth").values("action", "detail"))
    assert [d["action"] for d in details] == ["github_auth.connected", "github_auth.start"]
    assert secrets_absent(started, checked, helper, details, caplog.text)


@pytest.mark.django_db
def test_with_tasks_run_eagerly_check_github_auth_makes_the_poll_that_is_due(alice, portfolio, fake_github):
    p = portfolio(alice)
    p.ok(CREATE, "setup_github_auth")

    checked = p.ok(READ, "check_github_auth")

    assert checked["authenticated"] is True and checked["username"] == "octo-alice"
    assert secrets_absent(checked)


@pytest.mark.django_db
def test_a_denied_sign_in_is_recorded_and_setup_then_starts_again(alice, portfolio, fake_github):
    fake_github.script("access_denied")
    p = portfolio(alice)
    p.ok(CREATE, "setup_github_auth")

    checked = p.ok(READ, "check_github_auth")
    again = p.ok(CREATE, "setup_github_auth")

    assert checked["state"] == "denied" and checked["authenticated"] is False
    assert "denied" in checked["error"]
    assert again["state"] == "pending" and fake_github.device_code_requests == 2


@pytest.mark.django_db
def test_a_code_github_says_expired_ends_the_flow_as_expired(alice, portfolio, fake_github):
    fake_github.script("expired_token")
    p = portfolio(alice)
    p.ok(CREATE, "setup_github_auth")

    checked = p.ok(READ, "check_github_auth")

    assert checked["state"] == "expired" and "setup_github_auth" in checked["error"]
    assert GitHubAuth.objects.get(user=alice.user).sealed_device_code == ""


@pytest.mark.django_db
def test_a_code_past_its_expiry_expires_without_asking_github_and_setup_restarts_it(alice, portfolio, fake_github):
    p = portfolio(alice)
    p.ok(CREATE, "setup_github_auth")
    GitHubAuth.objects.filter(user=alice.user).update(expires_at=timezone.now() - timedelta(seconds=1))

    checked = p.ok(READ, "check_github_auth")
    restarted = p.ok(CREATE, "setup_github_auth")

    assert checked["state"] == "expired" and fake_github.token_requests == []
    assert restarted["state"] == "pending" and fake_github.device_code_requests == 2


@pytest.mark.django_db
def test_setup_again_while_pending_answers_the_same_code(alice, portfolio, fake_github):
    fake_github.interval = 60
    p = portfolio(alice)

    first = p.ok(CREATE, "setup_github_auth")
    second = p.ok(CREATE, "setup_github_auth")

    assert (second["userCode"], second["expiresAt"]) == (first["userCode"], first["expiresAt"])
    assert fake_github.device_code_requests == 1
    assert p.ok(READ, "check_github_auth")["pending"] == {"userCode": "WDJB-MJHT",
                                                          "verificationUri": "https://github.com/login/device",
                                                          "expiresAt": first["expiresAt"]}


@pytest.mark.django_db
def test_setup_without_any_client_id_says_how_to_configure_one(alice, portfolio, fake_github, settings):
    settings.ATRIUM_GITHUB_CLIENT_ID = ""

    error = confirmed(portfolio(alice)).fails(CREATE, "setup_github_auth")

    assert "configure_oauth" in error and "ATRIUM_GITHUB_CLIENT_ID" in error
    assert fake_github.device_code_requests == 0


@pytest.mark.django_db
def test_configure_oauth_validates_and_setup_then_signs_in_through_the_users_app(
        alice, portfolio, fake_github, settings):
    settings.ATRIUM_GITHUB_CLIENT_ID = ""
    p = confirmed(portfolio(alice))

    for bad in ("not a client id", "Iv1.xyz", "x" * 200, "Ov23"):
        assert "client_id must be" in p.fails(CREATE, "configure_oauth", client_id=bad)
    assert p.ok(CREATE, "configure_oauth") == {"clientId": None, "source": "none"}
    configured = p.ok(CREATE, "configure_oauth", client_id="Iv1.0123456789abcdef")
    p.ok(CREATE, "setup_github_auth")
    helper = p.ok(READ, "oauth_helper_status", verbose=True)

    assert configured["clientId"] == "Iv1.0123456789abcdef" and configured["source"] == "user"
    assert fake_github.server.received[0].body.decode().startswith("client_id=Iv1.0123456789abcdef")
    assert helper["clientIdSource"] == "user" and helper["endpoints"]["user"] == f"{fake_github.url}/user"
    assert GitHubAuth.objects.get(user=alice.user).client_id == "Iv1.0123456789abcdef"


@pytest.mark.django_db
def test_github_refusing_the_client_id_or_being_down_answers_a_clear_error(alice, portfolio, fake_github, settings):
    p = confirmed(portfolio(alice))
    p.ok(CREATE, "configure_oauth", client_id="Iv1.0000000000000bad")

    refused = p.fails(CREATE, "setup_github_auth")
    settings.ATRIUM_GITHUB_URL = "http://127.0.0.1:9"
    unreachable = p.fails(CREATE, "setup_github_auth")

    assert "unauthorized_client" in refused and "device flow enabled" in refused
    assert unreachable.startswith("GitHub could not be reached") and "Traceback" not in unreachable
    assert GitHubAuth.objects.get(user=alice.user).state == "none"


@pytest.mark.django_db
def test_github_down_during_a_poll_is_kept_as_the_last_error_and_polling_goes_on(alice, portfolio, fake_github,
                                                                                   settings):
    p = portfolio(alice)
    p.ok(CREATE, "setup_github_auth")
    settings.ATRIUM_GITHUB_URL = "http://127.0.0.1:9"

    helper = p.ok(READ, "oauth_helper_status")

    assert helper["state"] == "pending" and helper["lastError"].startswith("GitHub could not be reached")
    assert helper["polls"] == 1 and helper["nextPollAt"]


@pytest.mark.django_db
def test_clear_github_auth_forgets_the_token_and_says_whether_there_was_one(alice, portfolio, fake_github):
    p = portfolio(alice)
    p.ok(CREATE, "configure_oauth", client_id=GITHUB_CLIENT_ID)
    p.ok(CREATE, "setup_github_auth")
    p.ok(READ, "check_github_auth")

    assert "confirmation" in p.call(DELETE, "clear_github_auth")
    cleared = p.ok(DELETE, "clear_github_auth")
    again = p.ok(DELETE, "clear_github_auth")

    assert cleared["cleared"] is True and again["cleared"] is False
    assert p.ok(READ, "check_github_auth") == {"authenticated": False, "username": None, "scopes": [],
                                               "state": "none"}
    row = GitHubAuth.objects.get(user=alice.user)
    assert (row.sealed_token, row.login, row.client_id) == ("", "", GITHUB_CLIENT_ID)
    assert github.github_token_for(alice.user) is None


@pytest.mark.django_db
def test_charlie_never_sees_alices_sign_in(alice, charlie, portfolio, fake_github):
    portfolio(alice).ok(CREATE, "setup_github_auth")
    assert portfolio(alice).ok(READ, "check_github_auth")["authenticated"] is True
    c = portfolio(charlie)

    checked = c.ok(READ, "check_github_auth")
    helper = c.ok(READ, "oauth_helper_status", verbose=True)
    cleared = c.ok(DELETE, "clear_github_auth")

    assert checked == {"authenticated": False, "username": None, "scopes": [], "state": "none"}
    assert helper["polls"] == 0 and cleared["cleared"] is False
    assert github.github_token_for(charlie.user) is None
    assert GitHubAuth.objects.get(user=alice.user).state == "connected"


def test_with_a_broker_each_poll_is_sent_with_the_interval_as_countdown(monkeypatch):
    from config.celery import app

    sent = []
    monkeypatch.setitem(app.conf, "task_always_eager", False)
    monkeypatch.setattr(tasks.github_auth_poll_task, "apply_async", lambda **kw: sent.append(kw))

    tasks.github_auth_poll_schedule(7, 5)
    monkeypatch.setitem(app.conf, "task_always_eager", True)
    tasks.github_auth_poll_schedule(7, 5)

    assert sent == [{"args": (7,), "countdown": 5}]


@pytest.mark.django_db
def test_the_poll_task_polls_once_and_schedules_the_next_while_pending(alice, fake_github, monkeypatch):
    from core.caller import Caller

    scheduled = []
    monkeypatch.setattr(tasks, "github_auth_poll_schedule", lambda user_id, countdown: scheduled.append(countdown))
    fake_github.interval = 5
    fake_github.script("authorization_pending", "granted")
    github.github_auth_start(caller=Caller.trusted(alice.user, via="mcp"))
    GitHubAuth.objects.filter(user=alice.user).update(started_at=timezone.now() - timedelta(seconds=5))

    assert tasks.github_auth_poll_task(alice.user.pk) == "pending"
    assert scheduled == [5]
    GitHubAuth.objects.filter(user=alice.user).update(last_polled_at=timezone.now() - timedelta(seconds=5))
    assert tasks.github_auth_poll_task(alice.user.pk) == "connected"
    assert scheduled == [5]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_twenty_concurrent_setups_make_one_device_code_request_and_one_pending_row(alice, fake_github):
    import elements.operations  # noqa: F401  (fills the route table)
    from core.caller import Caller
    from elements import services
    from elements.mcpaql import Endpoint, run

    fake_github.interval = 60
    caller = Caller.trusted(alice.user, via="mcp")
    services.settings_set(caller=caller, values={"gatekeeper.auto_confirm": True})

    answers = in_threads(lambda _: run(Endpoint.CREATE, {"operation": "setup_github_auth", "params": {}}, caller))

    assert [a["success"] for a in answers] == [True] * len(answers), answers
    assert {a["data"]["userCode"] for a in answers} == {"WDJB-MJHT"}
    assert fake_github.device_code_requests == 1
    assert list(GitHubAuth.objects.values_list("user", "state")) == [(alice.user.pk, "pending")]
