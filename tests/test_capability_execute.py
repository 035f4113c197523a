"""capabilities_execute through /mcp: the action-first rule, the skill fallback and its
no-fallback-on-error rule, input validation, missing connections, scopes, isolation, the rate limit
and the execution record."""

import json

import pytest

from accounts.models import AuditEvent
from integrations import search
from integrations.executors import EXECUTORS, ActionCall, ActionFailed, executor
from integrations.models import Action, Connection, ConnectRequest, Execution, Integration, Skill
from tests.conftest import make_member

CALLS: list[dict] = []


def _echo(call: ActionCall) -> dict:
    CALLS.append({"action": call.action.full_name, "input": call.input, "credentials": call.credentials})
    return {"echo": call.input.get("text"), "token": bool(call.credentials.get("token"))}


def _fail(call: ActionCall) -> dict:
    CALLS.append({"action": call.action.full_name})
    raise ActionFailed("The service said no.", code="http_error", status=403, details={"message": "Forbidden"})


for _name, _fn in (("test.echo", _echo), ("test.fail", _fail)):
    if _name not in EXECUTORS:
        executor(_name)(_fn)

TEXT_INPUT = {"type": "object", "required": ["text"], "additionalProperties": False,
              "properties": {"text": {"type": "string", "maxLength": 20}}}
SKILL_SOURCE = "def run(input, atrium):\n    return {'ran': 'skill', 'got': input}\n"


@pytest.fixture(autouse=True)
def _calls():
    CALLS.clear()
    yield
    CALLS.clear()


@pytest.fixture
def catalogue(db):
    open_tools = Integration.objects.create(id="open_tools", name="Open", connection_required=False)
    keyed = Integration.objects.create(id="keyed_tools", name="Keyed", auth_scheme="bearer")
    Action.objects.create(integration=open_tools, name="echo", executor="test.echo", input_schema=TEXT_INPUT)
    Action.objects.create(integration=open_tools, name="fail", executor="test.fail")
    Action.objects.create(integration=keyed, name="echo", executor="test.echo", input_schema=TEXT_INPUT)
    # Skills of the same full names as actions: never run while the action exists.
    Skill.objects.create(name="open_tools.echo", source_code=SKILL_SOURCE)
    Skill.objects.create(name="open_tools.fail", source_code=SKILL_SOURCE)
    Skill.objects.create(name="open_tools.only_skill", source_code=SKILL_SOURCE)
    search.index_refresh(integrations=[open_tools, keyed], skills=Skill.objects.all())
    return {"open": open_tools, "keyed": keyed}


def connect(member, integration, token="tok-secret-1234"):
    from integrations.crypto import seal

    return Connection.objects.create(user=member.user, integration=integration,
                                     sealed_credentials=seal({"token": token}))


def execute(client, name, input=None):
    result = client.call("capabilities_execute", {"name": name, **({"input": input} if input is not None else {})})
    return result["isError"], json.loads(result["content"][0]["text"])


@pytest.fixture
def alice_mcp(alice, mcp_client):
    client = mcp_client(alice)
    client.initialize()
    return client


def test_a_dotted_name_runs_the_action_and_answers_its_output_directly(catalogue, alice, alice_mcp):
    error, payload = execute(alice_mcp, "open_tools.echo", {"text": "hi"})
    assert error is False
    assert payload == {"echo": "hi", "token": False}  # no success/executionTimeMs wrapper
    assert CALLS == [{"action": "open_tools.echo", "input": {"text": "hi"}, "credentials": {}}]
    row = Execution.objects.get()
    assert (row.kind, row.status, row.name, row.input_keys) == ("action", "succeeded", "open_tools.echo", ["text"])


def test_an_action_error_is_its_payload_and_never_falls_back_to_the_skill(catalogue, alice_mcp):
    error, payload = execute(alice_mcp, "open_tools.fail")
    assert error is True
    assert payload == {"error": "The service said no.", "code": "http_error", "status": 403,
                       "details": {"message": "Forbidden"}}
    assert [e.kind for e in Execution.objects.all()] == ["action"]
    assert Execution.objects.get().status == "failed"


def test_a_dotted_name_without_an_action_falls_back_to_the_skill_of_that_name(catalogue, alice_mcp):
    error, payload = execute(alice_mcp, "open_tools.only_skill", {"x": 1})
    assert error is False, payload
    assert payload["success"] is True and payload["output"] == {"ran": "skill", "got": {"x": 1}}
    assert isinstance(payload["executionTimeMs"], int)
    assert Execution.objects.filter(kind="skill", status="succeeded").count() == 1


def test_an_unknown_name_suggests_the_nearest(catalogue, alice_mcp):
    error, payload = execute(alice_mcp, "open_tools.ech0")
    assert error is True and payload["code"] == "capability_not_found"
    assert "open_tools.echo" in payload["suggestions"]


def test_input_is_checked_against_the_schema_before_anything_runs(catalogue, alice_mcp):
    error, payload = execute(alice_mcp, "open_tools.echo", {"text": "x" * 21, "extra": 1})
    assert error is True and payload["code"] == "invalid_input"
    assert any("text" in p for p in payload["problems"]) and any("extra" in p for p in payload["problems"])
    assert CALLS == [] and not Execution.objects.exists()


def test_a_missing_connection_answers_how_to_connect_and_runs_nothing(catalogue, alice_mcp):
    error, payload = execute(alice_mcp, "keyed_tools.echo", {"text": "hi"})
    assert error is False and payload["status"] == "connection_required"
    [missing] = payload["missingIntegrations"]
    assert missing["integrationId"] == "keyed_tools" and missing["status"] == "pending"
    assert "/vault/connect/" in missing["connectUrl"]
    assert CALLS == []


def test_connected_credentials_reach_the_executor_and_never_the_record(catalogue, alice, alice_mcp):
    connect(alice, catalogue["keyed"])
    error, payload = execute(alice_mcp, "keyed_tools.echo", {"text": "hi"})
    assert (error, payload) == (False, {"echo": "hi", "token": True})
    assert CALLS[0]["credentials"] == {"token": "tok-secret-1234"}
    row = Execution.objects.values().get()
    assert "tok-secret-1234" not in json.dumps(row, default=str) and "hi" not in json.dumps(row["input_keys"])


def test_charlie_never_uses_alices_connection_or_skills(catalogue, alice, charlie, mcp_client):
    connect(alice, catalogue["keyed"])
    Skill.objects.create(owner=alice.user, name="alices_skill", source_code=SKILL_SOURCE)
    client = mcp_client(charlie)
    client.initialize()
    error, payload = execute(client, "keyed_tools.echo", {"text": "hi"})
    assert error is False and payload["status"] == "connection_required"
    error, payload = execute(client, "alices_skill")
    assert error is True and payload["code"] == "capability_not_found"
    assert "alices_skill" not in payload["suggestions"]
    assert CALLS == [] and not Execution.objects.filter(user=alice.user).exists()


def test_it_needs_the_execute_scope(catalogue, mcp_client):
    reader = make_member("reader", scopes=["capabilities:search", "capabilities:read"])
    client = mcp_client(reader)
    client.initialize()
    assert "capabilities_execute" not in client.tool_names()
    error, payload = execute(client, "open_tools.echo", {"text": "hi"})
    assert error is True and payload["code"] == "insufficient_scope"
    assert CALLS == []


def test_executions_are_rate_limited_per_user(catalogue, alice_mcp, settings):
    settings.ATRIUM_CAPABILITY_EXECUTIONS_PER_MINUTE = 2
    assert execute(alice_mcp, "open_tools.echo", {"text": "1"})[0] is False
    assert execute(alice_mcp, "open_tools.echo", {"text": "2"})[0] is False
    error, payload = execute(alice_mcp, "open_tools.echo", {"text": "3"})
    assert error is True and payload["code"] == "rate_limited" and payload["retryAfter"] >= 1
    assert len(CALLS) == 2


def test_a_disabled_integration_cannot_be_executed(catalogue, alice_mcp):
    Integration.objects.filter(id="open_tools").update(enabled=False)
    Skill.objects.filter(name="open_tools.echo").delete()
    error, payload = execute(alice_mcp, "open_tools.echo", {"text": "hi"})
    assert error is True and payload["code"] == "capability_not_found"
    assert CALLS == []


def test_a_client_with_url_elicitation_is_sent_to_the_connect_page(catalogue, alice, mcp_client):
    client = mcp_client(alice)
    response = client.post("initialize", {"protocolVersion": "2025-11-25",
                                          "capabilities": {"elicitation": {"form": {}, "url": {}}},
                                          "clientInfo": {"name": "pytest", "version": "1"}})
    client.session_id = response.headers["Mcp-Session-Id"]
    answer = client.post("tools/call", {"name": "capabilities_execute",
                                        "arguments": {"name": "keyed_tools.echo", "input": {"text": "hi"}}}).json()
    assert answer["error"]["code"] == -32042
    [elicitation] = answer["error"]["data"]["elicitations"]
    assert elicitation["mode"] == "url" and "/vault/connect/" in elicitation["url"] and elicitation["elicitationId"]
    assert CALLS == []
    answer = client.post("tools/call", {"name": "vault", "arguments": {"action": "connect",
                                                                       "integrationId": "keyed_tools"}}).json()
    assert answer["error"]["code"] == -32042


CALLING_SKILL = """\
import atrium


def run(input, atrium_client):
    echoed = atrium_client.call("keyed_tools.echo", {"text": input["text"]})
    try:
        atrium_client.call("open_tools.echo", {"text": "not declared"})
    except atrium.ActionError as exc:
        refused = exc.code
    return {"echoed": echoed, "refused": refused}
"""


def test_a_skill_calls_an_action_of_a_connected_integration_inside_the_sandbox(catalogue, alice, alice_mcp):
    skill = Skill.objects.create(owner=alice.user, name="relay", source_code=CALLING_SKILL,
                                 input_schema={"type": "object", "required": ["text"]})
    skill.integrations.set([catalogue["keyed"]])
    error, payload = execute(alice_mcp, "relay", {"text": "hi"})
    assert error is False and payload["status"] == "connection_required"
    assert payload["success"] is False and payload["missingIntegrations"][0]["integrationId"] == "keyed_tools"
    assert CALLS == []

    connect(alice, catalogue["keyed"])
    error, payload = execute(alice_mcp, "relay", {"text": "hi"})
    assert error is False, payload
    # The action ran in the server with alice's credentials; only its output entered the sandbox.
    assert payload["output"] == {"echoed": {"echo": "hi", "token": True}, "refused": "integration_not_declared"}
    assert CALLS == [{"action": "keyed_tools.echo", "input": {"text": "hi"},
                      "credentials": {"token": "tok-secret-1234"}}]
    run = Execution.objects.get(kind="skill", status="succeeded")
    assert [(c.name, c.status) for c in run.calls.all()] == [("keyed_tools.echo", "succeeded")]

    alice_mcp.call_expecting_success("vault", {"action": "disconnect", "integrationId": "keyed_tools"})
    error, payload = execute(alice_mcp, "relay", {"text": "again"})
    assert payload["success"] is False and payload["code"] == "connection_required"
    assert len(CALLS) == 1


def test_a_skill_whose_worker_died_is_failed_by_the_reaper_and_frees_its_slot(catalogue, alice, alice_mcp, settings):
    from datetime import timedelta

    from django.utils import timezone

    from integrations.tasks import executions_reap

    settings.ATRIUM_SKILL_CONCURRENCY_PER_USER = 1
    skill = Skill.objects.get(name="open_tools.only_skill")
    lost = Execution.objects.create(user=alice.user, name=skill.name, kind="skill", skill=skill, via="mcp")
    error, payload = execute(alice_mcp, "open_tools.only_skill")
    assert error is True and payload["code"] == "rate_limited"  # the one slot is taken
    assert executions_reap() == 0  # not yet past its timeout and the grace
    Execution.objects.filter(pk=lost.pk).update(started_at=timezone.now() - timedelta(seconds=skill.timeout_seconds
                                                                                       + 61))
    assert executions_reap() == 1
    lost.refresh_from_db()
    assert (lost.status, lost.error_code, lost.result["success"]) == ("failed", "worker_lost", False)
    error, payload = execute(alice_mcp, "open_tools.only_skill")
    assert error is False and payload["success"] is True



def test_the_execution_reaper_is_scheduled(settings):
    from config.celery import app
    from integrations import tasks

    task = settings.CELERY_BEAT_SCHEDULE["reap-skill-executions"]["task"]
    assert task == tasks.executions_reap.name and task in app.tasks


def test_a_skill_whose_integration_cannot_be_connected_leaves_no_connect_link_behind(catalogue, alice_mcp):
    unconfigured = Integration.objects.create(id="zulip_tools", name="Zulip", auth_scheme="oauth2")
    skill = Skill.objects.create(name="needs_both", source_code=SKILL_SOURCE)
    skill.integrations.set([catalogue["keyed"], unconfigured])

    error, payload = execute(alice_mcp, "needs_both")

    assert error is True and payload["code"] == "integration_not_configured"
    assert not ConnectRequest.objects.exists() and not Execution.objects.exists()
    assert not AuditEvent.objects.filter(action="vault.connect_link").exists()


def test_retrying_without_a_connection_gets_the_same_link_not_a_new_one_each_time(catalogue, alice_mcp):
    from accounts.models import AuditEvent
    from integrations.models import ConnectRequest

    urls = {execute(alice_mcp, "keyed_tools.echo", {"text": "hi"})[1]["missingIntegrations"][0]["connectUrl"]
            for _ in range(5)}
    assert len(urls) == 1
    assert ConnectRequest.objects.count() == 1
    assert AuditEvent.objects.filter(action="vault.connect_link").count() == 1
