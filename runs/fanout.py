"""Fan-out nodes: consensus, round_robin and map.

Each pauses once per phase with `agents` (one {model, prompt} per independent subagent the host
must run now) and takes every answer of that phase back in one call. Everything a later phase
needs (who answered what, which matchups are outstanding) lives in the NodeRun's `state`, so a
paused node survives a restart and the engine can rebuild its pending step from the row alone.
The agents of the current phase are `state["agents"]`, each {index, model, prompt}: `index` is
the agent's place in the whole node, which a retry or a later wave keeps.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from runs.nodes import AnswerRejected, Ctx, Handler, Step, judge_envelope
from workflows.definition import DEFAULT_MAP_MAX_ITEMS, agent_count
from workflows.expressions import EvaluationError

MAX_VOTE_RETRIES = 2
# 20 candidates are 190 matchups (380 contested): past that a tournament costs more than it tells.
MAX_CANDIDATES = 20
FENCE_RE = re.compile(r"```[A-Za-z]*[ \t]*\n(.*?)```", re.S)
AGGREGATE_FORMAT = '{"reasoning": "...", "index": N}'
MATCHUP_FORMAT = '{"winner": "A" or "B", "margin": 0-100, "reasoning": "..."}'
RESOLVE_INSTRUCTION = "\n\nAnswer with a JSON array of the candidates, and nothing else."
EXTRACT_INSTRUCTION = "\n\nAnswer with a JSON array of items (one per branch to run), and nothing else."


# --- shared by the three node types ---------------------------------------------------------------

@dataclass(frozen=True)
class Reply:
    """One subagent's answer as the host returned it; usage and thinking are optional extras."""

    raw: str
    usage: dict[str, Any] | None = None
    thinking: str | None = None


def _replies(results: Any, expected: int) -> list[Reply]:
    """Exactly one {raw} per agent of the phase, or the whole answer is refused."""
    count = len(results) if isinstance(results, list) else 0
    if count != expected:
        raise AnswerRejected(f"This step has {expected} agent{'s' if expected != 1 else ''}, so it needs "
                             f"{expected} result{'s' if expected != 1 else ''} (one per agent, in agents[] order); "
                             f"got {count}.")
    replies = []
    for position, result in enumerate(results):
        raw = result.get("raw") if isinstance(result, dict) else None
        if not isinstance(raw, str):
            raise AnswerRejected(f'results[{position}] must be {{"raw": "<the agent\'s answer>"}}.')
        usage, thinking = result.get("usage"), result.get("thinking")
        replies.append(Reply(raw, usage if isinstance(usage, dict) else None,
                             thinking if isinstance(thinking, str) else None))
    return replies


def _agent(index: int, model: str, prompt: str) -> dict[str, Any]:
    return {"index": index, "model": model, "prompt": prompt}


def _set_phase(ctx: Ctx, phase: str, agents: list[dict[str, Any]], prompt: str) -> None:
    ctx.state.update(phase=phase, agents=agents, prompt=prompt)


def _fanout_fields(ctx: Ctx) -> dict[str, Any]:
    agents = ctx.state["agents"]
    return {"prompt": ctx.state["prompt"], "model": ctx.model, "agentCount": len(agents),
            "agents": [{"model": a["model"], "prompt": a["prompt"]} for a in agents]}


def _record(ctx: Ctx, agent: dict[str, Any], reply: Reply, phase: str) -> None:
    ctx.record(prompt=agent["prompt"], response=reply.raw, phase=phase, agent_index=agent["index"],
               usage=reply.usage, thinking=reply.thinking, model=agent["model"])


def _json_in(raw: str, opener: str, closer: str) -> Any:
    """The JSON value in a model's answer: the whole text, a fenced block, or the outermost
    opener...closer span (models like to wrap JSON in a sentence). None when there is none."""
    text = raw.strip()
    fenced = FENCE_RE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    start, end = text.find(opener), text.rfind(closer)
    if not 0 <= start < end:
        return None
    try:
        return json.loads(text[start:end + 1])
    except json.JSONDecodeError:
        return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _described(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"


# --- consensus ------------------------------------------------------------------------------------

def _vote_instruction(verdicts: list[str]) -> str:
    return ('\n\nAnswer only with JSON, nothing else: {"verdict": "<one of: ' + ", ".join(verdicts)
            + '>", "reasoning": "..."}')


def _aggregate_prompt(task: str, answers: list[str]) -> str:
    numbered = "\n\n".join(f"[{i}]\n{answer}" for i, answer in enumerate(answers))
    return (f"Independent agents each answered this task:\n\n{task}\n\nTheir answers:\n\n{numbered}\n\n"
            "Pick the answer most consistent with the others: the one whose content the most answers agree "
            f"with. Answer only with JSON, nothing else: {AGGREGATE_FORMAT}, where N is the answer's number.")


class Consensus(Handler):
    """mode vote: every agent answers the verdict envelope and a verdict wins with a quorum; answers
    that are not a valid envelope are asked again (twice at most) while they could still make one.
    mode usc: every agent answers freely, then one agent picks the most consistent answer."""

    tool = "advance_consensus"

    def enter(self, ctx: Ctx) -> Step | None:
        prompt = ctx.render(ctx.node["prompt"])
        agents = self._agents(ctx, prompt)
        if ctx.node.get("mode", "vote") == "usc":
            _set_phase(ctx, "generate", agents, prompt)
            return None
        instruction = _vote_instruction(ctx.node["verdicts"])
        _set_phase(ctx, "vote", [{**a, "prompt": a["prompt"] + instruction} for a in agents], prompt + instruction)
        ctx.state.update(votes=[], retries=0)
        return None

    def _agents(self, ctx: Ctx, prompt: str) -> list[dict[str, Any]]:
        spec = ctx.node["agents"]
        if _is_int(spec):
            return [_agent(i, ctx.model, prompt) for i in range(spec)]
        return [_agent(i, entry.get("model") or ctx.model, ctx.render(entry["prompt"]) if entry.get("prompt")
                       else prompt) for i, entry in enumerate(spec)]

    def pending(self, ctx: Ctx) -> dict[str, Any]:
        return {**_fanout_fields(ctx), "consensusPhase": ctx.state["phase"]}

    def answer(self, ctx: Ctx, payload: dict[str, Any]) -> Step:
        replies = _replies(payload.get("results"), len(ctx.state["agents"]))
        match ctx.state["phase"]:
            case "generate":
                return self._generated(ctx, replies)
            case "aggregate":
                return self._aggregated(ctx, replies[0])
            case _:
                return self._voted(ctx, replies)

    def _voted(self, ctx: Ctx, replies: list[Reply]) -> Step:
        state, verdicts = ctx.state, ctx.node["verdicts"]
        invalid = []
        for agent, reply in zip(state["agents"], replies, strict=True):
            _record(ctx, agent, reply, state["phase"])
            try:
                envelope = judge_envelope(reply.raw, verdicts)
            except AnswerRejected:
                invalid.append(agent)
                continue
            state["votes"].append({"agent": agent["index"], **envelope})
        votes = sorted(state["votes"], key=lambda vote: vote["agent"])
        tally = Counter(vote["verdict"] for vote in votes)
        best = max(verdicts, key=lambda verdict: tally[verdict])  # ties go to the first listed verdict
        quorum = ctx.node.get("quorum") or agent_count(ctx.node) // 2 + 1
        if tally[best] >= quorum:
            return Step(event=best, output={"verdict": best, "votes": votes})
        # Asking again is worth it only when the missing votes could still make a quorum.
        if invalid and tally[best] + len(invalid) >= quorum and state["retries"] < MAX_VOTE_RETRIES:
            state["retries"] += 1
            _set_phase(ctx, "retry", invalid, invalid[0]["prompt"] if len(invalid) == 1 else state["prompt"])
            return Step()
        return Step(event="no_consensus", output={"verdict": None, "votes": votes})

    def _generated(self, ctx: Ctx, replies: list[Reply]) -> Step:
        answers = []
        for agent, reply in zip(ctx.state["agents"], replies, strict=True):
            _record(ctx, agent, reply, "generate")
            if reply.raw.strip():
                answers.append(reply.raw)
        if not answers:
            return Step(event="no_consensus", output={"output": None, "index": None})
        if len(answers) == 1:  # nothing to weigh it against: an aggregate call would only cost money
            return Step(event="done", output={"output": answers[0], "index": 0})
        prompt = _aggregate_prompt(ctx.state["prompt"], answers)
        ctx.state["answers"] = answers
        _set_phase(ctx, "aggregate", [_agent(0, ctx.model, prompt)], prompt)
        return Step()

    def _aggregated(self, ctx: Ctx, reply: Reply) -> Step:
        answers = ctx.state["answers"]
        choice = _json_in(reply.raw, "{", "}")
        index = choice.get("index") if isinstance(choice, dict) else None
        if not _is_int(index) or not 0 <= index < len(answers):
            raise AnswerRejected(f"The aggregate answer must be JSON {AGGREGATE_FORMAT} with N from 0 to "
                                 f"{len(answers) - 1}; the node stays in its aggregate phase.")
        _record(ctx, ctx.state["agents"][0], reply, "aggregate")
        return Step(event="done", output={"output": answers[index], "index": index})


# --- round_robin ----------------------------------------------------------------------------------

# (matchup, verdict as sent, index of the winning candidate)
Judged = tuple[dict[str, Any], dict[str, Any], int]


def _pairs(count: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(count) for j in range(i + 1, count)]


def _matchup_prompt(criterion: str, a: str, b: str) -> str:
    return (f"Compare two candidates on this criterion:\n{criterion}\n\nCandidate A:\n{a}\n\nCandidate B:\n{b}\n\n"
            "Pick the better one (no ties) and say how decisive the difference is, from 0 (a coin toss) to 100 "
            f"(no contest). Answer only with JSON, nothing else: {MATCHUP_FORMAT}")


def _ranked(candidates: list[Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """Most wins first, then the larger summed margin of those wins, then the original order."""
    wins, margins = [0] * len(candidates), [0] * len(candidates)
    for result in results:
        wins[result["winner"]] += 1
        margins[result["winner"]] += result["margin"]
    order = sorted(range(len(candidates)), key=lambda i: (-wins[i], -margins[i], i))
    ranking = [candidates[i] for i in order]
    return {"winner": ranking[0], "ranking": ranking,
            "scores": [{"candidate": candidates[i], "wins": wins[i], "margin": margins[i]} for i in order]}


def _winner_side(matchup: dict[str, Any], winner: Any) -> int:
    """The index of the candidate a verdict picks: "A"/"B" in any case, or that candidate's exact text."""
    if isinstance(winner, str):
        if winner.strip().upper() == "A" or winner == matchup["a"]:
            return matchup["first"]
        if winner.strip().upper() == "B" or winner == matchup["b"]:
            return matchup["second"]
    raise AnswerRejected(f'The winner of {matchup["id"]} must be "A" or "B" (got {winner!r}).')


class RoundRobin(Handler):
    """Every pair of candidates judged once (first) or both ways round (contested), in waves the
    host may split as its subagents finish; optionally after a resolve phase that lists them."""

    tool = "advance_round_robin"

    def enter(self, ctx: Ctx) -> Step | None:
        ctx.state["criterion"] = ctx.render(ctx.node["criterion"])
        if "resolve" in ctx.node:
            prompt = ctx.render(ctx.node["resolve"]) + RESOLVE_INSTRUCTION
            _set_phase(ctx, "resolve", [_agent(0, ctx.model, prompt)], prompt)
            return None
        candidates = ctx.value(ctx.node["candidates"])
        if not isinstance(candidates, list):
            raise ValueError(f"round_robin candidates must be a list; {ctx.node['candidates']!r} gave "
                             f"{_described(candidates)}.")
        if not candidates:
            raise ValueError("round_robin has no candidates to compare.")
        return self._start(ctx, candidates)

    def _start(self, ctx: Ctx, candidates: list[Any]) -> Step | None:
        if len(candidates) > MAX_CANDIDATES:
            raise ValueError(f"round_robin can compare at most {MAX_CANDIDATES} candidates; it got {len(candidates)}.")
        if len(candidates) == 1:
            return Step(event="done", output=_ranked(candidates, []))
        ctx.state.update(candidates=candidates, results=[], reversed=False)
        self._issue(ctx, [(f"m{i}-{j}", i, j) for i, j in _pairs(len(candidates))])
        return None

    def _issue(self, ctx: Ctx, pairs: list[tuple[str, int, int]]) -> None:
        """Open a batch of matchups; the outstanding matchups are the phase's agents."""
        candidates, criterion = ctx.state["candidates"], ctx.state["criterion"]
        issued = len(ctx.state["results"])
        agents = []
        for offset, (matchup_id, first, second) in enumerate(pairs):
            a, b = _text(candidates[first]), _text(candidates[second])
            agents.append({**_agent(issued + offset, ctx.model, _matchup_prompt(criterion, a, b)),
                           "id": matchup_id, "a": a, "b": b, "first": first, "second": second})
        _set_phase(ctx, ctx.node.get("mode", "first"), agents,
                   _matchup_prompt(criterion, "(each matchup's a)", "(each matchup's b)"))

    def pending(self, ctx: Ctx) -> dict[str, Any]:
        fields = {**_fanout_fields(ctx), "roundRobinPhase": ctx.state["phase"]}
        if ctx.state["phase"] == "resolve":
            return fields
        return {**fields, "criterion": ctx.state["criterion"],
                "matchups": [{"id": m["id"], "a": m["a"], "b": m["b"]} for m in ctx.state["agents"]]}

    def answer(self, ctx: Ctx, payload: dict[str, Any]) -> Step:
        verdicts, result = payload.get("verdicts"), payload.get("result")
        if ctx.state["phase"] == "resolve":
            if verdicts or result is None:
                raise AnswerRejected("This round_robin step is in its resolve phase: send result: {raw} with the "
                                     "agent's JSON array of candidates, not verdicts.")
            return self._resolved(ctx, result)
        if result is not None or not verdicts:
            raise AnswerRejected("This round_robin step is judging matchups: send verdicts: [{id, winner, margin, "
                                 "reasoning?}] for outstanding matchups, not result.")
        return self._judged(ctx, verdicts)

    def _resolved(self, ctx: Ctx, result: Any) -> Step:
        raw = result.get("raw") if isinstance(result, dict) else None
        candidates = _json_in(raw, "[", "]") if isinstance(raw, str) else None
        if not isinstance(candidates, list) or not candidates or len(candidates) > MAX_CANDIDATES:
            raise AnswerRejected(f"The resolve answer must be a JSON array of 1 to {MAX_CANDIDATES} candidates.")
        _record(ctx, ctx.state["agents"][0], Reply(raw), "resolve")
        return self._start(ctx, candidates) or Step()

    def _judged(self, ctx: Ctx, verdicts: list[Any]) -> Step:
        # Check the whole wave before applying any of it, so a refused call changes nothing.
        accepted = self._checked(ctx.state["agents"], verdicts)
        answered = set()
        for matchup, verdict, winner in accepted:
            _record(ctx, matchup, Reply(json.dumps(verdict, ensure_ascii=False)), ctx.state["phase"])
            ctx.state["results"].append({"id": matchup["id"], "winner": winner, "margin": verdict["margin"]})
            answered.add(matchup["id"])
        ctx.state["agents"] = [m for m in ctx.state["agents"] if m["id"] not in answered]
        if ctx.state["agents"]:
            return Step()
        if ctx.state["phase"] == "contested" and not ctx.state["reversed"]:
            ctx.state["reversed"] = True
            self._issue(ctx, [(f"m{i}-{j}r", j, i) for i, j in _pairs(len(ctx.state["candidates"]))])
            return Step()
        return Step(event="done", output=_ranked(ctx.state["candidates"], ctx.state["results"]))

    def _checked(self, outstanding: list[dict[str, Any]], verdicts: list[Any]) -> list[Judged]:
        """Each verdict with its matchup and the index of the candidate it picks."""
        by_id = {m["id"]: m for m in outstanding}
        accepted: list[Judged] = []
        for verdict in verdicts:
            if not isinstance(verdict, dict):
                raise AnswerRejected("Each verdict must be {id, winner, margin, reasoning?}.")
            matchup_id = verdict.get("id")
            matchup = by_id.pop(matchup_id, None) if isinstance(matchup_id, str) else None
            if matchup is None:
                raise AnswerRejected(f"{matchup_id!r} is not an outstanding matchup (unknown, or already "
                                     f"answered); outstanding: {', '.join(m['id'] for m in outstanding)}.")
            winner = _winner_side(matchup, verdict.get("winner"))
            margin = verdict.get("margin")
            if not _is_number(margin) or not 0 <= margin <= 100:
                raise AnswerRejected(f"The margin of {matchup_id} must be a number from 0 to 100 (got {margin!r}).")
            accepted.append((matchup, verdict, winner))
        return accepted


# --- map ------------------------------------------------------------------------------------------

class Map(Handler):
    """One subagent per item (from `items`, or from an extract phase), then an optional reduce."""

    tool = "advance_map"

    def enter(self, ctx: Ctx) -> Step | None:
        if "extract" in ctx.node:
            prompt = ctx.render(ctx.node["extract"]) + EXTRACT_INSTRUCTION
            _set_phase(ctx, "extract", [_agent(0, ctx.model, prompt)], prompt)
            return None
        items = ctx.value(ctx.node["items"])
        if not isinstance(items, list):
            raise ValueError(f"map items must be a list; {ctx.node['items']!r} gave {_described(items)}.")
        return self._branch(ctx, items)

    def _branch(self, ctx: Ctx, items: list[Any]) -> Step | None:
        items = items[:ctx.node.get("maxItems", DEFAULT_MAP_MAX_ITEMS)]
        if not items:
            return Step(event="failed", output={"results": []})
        agents = [_agent(i, ctx.model, ctx.render(ctx.node["prompt"], item=item, index=i))
                  for i, item in enumerate(items)]
        ctx.state["items"] = items
        _set_phase(ctx, "map", agents, agents[0]["prompt"])
        return None

    def pending(self, ctx: Ctx) -> dict[str, Any]:
        return {**_fanout_fields(ctx), "mapPhase": ctx.state["phase"]}

    def answer(self, ctx: Ctx, payload: dict[str, Any]) -> Step:
        replies = _replies(payload.get("results"), len(ctx.state["agents"]))
        match ctx.state["phase"]:
            case "extract":
                return self._extracted(ctx, replies[0])
            case "map":
                return self._mapped(ctx, replies)
            case _:
                _record(ctx, ctx.state["agents"][0], replies[0], "reduce")
                return Step(event="done", output={"results": ctx.state["results"], "output": replies[0].raw})

    def _extracted(self, ctx: Ctx, reply: Reply) -> Step:
        items = _json_in(reply.raw, "[", "]")
        if not isinstance(items, list):
            raise AnswerRejected("The extract answer must be a JSON array of items.")
        agent = ctx.state["agents"][0]
        try:
            step = self._branch(ctx, items)
        except EvaluationError as exc:  # the items come from a model, so their shape may not fit the prompt
            raise AnswerRejected(f"The extracted items do not fit the node's prompt: {exc}") from exc
        _record(ctx, agent, reply, "extract")
        return step or Step()

    def _mapped(self, ctx: Ctx, replies: list[Reply]) -> Step:
        results = []
        for agent, item, reply in zip(ctx.state["agents"], ctx.state["items"], replies, strict=True):
            _record(ctx, agent, reply, "map")
            ok = bool(reply.raw.strip())
            results.append({"index": agent["index"], "item": item, "output": reply.raw if ok else None, "ok": ok})
        outputs = [r["output"] for r in results if r["ok"]]
        if not outputs:
            return Step(event="failed", output={"results": results})
        if "reduce" not in ctx.node:
            return Step(event="done", output={"results": results})
        prompt = ctx.render(ctx.node["reduce"], results=outputs)
        ctx.state["results"] = results
        _set_phase(ctx, "reduce", [_agent(0, ctx.model, prompt)], prompt)
        return Step()

