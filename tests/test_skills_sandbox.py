"""integrations.skills: a skill's code runs in the real bubblewrap sandbox, computes from its input, calls
its declared integrations' actions through `atrium.call` as the caller, and never sees the server's
environment, files or the vault's credentials. Every test starts real sandboxes; bounds are generous."""

import functools
import json
import textwrap
import threading
import time

import pytest
from django.conf import settings as django_settings
from kombu.exceptions import OperationalError

from accounts.models import PersonalToken
from config.celery import app as celery_app
from core.caller import Caller
from core.errors import InvalidInput
from integrations import schemas, skills, tasks
from integrations.crypto import seal, unseal
from integrations.executors import EXECUTORS, ActionCall, ActionFailed, executor
from integrations.models import Action, Connection, Execution, Integration, Skill
from integrations.services import capability_execute
from runs import sandbox
from runs.models import Run
from runs.sandbox import RPC_CALLS, RPC_REQUEST_BYTES
from tests.conftest import make_member
from tests.playbook_helpers import playbook_make
from workflows import triggers
from workflows.models import TriggerFiring

VAULT_SECRET = "vault-secret-4d1f9b"


@executor("test_skills_forecast")
def forecast(call: ActionCall) -> dict:
    """A tiny real executor: it needs the caller's API key, and only its answer leaves the server."""
    if call.credentials.get("apiKey") != VAULT_SECRET:
        raise ActionFailed("The weather service refused the API key.", code="unauthorised", status=401)
    return {"city": call.input["city"], "temperatures": [11, 14, 9]}


def call_action_directly(*, caller: Caller, name: str, input: dict, parent: Execution) -> dict:
    """What services.action_execute does, reduced: find the action, check its input, apply the
    caller's credentials, run its executor."""
    integration_id, _, action_name = name.partition(".")
    action = Action.objects.select_related("integration").get(integration_id=integration_id, name=action_name)
    problems = schemas.problems(action.input_schema, input)
    if problems:
        raise InvalidInput("; ".join(problems), extra={"problems": problems})
    connection = Connection.objects.filter(user=caller.user, integration=action.integration).first()
    credentials = unseal(connection.sealed_credentials) if connection else {}
    return EXECUTORS[action.executor](ActionCall(caller=caller, action=action, input=input, credentials=credentials))


def describe_caller(*, caller: Caller, name: str, input: dict, parent: Execution) -> dict:
    """A call_action a worker can import: answers who it was called as."""
    return {"user": caller.user.username, "scopes": sorted(caller.scopes), "via": caller.via,
            "token": caller.token.label if caller.token else None, "parent": parent.pk, "input": input}


class Calls:
    """A fake call_action that records what it is asked and answers from `answers`."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.seen: list[dict] = []
        self.threads: list[int] = []

    def __call__(self, *, caller: Caller, name: str, input: dict, parent: Execution):
        self.seen.append({"caller": caller, "name": name, "input": input, "parent": parent})
        self.threads.append(threading.get_ident())
        answer = self.answers.pop(0) if self.answers else {"ok": True}
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture(autouse=True)
def in_bubblewrap(settings, tmp_path):
    """These tests mean something only inside the real sandbox: without it they fail, never skip."""
    settings.ATRIUM_SANDBOX_DIR = str(tmp_path / "sandbox")
    assert sandbox.mode().name == "bwrap", sandbox.mode().reason


@pytest.fixture
def weather(db) -> Integration:
    integration = Integration.objects.create(id="weather_tools", name="Weather", auth_scheme="api_key")
    Action.objects.create(integration=integration, name="FORECAST", executor="test_skills_forecast",
                          input_schema={"type": "object", "properties": {"city": {"type": "string"}},
                                        "required": ["city"], "additionalProperties": False})
    return integration


def make_skill(source: str, *, owner=None, integrations=(), **fields) -> Skill:
    skill = Skill.objects.create(owner=owner, name=fields.pop("name", "test_skill"),
                                 source_code=textwrap.dedent(source).lstrip("\n"), **fields)
    skill.integrations.set(integrations)
    return skill


def start(user, skill: Skill, via: str = "mcp") -> Execution:
    return Execution.objects.create(user=user, name=skill.name, kind=Execution.Kind.SKILL, skill=skill, via=via)


def run(caller: Caller, skill: Skill, input: dict | None = None, call_action=None) -> dict:
    return skills.skill_run(caller=caller, skill=skill, input=input or {}, execution=start(caller.user, skill),
                            call_action=call_action or Calls())


@pytest.fixture
def caller(alice) -> Caller:
    return Caller.trusted(alice.user, via="mcp")


# --- computing -------------------------------------------------------------------------------------


def test_a_skill_computes_its_output_from_its_input(caller):
    skill = make_skill("""
        def run(input, atrium):
            return {'total': sum(input['numbers']), 'n': len(input['numbers'])}
    """, owner=caller.user)

    result = run(caller, skill, {"numbers": [3, 4, 5]})

    assert result["success"] is True, result
    assert result["output"] == {"total": 12, "n": 3}
    assert isinstance(result["executionTimeMs"], int) and set(result) == {"success", "output", "executionTimeMs"}


def test_what_the_skill_prints_does_not_disturb_its_result(caller):
    skill = make_skill("""
        import os, subprocess
        def run(input, atrium):
            print('debugging')
            os.write(1, b'{"ok": true, "output": "forged"}\\n')
            subprocess.run(['echo', 'from a child'])
            return 'real'
    """, owner=caller.user)

    assert run(caller, skill)["output"] == "real"


def test_a_skill_may_import_the_client_and_its_error(caller):
    skill = make_skill("""
        import atrium
        from atrium import ActionError
        def run(input, client):
            return [client is atrium, issubclass(ActionError, Exception)]
    """, owner=caller.user)

    assert run(caller, skill)["output"] == [True, True]


# --- calling actions -------------------------------------------------------------------------------


def test_a_skill_calls_an_action_of_its_integration_as_the_caller(caller, weather):
    calls = Calls({"temperatures": [11, 14, 9]})
    skill = make_skill("""
        def run(input, atrium):
            forecast = atrium.call('weather_tools.FORECAST', {'city': input['city']})
            return {'city': input['city'], 'high': max(forecast['temperatures'])}
    """, owner=caller.user, integrations=[weather])
    execution = start(caller.user, skill)

    result = skills.skill_run(caller=caller, skill=skill, input={"city": "Oslo"}, execution=execution,
                              call_action=calls)

    assert result["success"] is True, result
    assert result["output"] == {"city": "Oslo", "high": 14}
    assert calls.seen == [{"caller": caller, "name": "weather_tools.FORECAST", "input": {"city": "Oslo"},
                           "parent": execution}]


def test_a_skill_runs_a_real_action_with_the_callers_connection(caller, weather):
    Connection.objects.create(user=caller.user, integration=weather, sealed_credentials=seal({"apiKey": VAULT_SECRET}))
    skill = make_skill("""
        def run(input, atrium):
            return atrium.call('weather_tools.FORECAST', {'city': input['city']})
    """, owner=caller.user, integrations=[weather])

    result = run(caller, skill, {"city": "Oslo"}, call_action_directly)

    assert result["success"] is True, result
    assert result["output"] == {"city": "Oslo", "temperatures": [11, 14, 9]}


def test_an_action_of_an_integration_the_skill_does_not_declare_is_refused(caller, weather):
    Integration.objects.create(id="mail_tools", name="Mail")
    calls = Calls()
    skill = make_skill("""
        import atrium
        def run(input, client):
            refused = []
            for name in ['mail_tools.SEND', 'FORECAST', 'weather_tools.', 'some_skill']:
                try:
                    client.call(name, {})
                except atrium.ActionError as error:
                    refused.append([error.code, error.message, error.payload])
            return refused
    """, owner=caller.user, integrations=[weather])

    result = run(caller, skill, call_action=calls)

    assert result["success"] is True, result
    first_code, first_message, first_payload = result["output"][0]
    assert first_code == "integration_not_declared"
    assert first_message == "'mail_tools.SEND' is not an action of an integration this skill declares " \
                            "(it declares: weather_tools)."
    assert first_payload == {"error": first_message, "code": "integration_not_declared"}
    assert [code for code, _, _ in result["output"]] == ["integration_not_declared"] * 4
    assert calls.seen == []


def test_an_actions_failure_is_an_action_error_the_skill_can_catch(caller, weather):
    calls = Calls(ActionFailed("The weather service said no.", code="upstream_error", status=502),
                  InvalidInput("city: 'x' is too short", extra={"problems": ["city: 'x' is too short"]}),
                  {"temperatures": [1]})
    skill = make_skill("""
        def run(input, atrium):
            seen = []
            for _ in range(2):
                try:
                    atrium.call('weather_tools.FORECAST', {'city': 'x'})
                except atrium.ActionError as error:
                    seen.append({'code': error.code, 'message': error.message, 'payload': error.payload,
                                 'str': str(error)})
            seen.append(atrium.call('weather_tools.FORECAST', {'city': 'Oslo'}))
            return seen
    """, owner=caller.user, integrations=[weather])

    result = run(caller, skill, call_action=calls)

    assert result["success"] is True, result
    assert result["output"] == [
        {"code": "upstream_error", "message": "The weather service said no.", "str": "The weather service said no.",
         "payload": {"error": "The weather service said no.", "code": "upstream_error", "status": 502}},
        {"code": "invalid_input", "message": "city: 'x' is too short", "str": "city: 'x' is too short",
         "payload": {"error": "city: 'x' is too short", "code": "invalid_input",
                     "problems": ["city: 'x' is too short"]}},
        {"temperatures": [1]},
    ]
    assert len(calls.seen) == 3


def test_a_real_actions_failure_reaches_the_skill_as_its_error(caller, weather):
    Connection.objects.create(user=caller.user, integration=weather, sealed_credentials=seal({"apiKey": "wrong"}))
    skill = make_skill("""
        def run(input, atrium):
            return atrium.call('weather_tools.FORECAST', {'city': 'Oslo'})
    """, owner=caller.user, integrations=[weather])

    result = run(caller, skill, call_action=call_action_directly)

    assert result["success"] is False
    assert result["error"].startswith("atrium.ActionError: The weather service refused the API key.\n")
    assert 'File "skill.py", line 2, in run' in result["error"]


def test_calls_beyond_the_limit_are_refused(caller, weather):
    calls = Calls()
    skill = make_skill(f"""
        def run(input, atrium):
            for n in range({RPC_CALLS + 1}):
                try:
                    atrium.call('weather_tools.FORECAST', {{'n': n}})
                except atrium.ActionError as error:
                    return [n, error.code, error.message]
    """, owner=caller.user, integrations=[weather])

    result = run(caller, skill, call_action=calls)

    assert result["output"] == [RPC_CALLS, "too_many_calls", f"A run may make at most {RPC_CALLS} calls."]
    assert len(calls.seen) == RPC_CALLS


def test_an_oversized_call_is_refused_and_the_next_one_goes_through(caller, weather):
    calls = Calls({"small": True})
    skill = make_skill(f"""
        def run(input, atrium):
            try:
                atrium.call('weather_tools.FORECAST', {{'blob': 'x' * {RPC_REQUEST_BYTES}}})
            except atrium.ActionError as error:
                refused = error.code
            return [refused, atrium.call('weather_tools.FORECAST', {{'city': 'Oslo'}})]
    """, owner=caller.user, integrations=[weather])

    result = run(caller, skill, call_action=calls)

    assert result["output"] == ["request_too_large", {"small": True}]
    assert [call["input"] for call in calls.seen] == [{"city": "Oslo"}]


# --- failing ---------------------------------------------------------------------------------------


def test_a_skill_that_raises_fails_with_the_error_and_its_own_frames(caller):
    skill = make_skill("""
        def check(city):
            raise ValueError(f'no forecast for {city}')

        def run(input, atrium):
            return check(input['city'])
    """, owner=caller.user)

    result = run(caller, skill, {"city": "Atlantis"})

    assert result["success"] is False and "output" not in result
    first, *frames = result["error"].splitlines()
    assert first == "ValueError: no forecast for Atlantis"
    frames = [line for line in frames if line.strip(" ^")]  # without the columns Python marks
    assert frames == ['  File "skill.py", line 5, in run', "    return check(input['city'])",
                      '  File "skill.py", line 2, in check', "    raise ValueError(f'no forecast for {city}')"]
    assert "run_skill.py" not in result["error"]


@pytest.mark.parametrize("source, error", [
    ("def main(input, atrium):\n    return 1\n", "The skill's source defines no run(input, atrium) function."),
    ("def run(input, atrium)\n    return 1\n", "SyntaxError: expected ':'\n  File \"skill.py\", line 1\n"),
    ("def run(input, atrium):\n    return {1, 2}\n", "run() returned a value that is not JSON: "
                                                     "Object of type set is not JSON serializable"),
    ("def run(input, atrium):\n    return float('nan')\n", "run() returned a value that is not JSON: "
                                                           "Out of range float values are not JSON compliant"),
    ("import sys\ndef run(input, atrium):\n    sys.exit(3)\n", "SystemExit: 3"),
    ("def run(input, atrium):\n    return 'x' * 2_000_000\n", "run() returned 2000023 bytes of JSON; at most "
                                                            "1048512 are kept."),
])
def test_a_skill_that_breaks_the_contract_fails_saying_how(caller, source, error):
    result = run(caller, make_skill(source, owner=caller.user))

    assert result["success"] is False
    assert result["error"].startswith(error), result["error"]


def test_an_output_that_does_not_match_the_output_schema_fails_the_skill(caller):
    schema = {"type": "object", "properties": {"high": {"type": "integer"}}, "required": ["high", "city"]}
    skill = make_skill("""
        def run(input, atrium):
            return {'high': 'warm'}
    """, owner=caller.user, output_schema=schema)

    result = run(caller, skill)

    assert result == {"success": False, "executionTimeMs": result["executionTimeMs"],
                      "error": "The skill's output does not match its output schema: output: 'city' is a required "
                               "property; output.high: 'warm' is not of type 'integer'."}


def test_an_output_that_matches_the_output_schema_is_the_result(caller):
    skill = make_skill("""
        def run(input, atrium):
            return {'high': 14}
    """, owner=caller.user, output_schema={"type": "object", "properties": {"high": {"type": "integer"}}})

    assert run(caller, skill)["output"] == {"high": 14}


def test_a_skill_past_its_timeout_is_killed(caller):
    skill = make_skill("""
        import time
        def run(input, atrium):
            time.sleep(60)
    """, owner=caller.user, timeout_seconds=1)
    started = time.monotonic()

    result = run(caller, skill)

    assert result["success"] is False
    assert result["error"] == "The skill timed out after 1 s."
    assert time.monotonic() - started < 20


def test_a_skill_beyond_its_memory_limit_fails_saying_so(caller):
    skill = make_skill("""
        def run(input, atrium):
            return len(bytearray(2_000_000_000))
    """, owner=caller.user)

    result = run(caller, skill)

    assert result["success"] is False
    assert result["error"].startswith(f"MemoryError (the skill's memory limit is {skills.SKILL_MEMORY_MB} MB)")


def test_a_refused_sandbox_fails_the_skill_with_the_reason(caller, monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "TOOLS_PATH", str(tmp_path / "empty"))
    skill = make_skill("""
        def run(input, atrium):
            return 1
    """, owner=caller.user)

    result = run(caller, skill)

    assert result["success"] is False
    assert result["error"] == sandbox.unavailable_reason()
    assert "apt-get install bubblewrap" in result["error"]


# --- what the skill cannot see ---------------------------------------------------------------------


SNOOP = """\
import glob, os

def read(path):
    try:
        with open(path, 'rb') as file:
            return file.read().decode(errors='replace')
    except OSError as error:
        return type(error).__name__

def run(input, atrium):
    found = {'env': dict(os.environ), 'cwd': os.getcwd(), 'files': {}, 'proc': {}, 'paths': {}}
    for path in glob.glob(os.getcwd() + '/**', recursive=True):
        if os.path.isfile(path):
            found['files'][path] = read(path)
    for path in glob.glob('/proc/[0-9]*/environ') + glob.glob('/proc/[0-9]*/cmdline'):
        found['proc'][path] = read(path)
    for path in input['paths']:
        found['paths'][path] = read(path)
    found['action'] = CALL(atrium)
    return found
"""


def test_the_skill_cannot_read_the_servers_environment_or_files(caller, monkeypatch, settings):
    monkeypatch.setenv("SECRET_KEY", "server-secret-2c9e71")
    monkeypatch.setenv("DATABASE_URL", "postgres://atrium:db-password-2c9e71@db/atrium")
    settings.SECRET_KEY = "server-secret-2c9e71"
    project = django_settings.BASE_DIR
    paths = [f"{project}/config/settings.py", f"{project}/manage.py", "/etc/shadow", "/proc/1/environ"]
    skill = make_skill(SNOOP.replace("CALL(atrium)", "None"), owner=caller.user)

    result = run(caller, skill, {"paths": paths})

    assert result["success"] is True, result
    found = result["output"]
    assert "2c9e71" not in json.dumps(result)
    assert "SECRET_KEY" not in found["env"] and "DATABASE_URL" not in found["env"]
    assert set(found["env"]) <= {"PATH", "HOME", "PWD", "LANG", "LC_ALL", "TMPDIR", "ATRIUM_WORKFLOW_DIR",
                                 "ROSCOE_WORKFLOW_DIR", "ATRIUM_RPC_SOCKET"}
    assert found["paths"] == {paths[0]: "FileNotFoundError", paths[1]: "FileNotFoundError",
                              paths[2]: "FileNotFoundError", paths[3]: "PermissionError"}
    assert {path.rsplit("/", 1)[1] for path in found["files"]} == {"run_skill.py", "atrium.py", "skill.py",
                                                                    "input.json"}


def test_vault_credentials_never_enter_the_sandbox_only_the_actions_output(caller, weather):
    Connection.objects.create(user=caller.user, integration=weather, sealed_credentials=seal({"apiKey": VAULT_SECRET}))
    skill = make_skill(SNOOP.replace("CALL(atrium)", "atrium.call('weather_tools.FORECAST', {'city': 'Oslo'})"),
                       owner=caller.user, integrations=[weather])

    result = run(caller, skill, {"paths": []}, call_action_directly)

    assert result["success"] is True, result
    assert result["output"]["action"] == {"city": "Oslo", "temperatures": [11, 14, 9]}
    assert VAULT_SECRET not in json.dumps(result)
    assert "4d1f9b" not in json.dumps(result)


# --- dispatching -----------------------------------------------------------------------------------


def test_dispatch_without_a_broker_answers_within_the_wait_and_records_the_execution(caller, weather):
    calls = Calls({"temperatures": [3, 8]})
    skill = make_skill("""
        def run(input, atrium):
            return max(atrium.call('weather_tools.FORECAST', {'city': 'Oslo'})['temperatures'])
    """, owner=caller.user, integrations=[weather])
    execution = start(caller.user, skill)

    result = skills.skill_dispatch(caller=caller, skill=skill, input={}, execution=execution, call_action=calls,
                                   wait_seconds=60)

    assert result["success"] is True and result["output"] == 8, result
    # The request served the call itself, on its own database connection.
    assert calls.threads == [threading.get_ident()]
    execution.refresh_from_db()
    assert (execution.status, execution.result, execution.error_code, execution.error) == (
        "succeeded", result, "", "")
    assert execution.finished_at is not None and execution.duration_ms >= result["executionTimeMs"] - 1


def test_a_failed_skill_is_recorded_failed_and_a_refused_one_refused(caller, monkeypatch, tmp_path):
    skill = make_skill("""
        def run(input, atrium):
            raise KeyError('city')
    """, owner=caller.user)
    failed = start(caller.user, skill)

    result = skills.skill_dispatch(caller=caller, skill=skill, input={}, execution=failed, call_action=Calls(),
                                   wait_seconds=60)

    failed.refresh_from_db()
    assert (failed.status, failed.error_code, failed.result) == ("failed", "skill_error", result)
    assert failed.error.startswith("KeyError: 'city'")

    monkeypatch.setattr(sandbox, "TOOLS_PATH", str(tmp_path / "empty"))
    refused = start(caller.user, skill)
    skills.skill_dispatch(caller=caller, skill=skill, input={}, execution=refused, call_action=Calls(),
                          wait_seconds=60)
    refused.refresh_from_db()
    assert (refused.status, refused.error_code, refused.error) == ("refused", "sandbox_unavailable",
                                                                   sandbox.unavailable_reason())


def wait_finished(execution: Execution, within: float = 60) -> Execution:
    deadline = time.monotonic() + within
    while (execution := Execution.objects.get(pk=execution.pk)).status == "running":
        assert time.monotonic() < deadline, "the skill never finished"
        time.sleep(0.1)
    return execution


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_skill_that_outlasts_the_wait_finishes_in_the_background():
    caller = Caller.trusted(make_member("alice").user, via="mcp")
    weather = Integration.objects.create(id="weather_tools", name="Weather")
    calls = Calls({"n": 1}, {"n": 2})
    skill = make_skill("""
        import time
        def run(input, atrium):
            first = atrium.call('weather_tools.FORECAST', {})
            time.sleep(2)
            return [first, atrium.call('weather_tools.FORECAST', {})]
    """, owner=caller.user, integrations=[weather])
    execution = start(caller.user, skill)

    result = skills.skill_dispatch(caller=caller, skill=skill, input={}, execution=execution, call_action=calls,
                                   wait_seconds=0.5)

    assert result is None
    assert Execution.objects.get(pk=execution.pk).status == "running"
    execution = wait_finished(execution)
    assert execution.status == "succeeded"
    assert execution.result["output"] == [{"n": 1}, {"n": 2}]
    # The first call was served by the waiting request; the second, after it left, by the thread.
    assert calls.threads[0] == threading.get_ident() and calls.threads[1] != threading.get_ident()


# --- on a worker -----------------------------------------------------------------------------------


@pytest.fixture
def queued(monkeypatch) -> list[tuple]:
    """A broker that takes tasks and keeps them: the test then runs each as a worker would."""
    sent: list[tuple] = []
    monkeypatch.setitem(celery_app.conf, "task_always_eager", False)
    monkeypatch.setattr(tasks.skill_execute, "apply_async", lambda args, **options: sent.append(args))
    return sent


def token_caller(scopes: list[str]) -> Caller:
    alice = make_member("alice", scopes=scopes)
    token = PersonalToken.objects.get(user=alice.user)
    return Caller(user=alice.user, scopes=frozenset(scopes), via="api", token=token)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_on_a_worker_the_skill_acts_with_the_original_callers_scopes_and_token(queued):
    caller = token_caller(["capabilities:execute"])
    weather = Integration.objects.create(id="weather_tools", name="Weather")
    skill = make_skill("""
        def run(input, atrium):
            return atrium.call('weather_tools.FORECAST', input)
    """, owner=caller.user, integrations=[weather])
    execution = start(caller.user, skill, via="api")

    # As services pass action_execute: with the request's caller bound, which the worker rebuilds.
    result = skills.skill_dispatch(caller=caller, skill=skill, input={"city": "Oslo"}, execution=execution,
                                   call_action=functools.partial(describe_caller, caller=caller), wait_seconds=0)

    assert result is None and len(queued) == 1
    assert Execution.objects.get(pk=execution.pk).status == "running"
    tasks.skill_execute.apply(args=queued[0])

    execution.refresh_from_db()
    assert execution.status == "succeeded", execution.error
    assert execution.result["output"] == {"user": "alice", "scopes": ["capabilities:execute"], "via": "api",
                                          "token": "tests", "parent": execution.pk, "input": {"city": "Oslo"}}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_token_revoked_before_the_worker_runs_refuses_the_skill(queued):
    caller = token_caller(["capabilities:execute"])
    skill = make_skill("""
        def run(input, atrium):
            return 1
    """, owner=caller.user)
    execution = start(caller.user, skill, via="api")
    skills.skill_dispatch(caller=caller, skill=skill, input={}, execution=execution, call_action=describe_caller,
                          wait_seconds=0)
    caller.token.delete()

    tasks.skill_execute.apply(args=queued[0])

    execution.refresh_from_db()
    assert (execution.status, execution.error_code) == ("refused", "caller_inactive")
    assert execution.result["error"] == "The token that started this skill was revoked or expired before the skill ran."


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_worker_does_not_run_a_skill_whose_execution_already_ended(queued):
    caller = Caller.trusted(make_member("alice").user, via="mcp")
    skill = make_skill("""
        def run(input, atrium):
            return 1
    """, owner=caller.user)
    execution = start(caller.user, skill)
    skills.skill_dispatch(caller=caller, skill=skill, input={}, execution=execution, call_action=describe_caller,
                          wait_seconds=0)
    Execution.objects.filter(pk=execution.pk).update(status="failed", error="Lost")

    tasks.skill_execute.apply(args=queued[0])

    execution.refresh_from_db()
    assert (execution.status, execution.error, execution.result) == ("failed", "Lost", None)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_with_the_broker_down_the_skill_is_recorded_refused_and_nothing_runs(monkeypatch):
    caller = Caller.trusted(make_member("alice").user, via="mcp")
    skill = make_skill("""
        def run(input, atrium):
            return 1
    """, owner=caller.user)
    execution = start(caller.user, skill)
    monkeypatch.setitem(celery_app.conf, "task_always_eager", False)

    def refuse(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    monkeypatch.setattr(tasks.skill_execute, "apply_async", refuse)

    result = skills.skill_dispatch(caller=caller, skill=skill, input={}, execution=execution,
                                   call_action=describe_caller, wait_seconds=5)

    assert result["success"] is False and "could not be sent to a worker" in result["error"]
    execution.refresh_from_db()
    assert (execution.status, execution.error_code, execution.result) == ("refused", "queue_unavailable", result)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_with_a_broker_call_action_must_be_a_function_a_worker_can_import(queued):
    caller = Caller.trusted(make_member("alice").user, via="mcp")
    skill = make_skill("""
        def run(input, atrium):
            return 1
    """, owner=caller.user)
    execution = start(caller.user, skill)

    with pytest.raises(ValueError, match="module-level function"):
        skills.skill_dispatch(caller=caller, skill=skill, input={}, execution=execution,
                              call_action=lambda **kwargs: None, wait_seconds=0)
    assert queued == []


def test_with_a_broker_dispatch_refuses_to_run_inside_a_transaction(caller, queued):
    skill = make_skill("""
        def run(input, atrium):
            return 1
    """, owner=caller.user)

    with pytest.raises(RuntimeError, match="outside a transaction"):
        skills.skill_dispatch(caller=caller, skill=skill, input={}, execution=start(caller.user, skill),
                              call_action=describe_caller, wait_seconds=0)
    assert queued == []


def test_a_skill_that_ran_is_a_capability_executed_event(caller, django_capture_on_commit_callbacks):
    playbook = playbook_make(caller.user)
    trigger = triggers.trigger_create(caller=caller, playbook=playbook, spec={
        "type": "event", "event": "capability.executed", "filters": {"kind": "skill"}, "enabled": True}).trigger
    skill = make_skill("""
        def run(input, atrium):
            return {'ok': True}
    """, owner=caller.user)

    with django_capture_on_commit_callbacks(execute=True):
        outcome = capability_execute(caller=caller, name=skill.name, input={})

    assert outcome.payload["success"] is True, outcome.payload
    firing = TriggerFiring.objects.get(trigger=trigger)
    assert firing.outcome == "started"
    assert Run.objects.get(pk=firing.run_id).context["event"]["data"] == {
        "name": "test_skill", "kind": "skill", "status": "succeeded"}
