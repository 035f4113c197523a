"""How each pausing node type hands a step to its host and takes the answer back.

The engine (runs.engine) owns the run: locking, visits, transitions, costs and caps. A handler
owns one node visit: what the pending step shows (`pending`), and what an answer does
(`answer`): reject it (AnswerRejected, nothing applied), keep the node paused for the next phase
(Step with no event), or decide it (Step with the event to follow and the node's output).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.errors import DomainError
from runs.models import NodeRun, Run
from workflows import expressions


class AnswerRejected(DomainError):
    """The answer does not fit the pending step; the run stays where it was."""

    code = "answer_rejected"


@dataclass
class Step:
    event: str | None = None
    output: Any = None


@dataclass
class Ctx:
    """One visit of a run to a node, as a handler sees it."""

    run: Run
    node_run: NodeRun
    node: dict[str, Any]
    model: str
    # Records an answer: (prompt, response, phase, agent_index, usage, thinking, model).
    record: Callable[..., None] = field(repr=False, default=lambda **_: None)

    @property
    def scope(self) -> dict[str, Any]:
        return {**self.run.outputs, "context": self.run.context}

    def render(self, text: str, **local: Any) -> str:
        return expressions.template_render(text, {**self.scope, **local})

    def value(self, raw: Any, **local: Any) -> Any:
        """A list given as is, or the value a template yields."""
        if isinstance(raw, str):
            return expressions.template_value(raw, {**self.scope, **local})
        return raw

    @property
    def state(self) -> dict[str, Any]:
        return self.node_run.state


def judge_envelope(raw: str, verdicts: list[str]) -> dict[str, str]:
    """{"verdict": <one of verdicts>, "reasoning": "..."} from a raw answer (a fenced JSON block is fine)."""
    text = raw.strip()
    if text.startswith("```"):
        text = text.strip("`").split("\n", 1)[-1] if "\n" in text else text.strip("`")
        text = text.rsplit("```", 1)[0].strip()
    try:
        envelope = json.loads(text)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        try:
            envelope = json.loads(text[start:end + 1]) if 0 <= start < end else None
        except json.JSONDecodeError:
            envelope = None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("verdict"), str):
        raise AnswerRejected('The answer must be JSON: {"verdict": "<one of ' + ", ".join(verdicts)
                             + '>", "reasoning": "..."}.')
    if envelope["verdict"] not in verdicts:
        raise AnswerRejected(f"The verdict {envelope['verdict']!r} is not one of: {', '.join(verdicts)}.")
    return {"verdict": envelope["verdict"], "reasoning": str(envelope.get("reasoning", ""))}


class Handler:
    """A pausing node type. `tool` is the one tool that answers it."""

    tool = "advance_run"

    def enter(self, ctx: Ctx) -> Step | None:
        """Set the node's first phase up; a Step when the node is decided without pausing."""
        ctx.state["prompt"] = ctx.render(ctx.node["prompt"])
        return None

    def pending(self, ctx: Ctx) -> dict[str, Any]:
        return {"prompt": ctx.state["prompt"], "model": ctx.model}

    def answer(self, ctx: Ctx, payload: dict[str, Any]) -> Step:
        raise NotImplementedError


class AiAgent(Handler):
    def answer(self, ctx: Ctx, payload: dict[str, Any]) -> Step:
        response = payload["response"]
        ctx.record(prompt=ctx.state["prompt"], response=response, usage=payload.get("usage"),
                   thinking=payload.get("thinking"), model=payload.get("model"))
        return Step(event="done", output={"output": response})


class AiJudge(Handler):
    def answer(self, ctx: Ctx, payload: dict[str, Any]) -> Step:
        envelope = judge_envelope(payload["response"], ctx.node["verdicts"])
        ctx.record(prompt=ctx.state["prompt"], response=payload["response"], usage=payload.get("usage"),
                   thinking=payload.get("thinking"), model=payload.get("model"))
        return Step(event=envelope["verdict"], output=envelope)


class Human(Handler):
    tool = "resume_run"

    def pending(self, ctx: Ctx) -> dict[str, Any]:
        return {"prompt": ctx.state["prompt"]}

    def answer(self, ctx: Ctx, payload: dict[str, Any]) -> Step:
        choice = payload["transition"]
        if choice not in ctx.node["transitions"]:
            raise AnswerRejected(f"{choice!r} is not a choice here; choose one of: "
                                 f"{', '.join(ctx.node['transitions'])}.")
        ctx.record(prompt=ctx.state["prompt"], response=choice, phase="human", usage={"costUsd": 0})
        return Step(event=choice, output={"choice": choice})
