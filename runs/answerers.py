"""Who answers a paused step: one table, decided per step.

A run pauses at a node that needs an answer (runs.handlers). Whoever answers it sends the answer
back through runs.engine.run_answer with the step's stepId, so one answer never lands on two steps:

- the MCP host (advance_run and the advance_* tools) answers AI steps;
- a person (resume_run, the run page) answers human steps;
- a subworkflow node waits for its child run, whose own steps are answered by this same table;
- the operator's model backend (ATRIUM_MODEL_BACKEND_URL, an OpenAI-compatible chat completions
  API) answers the ai_agent and ai_judge steps of runs started by a trigger, which have no host
  present. Without a backend, or when it failed, those steps wait for a host like any other:
  any MCP client of the owner can answer them.

The engine calls `after_pause` each time it leaves a run paused. When the model is to answer, the
answer is handed to a Celery task (runs.tasks.step_answer) once the transaction commits, or, with
no broker, given here and now. `pending_answer` calls the backend outside every row lock (a model
may take a minute; the run must stay answerable and cancellable meanwhile), then applies the
answer as a host would; a step it could not answer is left to a host with the reason recorded in
the node's state (state["answerer"]), which `waiting_for` reports.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from core.caller import Caller
from runs import engine
from runs.handlers import HANDLERS
from runs.models import NodeRun, Run
from runs.nodes import AnswerRejected
from workflows.scoping import Scope

logger = logging.getLogger(__name__)

MODEL, HOST, PERSON, CHILD = "model", "host", "person", "child"

# Node type -> who may answer it, first choice first: the first that can, does. A host can always
# answer what the model would; a person's choice and a child run's ending are no one else's.
ANSWERERS: dict[str, tuple[str, ...]] = {
    "ai_agent": (MODEL, HOST),
    "ai_judge": (MODEL, HOST),
    "consensus": (HOST,),
    "round_robin": (HOST,),
    "map": (HOST,),
    "human": (PERSON,),
    "subworkflow": (CHILD,),
}
if set(ANSWERERS) != {*HANDLERS, "subworkflow"}:
    raise ImproperlyConfigured(f"runs.answerers knows {sorted(ANSWERERS)}; the pausing node types are "
                       f"{sorted({*HANDLERS, 'subworkflow'})}.")

# An answer the engine refuses (an ai_judge answer that is not the envelope) is sent back to the
# model with the refusal this many times before the step is left to a host.
ANSWER_RETRIES = 2
# How often a failing backend is tried again (by Celery, with backoff) before a host is left the step.
BACKEND_RETRIES = 3
BACKOFF_SECONDS = 5
# A completion larger than this is refused rather than read into memory.
MAX_RESPONSE_BYTES = 1_000_000
# How much of a failing backend's reply is kept as the reason.
ERROR_EXCERPT = 300

HOST_HOW = "any MCP client of the owner can answer it with get_run_status and {tool}"


def backend_configured() -> bool:
    return bool(settings.ATRIUM_MODEL_BACKEND_URL)


def _answerer_state(node_run: NodeRun) -> dict[str, Any]:
    value = node_run.state.get("answerer") if isinstance(node_run.state, dict) else None
    return value if isinstance(value, dict) else {}


def _model_can_answer(run: Run, node_run: NodeRun) -> bool:
    return (run.trigger_id is not None and run.kind == Run.Kind.REAL and backend_configured()
            and _answerer_state(node_run).get("who") != HOST)


def answerer_for(run: Run, node_run: NodeRun) -> str:
    """Who answers this paused step of the run: "model", "host", "person" or "child"."""
    choices = ANSWERERS.get(node_run.node_type, (HOST,))
    for who in choices:
        if who != MODEL or _model_can_answer(run, node_run):
            return who
    return HOST


def waiting_for(run: Run) -> dict[str, str] | None:
    """Who the paused run waits for, in words: {"who", "message"}; None when it waits for no one."""
    if run.status != Run.Status.PAUSED:
        return None
    node_run = engine.paused_node(run)
    if node_run is None:
        return None
    who = answerer_for(run, node_run)
    if who == CHILD:
        child = Run.objects.filter(pk=node_run.input.get("childRunId")).first()
        inner = waiting_for(child) if child is not None else None
        message = f"Waiting for the child run {node_run.input.get('childRunId')} to end."
        return {"who": CHILD, "message": f"{message} {inner['message']}" if inner else message}
    if who == PERSON:
        return {"who": PERSON, "message": "Waiting for a person: the owner chooses on the run page, or through an "
                                          "MCP client with resume_run."}
    state = _answerer_state(node_run)
    if who == MODEL:
        message = f"Waiting for the model backend ({_backend_model(node_run)}): it answers this " \
                  f"{node_run.node_type} step of a run a trigger started; a host may answer it first with " \
                  f"{HANDLERS[node_run.node_type].tool} and its stepId."
        if state.get("error"):
            message += f" Its last attempt failed ({state['error']}); it tries again shortly."
        return {"who": MODEL, "message": message}
    how = HOST_HOW.format(tool=HANDLERS[node_run.node_type].tool)
    if run.trigger_id is None:
        return {"who": HOST, "message": f"Waiting for your MCP client: it answers this {node_run.node_type} step "
                                        f"with {HANDLERS[node_run.node_type].tool}."}
    if state.get("error"):
        reason = f"the model backend could not answer it ({state['error']})"
    elif MODEL not in ANSWERERS[node_run.node_type]:
        reason = f"the model backend answers ai_agent and ai_judge steps, not {node_run.node_type} steps"
    elif not backend_configured():
        reason = "no model backend is configured on this server"
    else:
        reason = "the model backend left it to a host"
    return {"who": HOST, "message": f"Waiting for a host: {reason}; {how}."}


# A step handed to the model whose task was lost (its worker died after taking it) would say it waits
# for the model for ever: a paused step of the model's that nothing has touched for this long is sent
# again. Sending twice is safe: an answer names its step, and a second one finds it answered.
MODEL_STEP_STALE_SECONDS = 600


def model_steps_resend(*, now: Any = None) -> int:
    """Send again the model's paused steps that nothing has touched for MODEL_STEP_STALE_SECONDS.
    Runs periodically (runs.tasks.model_steps_resend); returns how many it sent."""
    if not backend_configured():
        return 0
    now = now or timezone.now()
    stale = Run.objects.filter(status=Run.Status.PAUSED, kind=Run.Kind.REAL, trigger__isnull=False,
                               updated_at__lt=now - timedelta(seconds=MODEL_STEP_STALE_SECONDS))
    sent = 0
    for run_id, updated_at in list(stale.values_list("pk", "updated_at")[:200]):
        if _model_step(run_id) is None:
            continue
        # Claimed by moving updated_at on: two reapers at once send it once, and it waits its full
        # stale time again before the next resend.
        if not Run.objects.filter(pk=run_id, updated_at=updated_at).update(updated_at=now):
            continue
        after_pause(run_id)
        sent += 1
    return sent


# --- handing the answer off ------------------------------------------------------------------------

# The runs this thread is answering for the model right now: an answer drives the run on, and when
# it pauses at the model's next step the engine calls after_pause again, inside the answer. That
# step is queued here and answered by the loop in pending_answer, instead of recursing through
# drive -> run_answer -> drive for every step of a long run.
_answering = threading.local()


def _model_step(run_id: str) -> str | None:
    """The stepId of the run's paused step when the model is to answer it."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.status != Run.Status.PAUSED:
        return None
    node_run = engine.paused_node(run)
    return node_run.step_id if node_run is not None and answerer_for(run, node_run) == MODEL else None


def after_pause(run_id: str) -> None:
    """The engine left the run paused: when its step is the model's, have the model answer it."""
    step_id = _model_step(run_id) if backend_configured() else None
    if step_id is None:
        return
    queue = getattr(_answering, "queue", None)
    if queue is not None:
        if run_id not in queue:
            queue.append(run_id)
        return
    from runs.tasks import step_answer

    if step_answer.app.conf.task_always_eager:
        try:
            _answer_here(run_id)
        except Exception:
            # Whoever drove the run (a host's answer, a trigger firing) did nothing wrong; the step
            # stays paused, answerable by a host.
            logger.exception("The model backend could not answer run %s", run_id)
        return
    def send() -> None:
        try:
            step_answer.delay(run_id)
        except Exception as exc:  # kombu's OperationalError, or the transport's own connection errors
            # Nothing would ever answer the step for the model: say so, and leave it to a host.
            logger.warning("Could not send run %s to a worker for the model backend (%s)", run_id, exc)
            backend_gave_up(run_id, step_id=step_id, error=f"the task queue could not be reached "
                                                           f"({exc.__class__.__name__})")

    # Sent once the run's pause is committed, so the worker finds the step it is sent for.
    transaction.on_commit(send)


def _answer_here(run_id: str) -> None:
    """Without a broker there is no worker to try a failing backend again later: it is tried as
    often as runs.tasks.step_answer would, but at once (a request must not sleep), then given up."""
    failed: BackendUnavailable | None = None
    for _ in range(BACKEND_RETRIES + 1):
        try:
            pending_answer(failed.run_id if failed else run_id)
            return
        except BackendUnavailable as exc:
            failed = exc
    assert failed is not None
    backend_gave_up(failed.run_id, step_id=failed.step_id, error=failed.message)


class BackendUnavailable(Exception):
    """The model backend failed in a way worth trying again later (down, overloaded, timed out)."""

    def __init__(self, message: str, *, run_id: str, step_id: str) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id
        self.step_id = step_id


def pending_answer(run_id: str) -> None:
    """Answer the run's paused step when it is the model's, and every model step it reaches next
    (and a parent's, once a child run ends), one after another. Raises BackendUnavailable for the
    step the backend failed on, for the caller (runs.tasks.step_answer) to try again later."""
    if getattr(_answering, "queue", None) is not None:
        if run_id not in _answering.queue:
            _answering.queue.append(run_id)
        return
    queue: deque[str] = deque([run_id])
    _answering.queue = queue
    leftover: list[str] = []
    try:
        while queue:
            _answer_step(queue.popleft())
    except BackendUnavailable:
        leftover = list(queue)
        raise
    finally:
        _answering.queue = None
        for other in leftover:
            after_pause(other)


def backend_gave_up(run_id: str, *, step_id: str, error: str) -> None:
    """The backend failed on this step every time it was tried: the step is left to a host."""
    _note(run_id, step_id, {"who": HOST, "error": error})


def backoff_seconds(retries: int) -> int:
    return BACKOFF_SECONDS * 2 ** retries


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None


class BackendFailed(Exception):
    """The backend answered with an error; `retryable` when trying again later may help."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


def _backend_model(node_run: NodeRun) -> str:
    return settings.ATRIUM_MODEL_BACKEND_MODEL or str(node_run.input.get("model") or "")


def _messages(node_type: str, prompt: str, verdicts: list[str]) -> list[dict[str, str]]:
    if node_type == "ai_judge":
        system = ("You judge one step of an automated workflow run. Answer with a JSON object and nothing else: "
                  '{"verdict": "<one of: ' + ", ".join(verdicts) + '>", "reasoning": "<one or two sentences>"}.')
    else:
        system = ("You carry out one step of an automated workflow run; nobody is there to ask. Answer with the "
                  "result the step asks for and nothing else.")
    return [{"role": "system", "content": system}, {"role": "user", "content": prompt}]


def _scrubbed(text: str) -> str:
    key = settings.ATRIUM_MODEL_BACKEND_KEY
    return text.replace(key, "[key]") if key else text


def _token_count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def completion_request(*, model: str, messages: list[dict[str, str]]) -> Completion:
    """One chat completion from the backend. Raises BackendFailed."""
    headers = {"Content-Type": "application/json"}
    if settings.ATRIUM_MODEL_BACKEND_KEY:
        headers["Authorization"] = f"Bearer {settings.ATRIUM_MODEL_BACKEND_KEY}"
    body = {"model": model, "messages": messages}
    url = f"{settings.ATRIUM_MODEL_BACKEND_URL}/chat/completions"
    try:
        with httpx.Client(timeout=settings.ATRIUM_MODEL_BACKEND_TIMEOUT_SECONDS, follow_redirects=False) as client, \
                client.stream("POST", url, headers=headers, content=json.dumps(body)) as response:
            raw = bytearray()
            for chunk in response.iter_bytes():
                raw += chunk
                if len(raw) > MAX_RESPONSE_BYTES:
                    raise BackendFailed(f"its answer was larger than {MAX_RESPONSE_BYTES} bytes", retryable=False)
            status = response.status_code
    except httpx.TimeoutException:
        raise BackendFailed(f"it did not answer within {settings.ATRIUM_MODEL_BACKEND_TIMEOUT_SECONDS:g} s",
                            retryable=True) from None
    except httpx.HTTPError as exc:
        raise BackendFailed(_scrubbed(f"it could not be reached: {exc.__class__.__name__}: {exc}"),
                            retryable=True) from None
    if status >= 300:
        excerpt = bytes(raw[:ERROR_EXCERPT]).decode("utf-8", "replace").strip()
        # Overload, rate limits and server errors pass; a refused request or key will not.
        raise BackendFailed(_scrubbed(f"it answered HTTP {status}: {excerpt}" if excerpt else
                                      f"it answered HTTP {status}"),
                            retryable=status in (408, 409, 425, 429) or status >= 500)
    try:
        data = json.loads(bytes(raw))
        text = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise BackendFailed("its answer was not a chat completion", retryable=False) from None
    if not isinstance(text, str):
        raise BackendFailed("its answer had no text", retryable=False)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Completion(text=text, prompt_tokens=_token_count(usage.get("prompt_tokens")),
                      completion_tokens=_token_count(usage.get("completion_tokens")))


def _note(run_id: str, step_id: str, answerer: dict[str, Any]) -> None:
    """Record how the model fared on the step, when it is still the pending one."""
    with transaction.atomic():
        run = engine.run_locked(run_id)
        node_run = engine.paused_node(run) if run.status == Run.Status.PAUSED else None
        if node_run is None or node_run.step_id != step_id:
            return
        node_run.state = {**node_run.state, "answerer": answerer}
        node_run.save(update_fields=["state"])
        # The run page re-reads itself when the run row changes.
        Run.objects.filter(pk=run_id).update(updated_at=timezone.now())


def _answer_step(run_id: str) -> None:
    run = Run.objects.select_related("owner", "project").filter(pk=run_id).first()
    if run is None or run.status != Run.Status.PAUSED:
        return
    node_run = engine.paused_node(run)
    if node_run is None or answerer_for(run, node_run) != MODEL:
        return
    step_id = node_run.step_id
    if engine.run_stop_at_caps(run_id, step_id=step_id):
        return
    node = run.definition["nodes"][node_run.node_id]
    messages = _messages(node_run.node_type, str(node_run.input.get("prompt", "")), list(node.get("verdicts", [])))
    model = _backend_model(node_run)
    spent_in, spent_out, reported = 0, 0, False
    refusal = ""
    for _ in range(ANSWER_RETRIES + 1):
        try:
            completion = completion_request(model=model, messages=messages)
        except BackendFailed as exc:
            if exc.retryable:
                failures = int(_answerer_state(node_run).get("failures", 0)) + 1
                _note(run_id, step_id, {"error": exc.message, "failures": failures})
                raise BackendUnavailable(exc.message, run_id=run_id, step_id=step_id) from None
            backend_gave_up(run_id, step_id=step_id, error=exc.message)
            return
        # Refused answers cost tokens too: the answer that is applied carries all the step cost.
        if completion.prompt_tokens is not None or completion.completion_tokens is not None:
            reported = True
            spent_in += completion.prompt_tokens or 0
            spent_out += completion.completion_tokens or 0
        payload: dict[str, Any] = {"response": completion.text, "model": model}
        if reported:
            payload["usage"] = {"inputTokens": spent_in, "outputTokens": spent_out}
        try:
            engine.run_answer(caller=Caller.trusted(run.owner, via="task"),
                              scope=Scope(owner=run.owner, project=run.project), run_id=run_id, tool="advance_run",
                              payload=payload, step_id=step_id)
            return
        except AnswerRejected as exc:
            refusal = exc.message
        except engine.RunError as exc:
            if exc.code in ("not_waiting", "run_terminal"):
                return  # answered meanwhile (a host, another worker) or stopped: nothing to do
            refusal = exc.message
        messages = [*messages, {"role": "assistant", "content": completion.text},
                    {"role": "user", "content": f"That answer was refused: {refusal} Answer again."}]
    _note(run_id, step_id, {"who": HOST, "error": f"its answer was refused {ANSWER_RETRIES + 1} times; the last "
                                                 f"refusal: {refusal}",
                            "unappliedUsage": {"inputTokens": spent_in, "outputTokens": spent_out}})
