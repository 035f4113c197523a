"""Fan-out nodes over /mcp: consensus (vote and usc), round_robin and map, answered with their
advance_* tools the way a subagent-capable host answers them. Every refused answer leaves the run
exactly where it was."""

import json
from typing import Any

import pytest

from tests.conftest import McpClient, Member

pytestmark = pytest.mark.django_db

G = {"global": True}
DEFAULT_MODEL = "claude-sonnet-4-5"
VOTE_FORMAT = '{"verdict": "<one of: ship, hold>", "reasoning": "..."}'


class Roscoe:
    """Calls the run tools the way a client does and unpacks the JSON text block."""

    def __init__(self, member: Member) -> None:
        self.client = McpClient(member.token)
        self.client.initialize()

    def call(self, tool: str, **arguments: Any) -> tuple[bool, Any]:
        result = self.client.call(tool, arguments)
        return result["isError"], json.loads(result["content"][0]["text"])

    def ok(self, tool: str, **arguments: Any) -> Any:
        is_error, payload = self.call(tool, **G, **arguments)
        assert is_error is False and "code" not in payload, payload
        return payload

    def err(self, tool: str, **arguments: Any) -> dict[str, Any]:
        is_error, payload = self.call(tool, **G, **arguments)
        assert is_error is False and set(payload) >= {"error", "code"}, payload
        return payload

    def start(self, nodes: dict[str, Any], start: str, context: dict[str, Any] | None = None) -> dict[str, Any]:
        self.ok("create_workflow", id="fan", config={"name": "Fan", "start": start, "nodes": nodes})
        return self.ok("start_workflow", workflow_id="fan", context=context or {})

    def history(self, run_id: str) -> dict[str, Any]:
        return self.ok("get_run_history", run_id=run_id)

    def node(self, run_id: str, node_id: str) -> dict[str, Any]:
        return next(n for n in self.history(run_id)["nodes"] if n["nodeId"] == node_id)


@pytest.fixture
def roscoe(alice) -> Roscoe:
    return Roscoe(alice)


def raws(*answers: str) -> list[dict[str, str]]:
    return [{"raw": answer} for answer in answers]


def vote(verdict: str, reasoning: str = "because") -> str:
    return json.dumps({"verdict": verdict, "reasoning": reasoning})


def gate(**overrides: Any) -> dict[str, Any]:
    """A vote consensus between ship and hold, and where each outcome leads."""
    node = {"type": "consensus", "prompt": "Is {{ context.change }} safe to ship?", "agents": 3,
            "verdicts": ["ship", "hold"],
            "transitions": {"ship": "shipped", "hold": "held", "no_consensus": "stuck"}, **overrides}
    return {"gate": node, "shipped": {"type": "end", "output": {"verdict": "{{ gate.verdict }}"}},
            "held": {"type": "end"}, "stuck": {"type": "end", "status": "failed"}}


def verdict(matchup_id: str, winner: str, margin: float = 50) -> dict[str, Any]:
    return {"id": matchup_id, "winner": winner, "margin": margin, "reasoning": "clearer"}


def tournament(**overrides: Any) -> dict[str, Any]:
    node = {"type": "round_robin", "candidates": ["Alpha", "Beta", "Gamma"],
            "criterion": "Which name sounds {{ context.tone }}?", "transitions": {"done": "end"}, **overrides}
    return {"pick": node, "end": {"type": "end", "output": {"winner": "{{ pick.winner }}"}}}


def fan(**overrides: Any) -> dict[str, Any]:
    node = {"type": "map", "items": ["red", "green", "blue"], "prompt": "Describe {{ item }} (#{{ index }})",
            "transitions": {"done": "end", "failed": "recover"}, **overrides}
    return {"colours": node, "end": {"type": "end"},
            "recover": {"type": "ai_agent", "prompt": "Every branch failed; try another way.",
                        "transitions": {"done": "end"}}}


# --- consensus: vote --------------------------------------------------------------------------------

def test_a_vote_consensus_pauses_with_one_agent_per_vote_and_decides_on_a_majority(roscoe):
    started = roscoe.start(gate(), "gate", {"change": "v2"})
    step = started["pendingStep"]
    vote_prompt = "Is v2 safe to ship?\n\nAnswer only with JSON, nothing else: " + VOTE_FORMAT
    assert started["status"] == "paused"
    assert step["nodeType"] == "consensus"
    assert step["consensusPhase"] == "vote"
    assert step["agentCount"] == 3
    assert step["model"] == DEFAULT_MODEL
    assert step["prompt"] == vote_prompt
    assert step["agents"] == [{"model": DEFAULT_MODEL, "prompt": vote_prompt}] * 3
    assert step["validTransitions"] == ["ship", "hold", "no_consensus"]

    done = roscoe.ok("advance_consensus", run_id=started["runId"],
                     results=raws(vote("ship", "tests pass"), vote("hold", "risky"), vote("ship", "small diff")))

    assert done["status"] == "completed"
    assert done["output"] == {"verdict": "ship"}
    assert done["totalCostUsd"] > started["totalCostUsd"] == 0
    node = roscoe.node(started["runId"], "gate")
    assert node["status"] == "completed"
    assert node["event"] == "ship"
    assert node["output"] == {"verdict": "ship", "votes": [
        {"agent": 0, "verdict": "ship", "reasoning": "tests pass"},
        {"agent": 1, "verdict": "hold", "reasoning": "risky"},
        {"agent": 2, "verdict": "ship", "reasoning": "small diff"}]}
    assert [(t["phase"], t["agentIndex"], t["model"]) for t in node["turns"]] == [
        ("vote", 0, DEFAULT_MODEL), ("vote", 1, DEFAULT_MODEL), ("vote", 2, DEFAULT_MODEL)]
    assert node["turns"][1]["prompt"] == vote_prompt
    assert node["turns"][1]["response"] == vote("hold", "risky")


def test_a_split_vote_ends_in_no_consensus(roscoe):
    started = roscoe.start(gate(agents=4), "gate", {"change": "v2"})

    done = roscoe.ok("advance_consensus", run_id=started["runId"],
                     results=raws(vote("ship"), vote("hold"), vote("hold"), vote("ship")))

    assert done["status"] == "failed"
    assert done["stop_reason"] == "failed_end"
    node = roscoe.node(started["runId"], "gate")
    assert node["status"] == "failed"
    assert node["event"] == "no_consensus"
    assert node["output"]["verdict"] is None
    assert [v["verdict"] for v in node["output"]["votes"]] == ["ship", "hold", "hold", "ship"]
    assert roscoe.history(started["runId"])["nodes"][-1]["nodeId"] == "stuck"


def test_a_given_quorum_is_the_number_of_votes_a_verdict_needs(roscoe):
    started = roscoe.start(gate(quorum=3), "gate", {"change": "v2"})

    done = roscoe.ok("advance_consensus", run_id=started["runId"],
                     results=raws(vote("ship"), vote("hold"), vote("ship")))

    assert done["status"] == "failed"
    assert roscoe.node(started["runId"], "gate")["event"] == "no_consensus"


def test_invalid_votes_are_asked_again_of_only_those_agents_and_then_decide(roscoe):
    started = roscoe.start(gate(), "gate", {"change": "v2"})
    first_agents = started["pendingStep"]["agents"]

    retry = roscoe.ok("advance_consensus", run_id=started["runId"],
                      results=raws(vote("ship"), "Looks fine to me!", vote("maybe")))

    step = retry["pendingStep"]
    assert retry["status"] == "paused"
    assert step["consensusPhase"] == "retry"
    assert step["agentCount"] == 2
    assert step["agents"] == first_agents[1:]

    done = roscoe.ok("advance_consensus", run_id=started["runId"], results=raws(vote("ship", "ok"), vote("hold")))

    assert done["status"] == "completed"
    node = roscoe.node(started["runId"], "gate")
    assert [(v["agent"], v["verdict"]) for v in node["output"]["votes"]] == [(0, "ship"), (1, "ship"), (2, "hold")]
    assert [(t["phase"], t["agentIndex"]) for t in node["turns"]] == [
        ("vote", 0), ("vote", 1), ("vote", 2), ("retry", 1), ("retry", 2)]


def test_a_single_retried_agent_gets_its_own_prompt_as_the_step_prompt(roscoe):
    started = roscoe.start(gate(agents=[{"prompt": "As QA: is {{ context.change }} safe?"}, {}, {}]), "gate",
                           {"change": "v2"})

    retry = roscoe.ok("advance_consensus", run_id=started["runId"], results=raws("no idea", vote("ship"), vote("hold")))

    step = retry["pendingStep"]
    assert step["agentCount"] == 1
    assert step["prompt"] == step["agents"][0]["prompt"] == (
        "As QA: is v2 safe?\n\nAnswer only with JSON, nothing else: " + VOTE_FORMAT)


def test_votes_stay_invalid_after_two_retries_and_the_node_has_no_consensus(roscoe):
    started = roscoe.start(gate(), "gate", {"change": "v2"})
    run_id = started["runId"]

    phases = []
    result = started
    for _ in range(3):
        # The same answers each time: only the stepId says they are meant for the next step too.
        result = roscoe.ok("advance_consensus", run_id=run_id, results=raws("yes", "no", "{}"),
                           step_id=result["pendingStep"]["stepId"])
        phases.append(result.get("pendingStep", {}).get("consensusPhase"))

    assert phases == ["retry", "retry", None]
    assert result["status"] == "failed"
    node = roscoe.node(run_id, "gate")
    assert node["event"] == "no_consensus"
    assert node["output"] == {"verdict": None, "votes": []}
    assert [t["phase"] for t in node["turns"]] == ["vote"] * 3 + ["retry"] * 6


def test_invalid_votes_that_could_not_make_a_quorum_are_not_asked_again(roscoe):
    started = roscoe.start(gate(quorum=3), "gate", {"change": "v2"})

    done = roscoe.ok("advance_consensus", run_id=started["runId"], results=raws(vote("ship"), vote("hold"), "?"))

    assert done["status"] == "failed"
    assert roscoe.node(started["runId"], "gate")["event"] == "no_consensus"


def test_the_wrong_number_of_results_is_refused_and_nothing_is_applied(roscoe):
    started = roscoe.start(gate(), "gate", {"change": "v2"})

    error = roscoe.err("advance_consensus", run_id=started["runId"], results=raws(vote("ship"), vote("ship")))

    assert error["code"] == "answer_rejected"
    assert "3 agents" in error["error"] and "got 2" in error["error"]
    status = roscoe.ok("get_run_status", run_id=started["runId"])
    assert status["status"] == "paused"
    assert status["pendingStep"] == started["pendingStep"]
    assert status["totalCostUsd"] == 0
    assert roscoe.node(started["runId"], "gate")["turns"] == []


def test_a_result_without_raw_text_is_refused(roscoe):
    started = roscoe.start(gate(), "gate", {"change": "v2"})

    error = roscoe.err("advance_consensus", run_id=started["runId"],
                       results=[{"raw": vote("ship")}, {"text": vote("ship")}, {"raw": vote("ship")}])

    assert error["code"] == "answer_rejected"
    assert "results[1]" in error["error"]


def test_an_agents_list_gives_each_agent_its_own_model_and_prompt(roscoe):
    agents = [{"model": "claude-haiku-4-5", "prompt": "As a security reviewer: is {{ context.change }} safe?"},
              {"prompt": "As an SRE: is {{ context.change }} safe?"},
              {"model": "claude-opus-4-5"}]
    started = roscoe.start(gate(agents=agents), "gate", {"change": "v2"})
    instruction = "\n\nAnswer only with JSON, nothing else: " + VOTE_FORMAT

    assert started["pendingStep"]["agents"] == [
        {"model": "claude-haiku-4-5", "prompt": "As a security reviewer: is v2 safe?" + instruction},
        {"model": DEFAULT_MODEL, "prompt": "As an SRE: is v2 safe?" + instruction},
        {"model": "claude-opus-4-5", "prompt": "Is v2 safe to ship?" + instruction}]
    assert started["pendingStep"]["prompt"] == "Is v2 safe to ship?" + instruction

    roscoe.ok("advance_consensus", run_id=started["runId"], results=raws(vote("hold"), vote("hold"), vote("ship")))

    node = roscoe.node(started["runId"], "gate")
    assert node["event"] == "hold"
    assert [t["model"] for t in node["turns"]] == ["claude-haiku-4-5", DEFAULT_MODEL, "claude-opus-4-5"]


def test_reported_usage_is_charged_as_reported(roscoe):
    started = roscoe.start(gate(), "gate", {"change": "v2"})
    usage = {"inputTokens": 1000, "outputTokens": 100, "costUsd": 0.0125}

    done = roscoe.ok("advance_consensus", run_id=started["runId"],
                     results=[{"raw": vote("ship"), "usage": usage, "thinking": "Checked the diff."}] * 3)

    assert done["totalCostUsd"] == 0.0375
    assert done["inputTokens"] == 3000
    assert done["outputTokens"] == 300
    turn = roscoe.node(started["runId"], "gate")["turns"][0]
    assert turn["estimated"] is False
    assert turn["thinking"] == "Checked the diff."


def test_a_consensus_step_is_answered_only_by_advance_consensus(roscoe):
    started = roscoe.start(gate(), "gate", {"change": "v2"})

    error = roscoe.err("advance_run", run_id=started["runId"], response=vote("ship"))

    assert error["code"] == "wrong_tool"
    assert "advance_consensus" in error["error"]
    assert roscoe.ok("get_run_status", run_id=started["runId"])["pendingStep"] == started["pendingStep"]


# --- consensus: usc ---------------------------------------------------------------------------------

def capital(**overrides: Any) -> dict[str, Any]:
    node = {"type": "consensus", "mode": "usc", "prompt": "What is the capital of {{ context.country }}?",
            "agents": 3, "transitions": {"done": "end", "no_consensus": "stuck"}, **overrides}
    return {"ask": node, "end": {"type": "end", "output": {"answer": "{{ ask.output }}"}},
            "stuck": {"type": "end", "status": "failed"}}


def test_a_usc_consensus_generates_then_aggregates_to_the_most_consistent_answer(roscoe):
    started = roscoe.start(capital(), "ask", {"country": "France"})
    step = started["pendingStep"]
    assert step["consensusPhase"] == "generate"
    assert step["agentCount"] == 3
    assert step["prompt"] == "What is the capital of France?"
    assert step["agents"] == [{"model": DEFAULT_MODEL, "prompt": "What is the capital of France?"}] * 3

    aggregate = roscoe.ok("advance_consensus", run_id=started["runId"],
                          results=raws("Paris.", "  ", "It is Paris, France."))

    step = aggregate["pendingStep"]
    assert step["consensusPhase"] == "aggregate"
    assert step["agentCount"] == 1
    assert step["prompt"] == step["agents"][0]["prompt"]
    assert "What is the capital of France?" in step["prompt"]
    assert "[0]\nParis.\n\n[1]\nIt is Paris, France." in step["prompt"]
    assert '{"reasoning": "...", "index": N}' in step["prompt"]

    done = roscoe.ok("advance_consensus", run_id=started["runId"],
                     results=raws('Both agree; the second is fuller. {"reasoning": "fuller", "index": 1}'))

    assert done["status"] == "completed"
    assert done["output"] == {"answer": "It is Paris, France."}
    node = roscoe.node(started["runId"], "ask")
    assert node["output"] == {"output": "It is Paris, France.", "index": 1}
    assert [(t["phase"], t["agentIndex"]) for t in node["turns"]] == [
        ("generate", 0), ("generate", 1), ("generate", 2), ("aggregate", 0)]


@pytest.mark.parametrize("answer", ["I pick the first one.", '{"reasoning": "?", "index": 3}',
                                    '{"reasoning": "?", "index": "0"}'])
def test_an_invalid_aggregate_answer_is_refused_and_the_node_stays_in_aggregate(roscoe, answer):
    started = roscoe.start(capital(), "ask", {"country": "France"})
    aggregate = roscoe.ok("advance_consensus", run_id=started["runId"], results=raws("Paris", "Lyon", "Paris"))

    error = roscoe.err("advance_consensus", run_id=started["runId"], results=raws(answer))

    assert error["code"] == "answer_rejected"
    assert "from 0 to 2" in error["error"]
    status = roscoe.ok("get_run_status", run_id=started["runId"])
    assert status["pendingStep"] == aggregate["pendingStep"]
    assert status["pendingStep"]["consensusPhase"] == "aggregate"


def test_a_usc_consensus_with_no_answer_generated_has_no_consensus(roscoe):
    started = roscoe.start(capital(), "ask", {"country": "France"})

    done = roscoe.ok("advance_consensus", run_id=started["runId"], results=raws("", " \n", ""))

    assert done["status"] == "failed"
    node = roscoe.node(started["runId"], "ask")
    assert node["status"] == "failed"
    assert node["event"] == "no_consensus"
    assert node["output"] == {"output": None, "index": None}


def test_a_single_generated_answer_is_the_consensus_without_an_aggregate_call(roscoe):
    started = roscoe.start(capital(), "ask", {"country": "France"})

    done = roscoe.ok("advance_consensus", run_id=started["runId"], results=raws("", "Paris", ""))

    assert done["status"] == "completed"
    assert roscoe.node(started["runId"], "ask")["output"] == {"output": "Paris", "index": 0}


# --- round_robin ------------------------------------------------------------------------------------

def test_a_first_round_robin_judges_every_pair_once_in_waves_and_ranks_the_candidates(roscoe):
    started = roscoe.start(tournament(), "pick", {"tone": "bold"})
    run_id = started["runId"]
    step = started["pendingStep"]
    assert step["nodeType"] == "round_robin"
    assert step["roundRobinPhase"] == "first"
    assert step["criterion"] == "Which name sounds bold?"
    assert step["model"] == DEFAULT_MODEL
    assert step["matchups"] == [{"id": "m0-1", "a": "Alpha", "b": "Beta"}, {"id": "m0-2", "a": "Alpha", "b": "Gamma"},
                                {"id": "m1-2", "a": "Beta", "b": "Gamma"}]
    assert step["agentCount"] == 3
    first_prompt = step["agents"][0]["prompt"]
    assert "Which name sounds bold?" in first_prompt
    assert "Candidate A:\nAlpha\n\nCandidate B:\nBeta" in first_prompt
    assert '{"winner": "A" or "B", "margin": 0-100, "reasoning": "..."}' in first_prompt

    wave = roscoe.ok("advance_round_robin", run_id=run_id,
                     verdicts=[verdict("m0-1", "A", 20), verdict("m1-2", "a", 30)])

    step = wave["pendingStep"]
    assert wave["status"] == "paused"
    assert step["matchups"] == [{"id": "m0-2", "a": "Alpha", "b": "Gamma"}]
    assert step["agentCount"] == 1
    assert "Candidate A:\nAlpha\n\nCandidate B:\nGamma" in step["agents"][0]["prompt"]

    done = roscoe.ok("advance_round_robin", run_id=run_id, verdicts=[verdict("m0-2", "Gamma", 70)])

    assert done["status"] == "completed"
    assert done["output"] == {"winner": "Gamma"}
    node = roscoe.node(run_id, "pick")
    assert node["event"] == "done"
    assert node["output"] == {"winner": "Gamma", "ranking": ["Gamma", "Beta", "Alpha"], "scores": [
        {"candidate": "Gamma", "wins": 1, "margin": 70}, {"candidate": "Beta", "wins": 1, "margin": 30},
        {"candidate": "Alpha", "wins": 1, "margin": 20}]}
    assert [(t["phase"], t["agentIndex"]) for t in node["turns"]] == [("first", 0), ("first", 2), ("first", 1)]
    assert json.loads(node["turns"][2]["response"]) == verdict("m0-2", "Gamma", 70)
    assert node["turns"][2]["prompt"] == step["agents"][0]["prompt"]


def test_wins_rank_before_margins(roscoe):
    started = roscoe.start(tournament(), "pick", {"tone": "bold"})

    roscoe.ok("advance_round_robin", run_id=started["runId"],
              verdicts=[verdict("m0-1", "B", 90), verdict("m0-2", "B", 5), verdict("m1-2", "B", 5)])

    output = roscoe.node(started["runId"], "pick")["output"]
    assert output["ranking"] == ["Gamma", "Beta", "Alpha"]
    assert [(s["wins"], s["margin"]) for s in output["scores"]] == [(2, 10), (1, 90), (0, 0)]


def test_a_contested_round_robin_judges_every_pair_both_ways(roscoe):
    started = roscoe.start(tournament(mode="contested"), "pick", {"tone": "bold"})
    run_id = started["runId"]
    assert started["pendingStep"]["roundRobinPhase"] == "contested"
    assert [m["id"] for m in started["pendingStep"]["matchups"]] == ["m0-1", "m0-2", "m1-2"]

    reversed_batch = roscoe.ok("advance_round_robin", run_id=run_id, verdicts=[
        verdict("m0-1", "A", 60), verdict("m0-2", "B", 40), verdict("m1-2", "B", 10)])

    step = reversed_batch["pendingStep"]
    assert step["roundRobinPhase"] == "contested"
    assert step["agentCount"] == 3
    assert step["matchups"] == [{"id": "m0-1r", "a": "Beta", "b": "Alpha"}, {"id": "m0-2r", "a": "Gamma", "b": "Alpha"},
                                {"id": "m1-2r", "a": "Gamma", "b": "Beta"}]

    done = roscoe.ok("advance_round_robin", run_id=run_id, verdicts=[
        verdict("m0-1r", "B", 50), verdict("m0-2r", "B", 30), verdict("m1-2r", "A", 20)])

    assert done["status"] == "completed"
    node = roscoe.node(run_id, "pick")
    assert node["output"]["ranking"] == ["Alpha", "Gamma", "Beta"]
    assert node["output"]["scores"] == [{"candidate": "Alpha", "wins": 3, "margin": 140},
                                        {"candidate": "Gamma", "wins": 3, "margin": 70},
                                        {"candidate": "Beta", "wins": 0, "margin": 0}]
    assert [t["phase"] for t in node["turns"]] == ["contested"] * 6
    assert [t["agentIndex"] for t in node["turns"]] == [0, 1, 2, 3, 4, 5]


def test_a_resolve_phase_turns_a_prompt_into_the_candidates(roscoe):
    nodes = tournament(resolve="Suggest names for {{ context.product }}.")
    del nodes["pick"]["candidates"]
    started = roscoe.start(nodes, "pick", {"tone": "bold", "product": "a rocket"})
    run_id = started["runId"]
    step = started["pendingStep"]
    assert step["roundRobinPhase"] == "resolve"
    assert step["agentCount"] == 1
    assert step["prompt"] == step["agents"][0]["prompt"] == (
        "Suggest names for a rocket.\n\nAnswer with a JSON array of the candidates, and nothing else.")
    assert "matchups" not in step

    wrong = roscoe.err("advance_round_robin", run_id=run_id, verdicts=[verdict("m0-1", "A")])
    assert wrong["code"] == "answer_rejected"
    assert "send result" in wrong["error"]
    not_a_list = roscoe.err("advance_round_robin", run_id=run_id, result={"raw": "Nova or Orbit"})
    assert "JSON array" in not_a_list["error"]

    matchups = roscoe.ok("advance_round_robin", run_id=run_id,
                         result={"raw": 'Here you go:\n```json\n["Nova", "Orbit"]\n```'})

    step = matchups["pendingStep"]
    assert step["roundRobinPhase"] == "first"
    assert step["matchups"] == [{"id": "m0-1", "a": "Nova", "b": "Orbit"}]
    done = roscoe.ok("advance_round_robin", run_id=run_id, verdicts=[verdict("m0-1", "B", 80)])
    assert done["output"] == {"winner": "Orbit"}
    assert [t["phase"] for t in roscoe.node(run_id, "pick")["turns"]] == ["resolve", "first"]


@pytest.mark.parametrize(("verdicts", "message"), [
    ([verdict("m0-1", "A"), verdict("m9-9", "A")], "'m9-9' is not an outstanding matchup"),
    ([verdict("m0-1", "A"), verdict("m0-1", "B")], "'m0-1' is not an outstanding matchup"),
    ([verdict("m0-1", "A"), verdict("m0-2", "tie")], 'The winner of m0-2 must be "A" or "B"'),
    ([verdict("m0-1", "A"), verdict("m0-2", "A", 101)], "The margin of m0-2 must be a number from 0 to 100"),
    ([verdict("m0-1", "A"), {"id": "m0-2", "winner": "A"}], "The margin of m0-2"),
])
def test_a_wave_with_a_bad_verdict_is_refused_whole(roscoe, verdicts, message):
    started = roscoe.start(tournament(), "pick", {"tone": "bold"})

    error = roscoe.err("advance_round_robin", run_id=started["runId"], verdicts=verdicts)

    assert error["code"] == "answer_rejected"
    assert message in error["error"]
    assert roscoe.ok("get_run_status", run_id=started["runId"])["pendingStep"] == started["pendingStep"]
    assert roscoe.node(started["runId"], "pick")["turns"] == []


def test_an_answered_matchup_cannot_be_answered_again(roscoe):
    started = roscoe.start(tournament(), "pick", {"tone": "bold"})
    roscoe.ok("advance_round_robin", run_id=started["runId"], verdicts=[verdict("m0-1", "A")])

    error = roscoe.err("advance_round_robin", run_id=started["runId"], verdicts=[verdict("m0-1", "B")])

    assert "'m0-1' is not an outstanding matchup" in error["error"]
    assert "outstanding: m0-2, m1-2" in error["error"]


def test_a_matchup_phase_wants_verdicts_not_a_result(roscoe):
    started = roscoe.start(tournament(), "pick", {"tone": "bold"})

    error = roscoe.err("advance_round_robin", run_id=started["runId"], result={"raw": "Alpha"})

    assert error["code"] == "answer_rejected"
    assert "send verdicts" in error["error"]


def test_a_single_candidate_wins_at_once(roscoe):
    started = roscoe.start(tournament(candidates=["Solo"]), "pick", {"tone": "bold"})

    assert started["status"] == "completed"
    assert "pendingStep" not in started
    assert started["output"] == {"winner": "Solo"}
    node = roscoe.node(started["runId"], "pick")
    assert node["output"] == {"winner": "Solo", "ranking": ["Solo"],
                              "scores": [{"candidate": "Solo", "wins": 0, "margin": 0}]}
    assert node["turns"] == []


def test_candidates_can_come_from_a_template_and_non_text_candidates_are_shown_as_json(roscoe):
    options = [{"name": "Nova"}, {"name": "Orbit"}]
    started = roscoe.start(tournament(candidates="{{ context.options }}"), "pick", {"tone": "bold", "options": options})

    assert started["pendingStep"]["matchups"] == [{"id": "m0-1", "a": '{"name": "Nova"}', "b": '{"name": "Orbit"}'}]
    roscoe.ok("advance_round_robin", run_id=started["runId"], verdicts=[verdict("m0-1", '{"name": "Orbit"}')])
    assert roscoe.node(started["runId"], "pick")["output"]["ranking"] == [{"name": "Orbit"}, {"name": "Nova"}]


@pytest.mark.parametrize(("options", "message"), [("Nova, Orbit", "must be a list"), ([], "no candidates")])
def test_candidates_that_are_not_a_non_empty_list_fail_the_run(roscoe, options, message):
    started = roscoe.start(tournament(candidates="{{ context.options }}"), "pick", {"tone": "bold", "options": options})

    assert started["status"] == "failed"
    assert message in started["error"]
    assert roscoe.node(started["runId"], "pick")["status"] == "failed"


# --- map ----------------------------------------------------------------------------------------------

def test_a_map_runs_one_agent_per_item_then_reduces_the_results(roscoe):
    started = roscoe.start(fan(reduce="Combine these: {{ results }}"), "colours")
    run_id = started["runId"]
    step = started["pendingStep"]
    assert step["nodeType"] == "map"
    assert step["mapPhase"] == "map"
    assert step["agentCount"] == 3
    assert step["model"] == DEFAULT_MODEL
    assert step["agents"] == [{"model": DEFAULT_MODEL, "prompt": "Describe red (#0)"},
                              {"model": DEFAULT_MODEL, "prompt": "Describe green (#1)"},
                              {"model": DEFAULT_MODEL, "prompt": "Describe blue (#2)"}]
    assert step["prompt"] == "Describe red (#0)"

    reduce = roscoe.ok("advance_map", run_id=run_id, results=raws("Red is warm", "Green is calm", "Blue is cool"))

    step = reduce["pendingStep"]
    assert step["mapPhase"] == "reduce"
    assert step["agentCount"] == 1
    assert step["prompt"] == step["agents"][0]["prompt"] == (
        'Combine these: ["Red is warm", "Green is calm", "Blue is cool"]')

    done = roscoe.ok("advance_map", run_id=run_id, results=raws("Warm, calm and cool."))

    assert done["status"] == "completed"
    node = roscoe.node(run_id, "colours")
    assert node["event"] == "done"
    assert node["output"] == {"output": "Warm, calm and cool.", "results": [
        {"index": 0, "item": "red", "output": "Red is warm", "ok": True},
        {"index": 1, "item": "green", "output": "Green is calm", "ok": True},
        {"index": 2, "item": "blue", "output": "Blue is cool", "ok": True}]}
    assert [(t["phase"], t["agentIndex"]) for t in node["turns"]] == [("map", 0), ("map", 1), ("map", 2),
                                                                       ("reduce", 0)]
    assert done["totalCostUsd"] > reduce["totalCostUsd"] > 0


def test_a_map_extracts_its_items_with_one_agent_first(roscoe):
    nodes = fan(extract="List the files changed in {{ context.pr }}.", prompt="Review {{ item.path }}")
    del nodes["colours"]["items"]
    started = roscoe.start(nodes, "colours", {"pr": "#42"})
    run_id = started["runId"]
    step = started["pendingStep"]
    assert step["mapPhase"] == "extract"
    assert step["agentCount"] == 1
    assert step["prompt"] == step["agents"][0]["prompt"] == (
        "List the files changed in #42.\n\nAnswer with a JSON array of items (one per branch to run), and nothing "
        "else.")
    two = roscoe.err("advance_map", run_id=run_id, results=raws("[]", "[]"))
    assert "got 2" in two["error"]
    prose = roscoe.err("advance_map", run_id=run_id, results=raws("a.py and b.py"))
    assert "JSON array" in prose["error"]

    mapped = roscoe.ok("advance_map", run_id=run_id,
                       results=raws('```json\n[{"path": "a.py"}, {"path": "b.py"}]\n```'))

    step = mapped["pendingStep"]
    assert step["mapPhase"] == "map"
    assert [a["prompt"] for a in step["agents"]] == ["Review a.py", "Review b.py"]
    done = roscoe.ok("advance_map", run_id=run_id, results=raws("Fine", "Typo on line 3"))
    assert done["status"] == "completed"
    node = roscoe.node(run_id, "colours")
    assert node["output"] == {"results": [{"index": 0, "item": {"path": "a.py"}, "output": "Fine", "ok": True},
                                          {"index": 1, "item": {"path": "b.py"}, "output": "Typo on line 3",
                                           "ok": True}]}
    assert [t["phase"] for t in node["turns"]] == ["extract", "map", "map"]


def test_an_empty_branch_answer_is_a_failed_branch_left_out_of_the_reduce(roscoe):
    started = roscoe.start(fan(reduce="Combine these: {{ results }}"), "colours")

    reduce = roscoe.ok("advance_map", run_id=started["runId"], results=raws("Red is warm", "   ", "Blue is cool"))

    assert reduce["pendingStep"]["prompt"] == 'Combine these: ["Red is warm", "Blue is cool"]'
    roscoe.ok("advance_map", run_id=started["runId"], results=raws("Warm and cool."))
    results = roscoe.node(started["runId"], "colours")["output"]["results"]
    assert results[1] == {"index": 1, "item": "green", "output": None, "ok": False}
    assert [r["ok"] for r in results] == [True, False, True]


def test_a_map_whose_branches_all_fail_follows_its_failed_transition(roscoe):
    started = roscoe.start(fan(reduce="Combine these: {{ results }}"), "colours")

    moved = roscoe.ok("advance_map", run_id=started["runId"], results=raws("", " ", "\n"))

    assert moved["status"] == "paused"
    assert moved["pendingStep"]["nodeId"] == "recover"
    node = roscoe.node(started["runId"], "colours")
    assert node["status"] == "failed"
    assert node["event"] == "failed"
    assert [r["ok"] for r in node["output"]["results"]] == [False, False, False]
    assert len(node["turns"]) == 3


def test_a_map_runs_at_most_max_items_branches(roscoe):
    started = roscoe.start(fan(items=["a", "b", "c", "d", "e"], maxItems=2), "colours")

    step = started["pendingStep"]
    assert step["agentCount"] == 2
    assert [a["prompt"] for a in step["agents"]] == ["Describe a (#0)", "Describe b (#1)"]
    error = roscoe.err("advance_map", run_id=started["runId"], results=raws("A", "B", "C"))
    assert "2 agents" in error["error"] and "got 3" in error["error"]


def test_a_map_with_no_items_fails_at_once(roscoe):
    started = roscoe.start(fan(items="{{ context.files }}"), "colours", {"files": []})

    assert started["pendingStep"]["nodeId"] == "recover"
    node = roscoe.node(started["runId"], "colours")
    assert node["event"] == "failed"
    assert node["output"] == {"results": []}


def test_map_items_that_are_not_a_list_fail_the_run(roscoe):
    started = roscoe.start(fan(items="{{ context.files }}"), "colours", {"files": "a.py b.py"})

    assert started["status"] == "failed"
    assert "map items must be a list" in started["error"]
