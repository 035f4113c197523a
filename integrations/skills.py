"""Executable skills: a skill's Python runs only inside the script sandbox (runs.sandbox), never in a
server process, and reaches the caller's integrations only through the sandbox's rpc channel.

The contract a skill's source follows:

    def run(input, atrium):
        forecast = atrium.call("weather_tools.FORECAST", {"city": input["city"]})
        return {"city": input["city"], "high": max(forecast["temperatures"])}

- `run(input, atrium)` gets the input (a dict, already checked against the input schema) and
  returns a JSON value: the skill's output, checked against its output schema when it has one.
- `atrium.call("integrationId.ACTION_NAME", {...})` runs an action of one of the integrations the
  skill declares, as the caller (their connection, their scopes), recorded as an execution whose
  parent is the skill's, and returns its output. It raises `atrium.ActionError` (also importable
  with `import atrium`) with `.code`, `.message` and `.payload` (the action's error payload) when
  the action fails or the call is refused: integration_not_declared, too_many_calls (more than
  runs.sandbox.RPC_CALLS in one run), request_too_large (more than RPC_REQUEST_BYTES of JSON). The
  skill may catch it and go on.
- The code runs under the system's Python (/usr/bin/python3, its standard library and whatever
  the system has installed) as an unprivileged uid with no network, a clean environment, a private
  work directory and limits: skill.timeout_seconds of wall time, about as much CPU time, and
  SKILL_MEMORY_MB of memory. What it prints goes nowhere; an exception it raises fails the skill
  with the exception and the skill's last frames. Credentials never enter the sandbox: the server
  applies them when it runs an action, and only the action's output comes back.

Inside, skill_runtime/run_skill.py (the runner) reads input.json, loads the source as skill.py,
calls run and writes one JSON line to stdout; skill_runtime/atrium.py is the client.

Where it runs. With a broker, skill_dispatch sends integrations.tasks.skill_execute to a worker,
which rebuilds the caller (the user, the exact scopes and the token of the original call; a token
revoked meanwhile refuses the run) and records the result on the Execution row under its lock;
the request polls that row. Without one (tasks eager, as under `make run`), a thread of this process
supervises the sandbox: the thread only waits on the sandbox's process, the skill's code runs in
there just the same. While the request waits it serves the skill's action calls and records the
result itself, on its own database connection; once it stops waiting the thread does both. The
hand-off is decided under one lock, as for script nodes (runs.scripts), so exactly one of them
records the result. Either way the request waits at most `wait_seconds` and answers None for a skill
still running; its result then lands on the Execution row.
"""

from __future__ import annotations

import functools
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone
from django.utils.module_loading import import_string
from oauth2_provider.models import AccessToken

from accounts.models import PersonalToken
from core.caller import Caller
from core.errors import DomainError
from integrations import schemas
from integrations.executors import ActionFailed
from integrations.models import Execution, Skill
from runs import sandbox
from workflows.events import event_emit

logger = logging.getLogger(__name__)

RUNTIME_DIR = Path(__file__).resolve().parent / "skill_runtime"
RUNTIME_FILES = ("run_skill.py", "atrium.py")
# The system's interpreter: the server's own (a venv) is not inside the sandbox.
PYTHON = "/usr/bin/python3"
SKILL_MEMORY_MB = 512
# How the request polls the Execution row a worker will write: quickly at first, then every 250 ms.
POLL_FIRST_SECONDS = 0.05
POLL_MAX_SECONDS = 0.25
INTERNAL_ERROR = "The skill failed on the server; the error was logged."

ActionCaller = Callable[..., Any]


@dataclass(frozen=True)
class _Outcome:
    output: Any = None
    error: str | None = None
    code: str = ""  # the Execution's error_code
    refused: bool = False  # nothing ran

    def result(self, elapsed_ms: int) -> dict[str, Any]:
        if self.error is None:
            return {"success": True, "output": self.output, "executionTimeMs": elapsed_ms}
        return {"success": False, "error": self.error, "executionTimeMs": elapsed_ms}


@dataclass(frozen=True)
class _Prepared:
    """Everything the sandboxed run needs, read from the database beforehand, so the thread that
    supervises it (without a broker) touches no database until it is handed the run."""

    job: sandbox.ScriptJob
    declared: frozenset[str]
    output_schema: dict[str, Any] = field(default_factory=dict)


def _ms_since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


@functools.cache
def _runtime() -> tuple[sandbox.BundledFile, ...]:
    return tuple(sandbox.BundledFile(name, (RUNTIME_DIR / name).read_text(encoding="utf-8"), executable=False)
                 for name in RUNTIME_FILES)


def _prepared(skill: Skill, input: dict[str, Any]) -> _Prepared:
    files = (*_runtime(), sandbox.BundledFile("skill.py", skill.source_code, executable=False),
             sandbox.BundledFile("input.json", json.dumps(input), executable=False))
    job = sandbox.ScriptJob(script=None, command=[PYTHON, "-I", "-B", "run_skill.py"],
                            timeout=float(max(skill.timeout_seconds, 1)), env={}, files=files,
                            memory_mb=SKILL_MEMORY_MB)
    # .all() rather than values_list: it uses the integrations the caller may have prefetched.
    declared = frozenset(integration.pk for integration in skill.integrations.all())
    return _Prepared(job=job, declared=declared, output_schema=skill.output_schema or {})


# --- the skill's calls -------------------------------------------------------------------------------

def _refusal(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "payload": {"error": message, "code": code}}}


def _action_server(*, caller: Caller, execution: Execution, call_action: ActionCaller,
                   declared: frozenset[str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The sandbox's rpc handler: one `atrium.call` in, its reply out."""

    def serve(request: dict[str, Any]) -> dict[str, Any]:
        name, input = request.get("name"), request.get("input", {})
        if not isinstance(name, str) or not isinstance(input, dict):
            return _refusal("invalid_request", "A call names an action ('integrationId.ACTION_NAME') and gives "
                                               "its input as an object.")
        integration_id, dot, action_name = name.partition(".")
        if not dot or not action_name or integration_id not in declared:
            allowed = ", ".join(sorted(declared)) or "none"
            return _refusal("integration_not_declared", f"{name!r} is not an action of an integration this skill "
                                                        f"declares (it declares: {allowed}).")
        try:
            # caller= as well: call_action may be action_execute with the caller already bound.
            output = call_action(caller=caller, name=name, input=input, parent=execution)
        except ActionFailed as exc:
            return {"error": {"code": exc.code, "message": exc.message, "payload": exc.payload()}}
        except DomainError as exc:
            payload = {"error": exc.message, "code": exc.code, **exc.extra}
            return {"error": {"code": exc.code, "message": exc.message, "payload": payload}}
        except Exception:
            logger.exception("Action %s called by skill execution %s failed", name, execution.pk)
            return _refusal("internal_error", f"{name} failed on the server; the error was logged.")
        return {"output": output}

    return serve


# --- running -----------------------------------------------------------------------------------------

def _reported(stdout: str) -> dict[str, Any] | None:
    """The runner's line: the last one on stdout."""
    lines = stdout.strip().splitlines()
    try:
        reported = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return reported if isinstance(reported, dict) and "ok" in reported else None


def _interpret(result: sandbox.ScriptResult, output_schema: dict[str, Any]) -> _Outcome:
    if result.refused is not None:
        return _Outcome(error=result.refused, code="sandbox_unavailable", refused=True)
    if result.timed_out:
        return _Outcome(error=f"The skill timed out after {result.timeout:g} s.", code="skill_timeout")
    reported = _reported(result.stdout)
    if reported is None:
        return _Outcome(error=f"The skill ended without a result: {result.error() or 'it wrote none'}.",
                        code="skill_failed")
    if reported["ok"] is not True:
        error = str(reported.get("error") or "The skill failed.")
        if error.startswith("MemoryError"):
            error += f" (the skill's memory limit is {result.memory_mb} MB)"
        if reported.get("traceback"):
            error += f"\n{reported['traceback']}"
        return _Outcome(error=error, code="skill_error")
    output = reported.get("output")
    problems = schemas.problems(output_schema, output, label="output", root=True)
    if problems:
        return _Outcome(error=f"The skill's output does not match its output schema: {'; '.join(problems)}.",
                        code="output_invalid")
    return _Outcome(output=output)


def _sandboxed(prepared: _Prepared, rpc: Callable[[dict[str, Any]], dict[str, Any]]) -> _Outcome:
    try:
        result = sandbox.script_run(replace(prepared.job, rpc=rpc))
    except OSError as exc:  # no free sandbox uid, an unusable sandbox directory
        logger.warning("A skill could not start in the sandbox: %s", exc)
        return _Outcome(error=f"The sandbox could not start the skill: {exc}", code="sandbox_error", refused=True)
    return _interpret(result, prepared.output_schema)


def skill_run(*, caller: Caller, skill: Skill, input: dict[str, Any], execution: Execution,
              call_action: ActionCaller) -> dict[str, Any]:
    """Run the skill in the sandbox here and wait for it: {success, output?, error?, executionTimeMs}.
    Each `atrium.call` of the skill's code becomes call_action(caller=, name=, input=, parent=execution),
    for actions of the skill's declared integrations only. Records nothing itself."""
    started = time.monotonic()
    prepared = _prepared(skill, input)
    serve = _action_server(caller=caller, execution=execution, call_action=call_action, declared=prepared.declared)
    return _sandboxed(prepared, serve).result(_ms_since(started))


def _result_record(execution_id: int, outcome: _Outcome, result: dict[str, Any]) -> bool:
    """Write the result to its Execution; False when the execution had already ended."""
    with transaction.atomic():
        execution = Execution.objects.select_for_update().get(pk=execution_id)
        if execution.status != Execution.Status.RUNNING:
            return False
        if outcome.error is None:
            execution.status = Execution.Status.SUCCEEDED
        else:
            execution.status = Execution.Status.REFUSED if outcome.refused else Execution.Status.FAILED
        execution.result = result
        execution.error_code = outcome.code
        execution.error = (outcome.error or "")[:2000]
        execution.finished_at = timezone.now()
        execution.duration_ms = max(round((execution.finished_at - execution.started_at).total_seconds() * 1000), 0)
        execution.save(update_fields=["status", "result", "error_code", "error", "finished_at", "duration_ms"])
        event_emit(owner_id=execution.user_id, name="capability.executed",
                   data={"name": execution.name, "kind": str(execution.kind), "status": str(execution.status)})
        return True


# --- on a worker ---------------------------------------------------------------------------------------

def _caller_described(caller: Caller) -> dict[str, Any]:
    """What a worker needs to act as exactly this caller, in a task's JSON arguments."""
    token = None
    if isinstance(caller.token, PersonalToken):
        token = ["personal", caller.token.pk]
    elif isinstance(caller.token, AccessToken):
        token = ["oauth", caller.token.pk]
    return {"user": caller.user.pk, "scopes": sorted(caller.scopes), "via": caller.via, "token": token}


def _caller_restored(described: dict[str, Any], execution: Execution) -> Caller | str:
    """The caller who dispatched the skill, or why they can no longer act."""
    user = execution.user
    if user.pk != described["user"] or not user.is_active:
        return "The user who started this skill can no longer act."
    token: PersonalToken | AccessToken | None = None
    if described["token"] is not None:
        kind, token_id = described["token"]
        model = PersonalToken if kind == "personal" else AccessToken
        token = model.objects.filter(pk=token_id, user=user).first()
        active = token is not None and (token.is_active if isinstance(token, PersonalToken) else not token.is_expired())
        if not active:
            return "The token that started this skill was revoked or expired before the skill ran."
    return Caller(user=user, scopes=frozenset(described["scopes"]), via=described["via"], token=token)


def _importable(call_action: ActionCaller) -> str:
    """call_action's dotted name, for the worker to import (a partial's bound caller is rebuilt there)."""
    function = call_action.func if isinstance(call_action, functools.partial) else call_action
    name = f"{function.__module__}.{function.__qualname__}"
    try:
        found = import_string(name)
    except ImportError:
        found = None
    if found is not function:
        raise ValueError(f"call_action must be a module-level function for a worker to import, not {name}")
    return name


def skill_execute(*, execution_id: int, input: dict[str, Any], caller: dict[str, Any], call_action: str) -> bool:
    """A worker's whole job for one dispatched skill: act as the described caller, run the skill in the
    sandbox, record its result. False when the execution was no longer running."""
    started = time.monotonic()
    execution = Execution.objects.select_related("user", "skill").filter(
        pk=execution_id, status=Execution.Status.RUNNING).first()
    if execution is None:
        return False
    restored = _caller_restored(caller, execution)
    if execution.skill is None:
        outcome = _Outcome(error="The skill was deleted before it ran.", code="skill_deleted", refused=True)
    elif isinstance(restored, str):
        outcome = _Outcome(error=restored, code="caller_inactive", refused=True)
    else:
        try:
            prepared = _prepared(execution.skill, input)
            serve = _action_server(caller=restored, execution=execution, call_action=import_string(call_action),
                                   declared=prepared.declared)
            outcome = _sandboxed(prepared, serve)
        except Exception:
            logger.exception("Skill execution %s failed on its worker", execution_id)
            outcome = _Outcome(error=INTERNAL_ERROR, code="internal_error")
    return _result_record(execution_id, outcome, outcome.result(_ms_since(started)))


def _result_awaited(execution_id: int, wait_seconds: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + wait_seconds
    pause = POLL_FIRST_SECONDS
    while True:
        row = Execution.objects.filter(pk=execution_id).values("status", "result", "error", "duration_ms").first()
        if row is not None and row["status"] != Execution.Status.RUNNING:
            return row["result"] or {"success": False, "error": row["error"] or "The skill did not finish.",
                                     "executionTimeMs": row["duration_ms"] or 0}
        remaining = deadline - time.monotonic()
        if row is None or remaining <= 0:
            return None
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, POLL_MAX_SECONDS)


def _on_worker(*, caller: Caller, input: dict[str, Any], execution: Execution, call_action: ActionCaller,
               wait_seconds: float) -> dict[str, Any] | None:
    from integrations.tasks import skill_execute as task

    if connection.in_atomic_block:
        # The worker reads the Execution row, which an open transaction would hide from it.
        raise RuntimeError("skill_dispatch must be called outside a transaction when skills run on workers")
    args = (execution.pk, input, _caller_described(caller), _importable(call_action))
    try:
        task.apply_async(args, retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5,
                                             "interval_max": 1})
    except Exception as exc:  # kombu's OperationalError, or the transport's own connection errors
        logger.warning("Could not send skill execution %s to a worker (%s)", execution.pk, exc)
        outcome = _Outcome(error="The skill could not be sent to a worker (the task queue is not answering); "
                                 "nothing ran. Try again shortly.", code="queue_unavailable", refused=True)
        result = outcome.result(0)
        _result_record(execution.pk, outcome, result)
        return result
    return _result_awaited(execution.pk, wait_seconds)


# --- without a broker ------------------------------------------------------------------------------------

@dataclass
class _Call:
    request: dict[str, Any]
    reply: dict[str, Any] | None = None
    done: threading.Event = field(default_factory=threading.Event)


class _Handoff:
    """Who serves a background skill's calls and records its result: the waiting request, or, once
    the request has stopped waiting, the thread. Decided under one lock, so exactly one of them
    records it and every call is served once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.handed_off = False
        self.outcome: _Outcome | None = None
        self.events: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()  # None: the skill ended

    def relay(self, serve: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """The thread's rpc handler: a call goes to the request while it waits, else is served here."""

        def handle(request: dict[str, Any]) -> dict[str, Any]:
            with self.lock:
                call = None if self.handed_off else _Call(request)
                if call is not None:
                    self.events.put(call)
            if call is None:
                return serve(request)
            call.done.wait()
            return call.reply or _refusal("internal_error", INTERNAL_ERROR)

        return handle

    def finish(self, outcome: _Outcome) -> bool:
        """The skill ended; True when the thread must record the result itself."""
        with self.lock:
            self.outcome = outcome
            self.events.put(None)
            return self.handed_off

    def give_up(self) -> _Outcome | None:
        """The request stops waiting; the outcome, when the skill ended just in time."""
        with self.lock:
            self.handed_off = self.outcome is None
            return self.outcome


def _answer(call: _Call, serve: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    try:
        call.reply = serve(call.request)
    finally:
        call.done.set()


def _queued_answer(handoff: _Handoff, serve: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """After the hand-off: the calls queued before it are still the request's to serve."""
    while True:
        try:
            queued = handoff.events.get_nowait()
        except queue.Empty:
            return
        if queued is not None:
            _answer(queued, serve)


def _in_background(execution_id: int, prepared: _Prepared, serve: Callable[[dict[str, Any]], dict[str, Any]],
                   handoff: _Handoff, started: float) -> None:
    try:
        try:
            outcome = _sandboxed(prepared, handoff.relay(serve))
        except Exception:
            logger.exception("Skill execution %s failed in its background thread", execution_id)
            outcome = _Outcome(error=INTERNAL_ERROR, code="internal_error")
        if handoff.finish(outcome):
            _result_record(execution_id, outcome, outcome.result(_ms_since(started)))
    except Exception:
        logger.exception("Skill execution %s could not record its result", execution_id)
    finally:
        if handoff.handed_off:
            connection.close()


def _without_broker(*, caller: Caller, skill: Skill, input: dict[str, Any], execution: Execution,
                    call_action: ActionCaller, wait_seconds: float) -> dict[str, Any] | None:
    started = time.monotonic()
    prepared = _prepared(skill, input)
    serve = _action_server(caller=caller, execution=execution, call_action=call_action, declared=prepared.declared)
    handoff = _Handoff()
    thread = threading.Thread(target=_in_background, args=(execution.pk, prepared, serve, handoff, started),
                              name=f"skill-{execution.pk}", daemon=True)
    thread.start()
    deadline = started + wait_seconds
    while True:
        try:
            event = handoff.events.get(timeout=max(deadline - time.monotonic(), 0))
        except queue.Empty:
            outcome = handoff.give_up()
            if outcome is None:
                _queued_answer(handoff, serve)
                return None
            break
        if event is None:
            outcome = handoff.outcome
            break
        _answer(event, serve)
    thread.join()
    assert outcome is not None
    result = outcome.result(_ms_since(started))
    _result_record(execution.pk, outcome, result)
    return result


def skill_dispatch(*, caller: Caller, skill: Skill, input: dict[str, Any], execution: Execution,
                   call_action: ActionCaller, wait_seconds: float, here: bool = False) -> dict[str, Any] | None:
    """Start the skill (on a worker when there is a broker, else on a thread here; its code always in
    the sandbox) and wait for it at most `wait_seconds`: its result, also recorded on `execution`, or
    None when it is still running. Call it outside a transaction, with `execution` committed `running`.
    With a broker, call_action must be importable by a worker: a module-level function, or a
    functools.partial of one (the caller it binds is rebuilt there). `here` supervises the skill on
    this process even with a broker: a worker already running a playbook step must not wait for
    another worker (with one worker, it would wait for itself)."""
    from integrations.tasks import skill_execute as task

    if here or task.app.conf.task_always_eager:
        return _without_broker(caller=caller, skill=skill, input=input, execution=execution, call_action=call_action,
                               wait_seconds=wait_seconds)
    return _on_worker(caller=caller, input=input, execution=execution, call_action=call_action,
                      wait_seconds=wait_seconds)
