"""Graph rules over well-formed workflow definitions: integrity (dominance, cycles, events, targets,
subworkflows), lint warnings and the audit's risk findings and worst-case cost. Pure functions: no
database. Every config here passes config_check first, as callers do."""

from decimal import Decimal
from typing import Any

import pytest

from workflows.analysis import (
    Pricing,
    audit,
    dominators,
    integrity_check,
    lint,
    reachable,
    strongly_connected,
    successors,
    unguarded_cycle,
)
from workflows.definition import config_check, config_normalize
from workflows.yamltext import yaml_load

from .test_workflow_definition import EXAMPLE_YAML

MODEL = "claude-sonnet-4-5"
PRICING = Pricing(prices={MODEL: (Decimal("3"), Decimal("15")), "cheap": (Decimal("0.25"), Decimal("1.25"))},
                  default_model=MODEL)


def no_workflows(workflow_id: str) -> None:
    return None


def workflows_in(**configs: dict[str, Any]):
    return lambda workflow_id: configs.get(workflow_id.replace("-", "_"))


def checked(nodes: dict[str, Any], *, start: str | None = None, **top: Any) -> dict[str, Any]:
    config = {"name": "Test", "start": start or next(iter(nodes)), "nodes": nodes, **top}
    assert config_check(config) == [], config_check(config)
    return config


def example() -> dict[str, Any]:
    return checked(config_normalize(yaml_load(EXAMPLE_YAML))["nodes"], start="draft",
                   context={"type": "object", "properties": {"topic": {"type": "string"}}})


def agent(prompt: str = "Work", to: str = "done", **extra: Any) -> dict[str, Any]:
    return {"type": "ai_agent", "prompt": prompt, "transitions": {"done": to}, **extra}


def judge(prompt: str = "Judge", **transitions: str) -> dict[str, Any]:
    return {"type": "ai_judge", "prompt": prompt, "verdicts": list(transitions), "transitions": transitions}


def condition(expression: str, yes: str, no: str) -> dict[str, Any]:
    return {"type": "condition", "if": expression, "transitions": {"true": yes, "false": no}}


def script(text: str = "echo ok", to: str = "done", **extra: Any) -> dict[str, Any]:
    return {"type": "script", "script": text, "timeout": 10, "transitions": {"success": to, "failure": "done"},
            **extra}


def human(**transitions: str) -> dict[str, Any]:
    return {"type": "human", "prompt": "Continue?", "transitions": transitions}


def end(**extra: Any) -> dict[str, Any]:
    return {"type": "end", **extra}


def integrity(config: dict[str, Any], *, workflow_id: str | None = "test", lookup=no_workflows) -> list[str]:
    return integrity_check(config, workflow_id=workflow_id, lookup=lookup)


def codes(warnings: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(w["code"], w.get("state")) for w in warnings]


def worst(config: dict[str, Any], lookup=no_workflows) -> dict[str, Any]:
    return audit(config, pricing=PRICING, lookup=lookup)["worstCase"]


def findings(config: dict[str, Any], lookup=no_workflows) -> list[dict[str, Any]]:
    return audit(config, pricing=PRICING, lookup=lookup)["findings"]


def branches(consumer: dict[str, Any], **extra_nodes: Any) -> dict[str, Any]:
    """first -> split -> (left | right) -> merge -> consumer -> done."""
    return checked({
        "first": agent("Start", to="split"),
        "split": condition('first.output == "left"', "left", "right"),
        "left": agent("Left", to="merge"),
        "right": agent("Right", to="merge"),
        "merge": agent("Merge", to="consumer"),
        "consumer": consumer,
        "done": end(),
        **extra_nodes,
    })


# --- the graph helpers ---------------------------------------------------------------------------

def test_successors_reachable_and_dominators_of_a_branch():
    config = branches(agent("Use", to="done"))

    assert successors(config)["split"] == ["left", "right"]
    assert successors(config)["done"] == []
    assert reachable(config) == {"first", "split", "left", "right", "merge", "consumer", "done"}
    dom = dominators(config)
    assert dom["merge"] == {"first", "split", "merge"}
    assert dom["left"] == {"first", "split", "left"}
    assert dom["done"] == {"first", "split", "merge", "consumer", "done"}


def test_successors_skip_missing_targets_and_reachable_is_empty_without_a_start():
    config = {"name": "T", "start": "nowhere", "nodes": {"a": agent(to="ghost"), "done": end()}}

    assert successors(config) == {"a": [], "done": []}
    assert reachable(config) == set()
    assert dominators(config) == {}


def test_strongly_connected_finds_loops_and_self_loops_only():
    config = checked({
        "a": agent(to="b"),
        "b": judge(again="a", on="c"),
        "c": {**script(to="c"), "maxIterations": 2},
        "done": end(),
    })

    assert sorted(sorted(c) for c in strongly_connected(config)) == [["a", "b"], ["c"]]


# --- dominance -----------------------------------------------------------------------------------

def test_a_reference_to_a_node_on_one_branch_only_is_an_error_naming_the_field_and_the_node():
    errors = integrity(branches(agent("Use {{ left.output }}")))

    assert len(errors) == 1
    assert errors[0].startswith("nodes.consumer.prompt: 'left.output' refers to node 'left', which does not run on "
                                "every path from start to 'consumer' (it must dominate it).")
    assert '{{ left.output || "..." }}' in errors[0]


def test_the_same_reference_with_a_fallback_is_valid():
    assert integrity(branches(agent('Use {{ left.output || "x" }}'))) == []
    assert integrity(branches(agent("Use {{ left.output || right.output || context.default }}"))) == []


def test_only_the_last_alternative_of_a_fallback_chain_must_be_dominated():
    errors = integrity(branches(agent("Use {{ first.output || right.output }}")))

    assert len(errors) == 1
    assert errors[0].startswith("nodes.consumer.prompt: 'right.output' refers to node 'right'")


def test_a_reference_to_a_node_before_the_split_is_valid():
    assert integrity(branches(agent("Use {{ first.output }} and {{ split.value }}"))) == []


def test_a_reference_to_the_merge_point_from_the_end_node_is_valid_but_not_to_a_branch():
    good = branches(agent(to="done"), done=end(output={"text": "{{ merge.output }}", "by": "{{ consumer.output }}"}))
    bad = branches(agent(to="done"), done=end(output="{{ right.output }}"))

    assert integrity(good) == []
    errors = integrity(bad)
    assert len(errors) == 1
    assert errors[0].startswith("nodes.done.output: 'right.output' refers to node 'right', which does not run on "
                                "every path from start to 'done'")


def test_a_self_reference_without_a_fallback_is_an_error():
    errors = integrity(checked({"a": agent("Improve {{ a.output }}", maxIterations=2, to="j"),
                                "j": judge(again="a", ok="done"), "done": end()}))

    assert len(errors) == 1
    assert errors[0].startswith("nodes.a.prompt: 'a.output' refers to node 'a', which does not run on every path "
                                "from start to 'a'")


def test_a_self_reference_with_a_fallback_is_valid():
    config = checked({"a": agent('Improve {{ a.output || "nothing yet" }}', maxIterations=2, to="j"),
                      "j": judge(again="a", ok="done"), "done": end()})

    assert integrity(config) == []


def test_a_reference_back_into_a_loop_needs_a_fallback():
    config = example()
    config["nodes"]["draft"]["prompt"] = "Write about {{ context.topic }}. Feedback: {{ review.reasoning }}"

    errors = integrity(config)

    assert len(errors) == 1
    assert errors[0].startswith("nodes.draft.prompt: 'review.reasoning' refers to node 'review'")


def map_node(**extra: Any) -> dict[str, Any]:
    return {"type": "map", "items": ["a", "b"], "prompt": "Do {{ item }}", "transitions": {"done": "done"}, **extra}


def test_item_and_index_are_allowed_only_in_the_map_prompt():
    assert integrity(checked({"m": map_node(prompt="Item {{ index }}: {{ item.name }}"), "done": end()})) == []

    errors = integrity(checked({"m": map_node(reduce="Merge {{ item }}"), "done": end()}))
    assert errors == ["nodes.m.reduce: 'item' refers to 'item', which is not a node; references start with context "
                      "or a node id, or one of results here."]

    errors = integrity(checked({"a": agent("Do {{ item }}"), "done": end()}))
    assert errors == ["nodes.a.prompt: 'item' refers to 'item', which is not a node; references start with context "
                      "or a node id."]


def test_results_is_allowed_only_in_the_map_reduce():
    assert integrity(checked({"m": map_node(reduce="Merge {{ results }}"), "done": end()})) == []

    errors = integrity(checked({"m": map_node(prompt="Do {{ item }} after {{ results }}"), "done": end()}))
    assert errors == ["nodes.m.prompt: 'results' refers to 'results', which is not a node; references start with "
                      "context or a node id, or one of item, index here."]

    errors = integrity(checked({"a": agent("Use {{ results.0 }}"), "done": end()}))
    assert len(errors) == 1
    assert errors[0].startswith("nodes.a.prompt: 'results.0' refers to 'results', which is not a node")


def test_references_in_condition_expressions_are_checked_too():
    errors = integrity(branches(condition('left.output == "x"', "done", "done")))

    assert len(errors) == 1
    assert errors[0].startswith("nodes.consumer.if: 'left.output' refers to node 'left'")
    assert integrity(branches(condition('merge.output == "x" and len(first.output) > 2', "done", "done"))) == []
    assert integrity(branches(condition('(left.output || "") == "x"', "done", "done"))) == []


def test_references_in_env_context_candidates_and_agent_prompts_are_checked():
    config = branches(agent(to="sub"), sub={"type": "subworkflow", "workflow": "child",
                                            "context": {"draft": "{{ left.output }}"},
                                            "transitions": {"completed": "run"}},
                      run={**script(to="rr"), "env": {"TEXT": "{{ right.output }}"}},
                      rr={"type": "round_robin", "candidates": "{{ left.list }}", "criterion": "Best",
                          "transitions": {"done": "vote"}},
                      vote={"type": "consensus", "prompt": "Vote", "agents": [{}, {"prompt": "{{ right.x }}"}, {}],
                            "verdicts": ["ok"], "transitions": {"ok": "done", "no_consensus": "done"}})

    errors = integrity(config, lookup=lambda wid: checked({"x": end()}))

    assert [e.split(":")[0] for e in errors] == ["nodes.sub.context.draft", "nodes.run.env.TEXT",
                                                 "nodes.rr.candidates", "nodes.vote.agents[1].prompt"]


def test_an_unknown_root_is_an_error_even_with_a_fallback():
    assert integrity(checked({"a": agent("Use {{ nosuch.x }}"), "done": end()})) == [
        "nodes.a.prompt: 'nosuch.x' refers to 'nosuch', which is not a node; references start with context or a "
        "node id."]
    assert len(integrity(checked({"a": agent('Use {{ nosuch.x || "y" }}'), "done": end()}))) == 1


def test_context_references_are_always_allowed():
    config = checked({"a": agent("Use {{ context.anything.deep }} and {{ context }}"),
                      "c": condition("context.flag == true", "done", "done"), "done": end()})

    assert integrity(config) == []


def test_references_from_an_unreachable_node_are_not_dominance_errors():
    config = checked({"a": agent(), "orphan": agent("Use {{ a.output }} {{ orphan.output }}"), "done": end()})

    assert integrity(config) == []


# --- cycles --------------------------------------------------------------------------------------

def loop(**extra_a: Any) -> dict[str, Any]:
    return {"a": agent(to="j", **extra_a), "j": judge(again="a", ok="done"), "done": end()}


def test_a_loop_without_max_iterations_is_an_error_naming_the_cycle():
    errors = integrity(checked(loop()))

    assert errors == ["nodes: the cycle a -> j -> a has no node with maxIterations and no human node; give one of "
                      "its nodes maxIterations."]
    assert unguarded_cycle(checked(loop())) == ["a", "j", "a"]


def test_max_iterations_on_any_node_of_the_loop_makes_it_valid():
    on_a = checked(loop(maxIterations=3))
    on_j = checked(loop())
    on_j["nodes"]["j"]["maxIterations"] = 2

    assert integrity(on_a) == []
    assert integrity(on_j) == []


def test_a_human_node_in_the_loop_makes_it_valid():
    config = checked({"a": agent(to="h"), "h": human(again="a", ok="done"), "done": end()})

    assert integrity(config) == []
    assert unguarded_cycle(config) is None


def test_two_loops_sharing_a_node_where_only_one_is_guarded_is_an_error():
    config = checked({
        "a": agent(to="j"),
        "j": judge(fix="b", redo="c", ok="done"),
        "b": agent(to="a", maxIterations=2),
        "c": agent(to="a"),
        "done": end(),
    })

    errors = integrity(config)

    assert errors == ["nodes: the cycle a -> j -> c -> a has no node with maxIterations and no human node; give one "
                      "of its nodes maxIterations."]
    config["nodes"]["a"]["maxIterations"] = 5
    assert integrity(config) == []


def test_a_self_loop_is_an_error_unless_guarded():
    retry = {"type": "script", "script": "make", "transitions": {"success": "done", "failure": "retry"}}

    assert integrity(checked({"retry": retry, "done": end()})) == [
        "nodes: the cycle retry -> retry has no node with maxIterations and no human node; give one of its nodes "
        "maxIterations."]
    assert integrity(checked({"retry": {**retry, "maxIterations": 3}, "done": end()})) == []


# --- events --------------------------------------------------------------------------------------

def test_a_script_transition_on_done_is_an_error():
    config = checked({"s": {"type": "script", "script": "true", "transitions": {"done": "end"}}, "end": end()})

    assert integrity(config) == ["nodes.s.transitions: 'done' is not an event of this script node (its events: "
                                 "success, failure)."]


def test_an_ai_judge_transition_that_is_not_a_verdict_is_an_error():
    config = checked({"j": {"type": "ai_judge", "prompt": "Judge", "verdicts": ["ok", "bad"],
                            "transitions": {"ok": "done", "maybe": "done"}}, "done": end()})

    assert integrity(config) == ["nodes.j.transitions: 'maybe' is not an event of this ai_judge node (its events: "
                                 "ok, bad)."]


def test_consensus_may_transition_on_its_verdicts_and_no_consensus():
    vote = {"type": "consensus", "prompt": "Vote", "agents": 3, "verdicts": ["go", "stop"],
            "transitions": {"go": "done", "stop": "done", "no_consensus": "done"}}
    usc = {"type": "consensus", "prompt": "Answer", "agents": 4, "mode": "usc",
           "transitions": {"done": "done", "no_consensus": "done"}}

    assert integrity(checked({"v": vote, "done": end()})) == []
    assert integrity(checked({"u": usc, "done": end()})) == []
    wrong = checked({"v": {**vote, "transitions": {"go": "done", "done": "done"}}, "done": end()})
    assert integrity(wrong) == ["nodes.v.transitions: 'done' is not an event of this consensus node (its events: "
                                "go, stop, no_consensus)."]


def test_condition_events_are_true_and_false():
    assert integrity(checked({"c": condition("context.x", "done", "done"), "done": end()})) == []
    bad = checked({"c": {"type": "condition", "if": "context.x", "transitions": {"yes": "done"}}, "done": end()})
    assert integrity(bad) == ["nodes.c.transitions: 'yes' is not an event of this condition node (its events: true, "
                              "false)."]


def test_human_nodes_take_any_event_names_and_map_and_subworkflow_their_own():
    config = checked({
        "h": human(approve="m", reject="done"),
        "m": map_node(transitions={"done": "s", "failed": "done"}),
        "s": {"type": "subworkflow", "workflow": "child", "transitions": {"completed": "done", "failed": "done"}},
        "done": end(),
    })

    assert integrity(config, lookup=lambda wid: checked({"x": end()})) == []
    config["nodes"]["m"]["transitions"] = {"completed": "done"}
    assert integrity(config, lookup=lambda wid: checked({"x": end()})) == [
        "nodes.m.transitions: 'completed' is not an event of this map node (its events: done, failed)."]


# --- targets -------------------------------------------------------------------------------------

def test_a_missing_start_node_is_an_error():
    config = checked({"a": agent(), "done": end()}, start="nowhere")

    assert integrity(config) == ["start: 'nowhere' is not a node (nodes: a, done)."]


def test_a_transition_to_a_missing_node_is_an_error():
    config = checked({"a": agent(to="ghost"), "done": end()})

    assert integrity(config) == ["nodes.a.transitions.done: the target 'ghost' is not a node."]


# --- subworkflows --------------------------------------------------------------------------------

def parent(child: str = "child") -> dict[str, Any]:
    return checked({"sub": {"type": "subworkflow", "workflow": child, "transitions": {"completed": "done"}},
                    "done": end()})


def test_a_missing_child_workflow_is_an_error():
    assert integrity(parent(), workflow_id="a") == [
        "nodes.sub.workflow: there is no workflow 'child' in this scope (repo or global)."]


def test_a_workflow_running_itself_is_an_error():
    config = parent("a")

    assert integrity(config, workflow_id="a", lookup=lambda wid: config) == [
        "nodes.sub.workflow: a workflow cannot run itself as a subworkflow."]


def test_an_indirect_cycle_through_other_workflows_is_an_error_naming_the_chain():
    lookup = workflows_in(a=parent("b"), b=parent("c"), c=parent("a"))

    assert integrity(parent("b"), workflow_id="a", lookup=lookup) == [
        "nodes.sub.workflow: 'b' includes this workflow again (a -> b -> c -> a); subworkflows cannot form a cycle."]
    two = workflows_in(a=parent("b"), b=parent("a"))
    assert integrity(parent("b"), workflow_id="a", lookup=two) == [
        "nodes.sub.workflow: 'b' includes this workflow again (a -> b -> a); subworkflows cannot form a cycle."]


def test_a_cycle_among_children_that_does_not_include_this_workflow_is_not_its_error():
    lookup = workflows_in(b=parent("c"), c=parent("b"))

    assert integrity(parent("b"), workflow_id="a", lookup=lookup) == []


def test_a_valid_child_workflow_is_ok():
    child = checked({"work": agent(), "done": end()})

    assert integrity(parent("child"), workflow_id="a", lookup=workflows_in(child=child)) == []
    assert integrity(parent("child"), workflow_id=None, lookup=workflows_in(child=child)) == []


# --- lint ----------------------------------------------------------------------------------------

def test_lint_finds_nothing_in_the_example_with_its_model_configured():
    assert lint(example(), models={MODEL}) == []


def test_lint_never_raises_on_the_example_and_only_reports_the_model_without_configured_models():
    warnings = lint(example(), models=set())

    assert codes(warnings) == [("unknown_model", "draft")]
    assert warnings[0]["message"] == ("Model 'claude-sonnet-4-5' is not a configured model (configured: none).")


def test_lint_reports_unreachable_states():
    config = checked({"a": agent(), "orphan": agent(), "done": end()})

    warnings = lint(config, models={MODEL})

    assert codes(warnings) == [("unreachable_state", "orphan")]
    assert warnings[0]["message"] == "No path from start reaches 'orphan'."


def test_lint_reports_dead_states_in_a_loop_with_no_way_to_an_end():
    config = checked({
        "a": agent(to="j"),
        "j": judge(ok="done", stuck="l1"),
        "l1": agent(to="l2"),
        "l2": {**judge(again="l1"), "maxIterations": 3},
        "done": end(),
    })

    warnings = lint(config, models={MODEL})

    assert codes(warnings) == [("dead_state", "l1"), ("dead_state", "l2")]
    assert "No end node can be reached from 'l1'" in warnings[0]["message"]


def test_lint_reports_unknown_models_on_nodes_the_workflow_and_consensus_agents():
    config = checked({
        "a": agent(model="gpt-9"),
        "v": {"type": "consensus", "prompt": "Vote", "agents": [{"model": MODEL}, {"model": "mystery"}, {}],
              "verdicts": ["ok"], "transitions": {"ok": "done", "no_consensus": "done"}},
        "done": end(),
    }, model="house-model")
    config["nodes"]["a"]["transitions"]["done"] = "v"

    warnings = lint(config, models={MODEL})

    assert codes(warnings) == [("unknown_model", None), ("unknown_model", "a"), ("unknown_model", "v")]
    assert [w["message"].split(" is")[0] for w in warnings] == [
        "Model 'house-model'", "Model 'gpt-9'", "Model 'mystery'"]
    assert "(configured: claude-sonnet-4-5)" in warnings[0]["message"]


def test_lint_reports_unhandled_events():
    config = checked({"s": {"type": "script", "script": "make", "transitions": {"success": "j"}},
                      "j": {"type": "ai_judge", "prompt": "J", "verdicts": ["ok", "bad"],
                            "transitions": {"ok": "done"}},
                      "done": end()})

    warnings = lint(config, models={MODEL})

    assert codes(warnings) == [("unhandled_event", "s"), ("unhandled_event", "j")]
    assert warnings[0]["message"] == "'s' has no transition for failure; a run fails there if that happens."
    assert "'j' has no transition for bad" in warnings[1]["message"]


def test_lint_reports_context_keys_the_context_schema_does_not_declare():
    context = {"type": "object", "properties": {"topic": {"type": "string"}}}
    config = checked({"a": agent("{{ context.topic }} {{ context.tone }} {{ context.extra || \"\" }}", to="c"),
                      "c": condition("context.level > 2", "done", "done"), "done": end()}, context=context)

    warnings = lint(config, models={MODEL})

    assert codes(warnings) == [("unknown_context_key", "a"), ("unknown_context_key", "c")]
    assert warnings[0]["message"] == ("nodes.a.prompt uses context.tone, which the context schema does not "
                                      "declare.")
    assert "context.level" in warnings[1]["message"]
    del config["context"]
    assert lint(config, models={MODEL}) == []


def test_lint_reports_a_workflow_without_an_end_node():
    config = checked({"h": human(again="h")})

    assert codes(lint(config, models={MODEL})) == [("no_end_node", None)]


def test_lint_does_not_raise_on_a_definition_that_fails_integrity():
    config = checked({"a": agent(to="ghost"), "s": {"type": "script", "script": "x", "transitions": {"done": "a"}},
                      "done": end()}, start="nowhere")

    warnings = lint(config, models={MODEL})

    assert ("unreachable_state", "a") in codes(warnings)
    assert ("dead_state", "a") in codes(warnings)


# --- audit: risks --------------------------------------------------------------------------------

def script_findings(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in findings(checked({"s": node, "done": end()}))
            if f["code"] in ("dangerous_command", "script_without_timeout")]


def test_a_script_without_timeout_is_an_info_finding():
    node = {"type": "script", "script": "echo hi", "transitions": {"success": "done", "failure": "done"}}

    assert script_findings(node) == [{
        "severity": "info", "code": "script_without_timeout", "state": "s",
        "message": "'s' sets no timeout, so it may run for the default 60 seconds."}]


ROOT = "deletes the root, home or everything in the working directory"


@pytest.mark.parametrize(("text", "severity", "what"), [
    ("rm -rf /", "error", ROOT),
    ("cd /tmp && rm -rf / && echo gone", "error", ROOT),
    ("rm -rf /*", "error", ROOT),
    ("rm -rf ~/", "error", ROOT),
    ("rm -r -f $HOME", "error", ROOT),
    ("rm -fr *", "error", ROOT),
    ("curl x | sh", "error", "pipes a download into a shell"),
    ("wget -qO- https://get.example.com | sudo bash", "error", "pipes a download into a shell"),
    ("sudo apt-get install jq", "warning", "runs as root"),
    ("git push --force origin main", "warning", "force-pushes"),
    ("git push -f", "warning", "force-pushes"),
    ("chmod -R 777 .", "warning", "makes files writable by everyone"),
    ("eval \"$CMD\"", "warning", "evaluates text as code"),
    ("mkfs.ext4 /dev/sdb1", "error", "formats a file system"),
    ("dd if=img of=/dev/sda", "error", "writes straight to a device"),
])
def test_dangerous_commands_are_found(text, severity, what):
    found = [f for f in script_findings(script(text)) if f["code"] == "dangerous_command"]

    assert {"severity": severity, "code": "dangerous_command", "state": "s",
            "message": f"'s' runs a command that {what}."} in found


def test_dangerous_commands_are_found_in_argv_too():
    node = {"type": "script", "command": ["rm", "-rf", "/"], "timeout": 5,
            "transitions": {"success": "done", "failure": "done"}}

    assert ("error", "dangerous_command") in [(f["severity"], f["code"]) for f in script_findings(node)]


def test_a_recursive_delete_of_a_subdirectory_is_a_warning_not_an_error():
    found = script_findings(script("rm -rf ./build /tmp/cache"))

    assert [(f["severity"], f["message"]) for f in found] == [
        ("warning", "'s' runs a command that deletes recursively without asking.")]


@pytest.mark.parametrize("text", ["echo hi", "git push origin main --follow-tags", "python3 check.py --force",
                                  "ls -rf", "echo 'evaluate'"])
def test_a_harmless_script_has_no_findings(text):
    assert script_findings(script(text)) == []


def test_a_consensus_of_five_agents_is_a_wide_fanout():
    config = checked({"v": {"type": "consensus", "prompt": "Vote", "agents": 5, "verdicts": ["ok"],
                            "transitions": {"ok": "done", "no_consensus": "done"}}, "done": end()})

    assert {"severity": "info", "code": "wide_fanout", "state": "v",
            "message": "'v' runs 5 agents per visit."} in findings(config)


# --- audit: worst case ---------------------------------------------------------------------------

def test_a_straight_agent_then_judge_makes_two_model_calls():
    config = checked({"a": agent(to="j"), "j": judge(ok="done"), "done": end()})

    result = audit(config, pricing=PRICING, lookup=no_workflows)

    assert result["worstCase"]["modelCalls"] == 2
    assert result["worstCase"]["bounded"] is True
    assert [f["code"] for f in result["findings"]] == ["cost_estimate"]


def test_the_example_counts_every_allowed_iteration_of_its_loop():
    result = audit(example(), pricing=PRICING, lookup=no_workflows)

    # review may be entered 3 times; draft runs once plus once after each of those reviews.
    assert result["worstCase"]["modelCalls"] == 7
    assert result["worstCase"]["modelCalls"] >= 2  # one pass: draft and review
    assert result["worstCase"]["bounded"] is True
    assert [f["code"] for f in result["findings"]] == ["loop_multiplier", "cost_estimate"]
    assert "draft, review run more than once" in result["findings"][0]["message"]


def test_a_consensus_vote_of_three_agents_counts_a_retry_round():
    vote = {"type": "consensus", "prompt": "Vote", "agents": 3, "verdicts": ["ok"],
            "transitions": {"ok": "done", "no_consensus": "done"}}
    usc = {"type": "consensus", "prompt": "Answer", "agents": 3, "mode": "usc", "transitions": {"done": "done"}}

    assert worst(checked({"v": vote, "done": end()}))["modelCalls"] == 6
    assert worst(checked({"u": usc, "done": end()}))["modelCalls"] == 4  # generate 3, then one aggregator


def test_a_map_over_four_items_with_a_reduce_makes_five_calls():
    assert worst(checked({"m": map_node(items=[1, 2, 3, 4], reduce="Merge {{ results }}"),
                          "done": end()}))["modelCalls"] == 5
    assert worst(checked({"m": map_node(items=[1, 2, 3, 4], maxItems=2), "done": end()}))["modelCalls"] == 2


def test_a_map_over_a_template_assumes_max_items():
    config = checked({"m": map_node(items="{{ context.files }}"), "done": end()})
    capped = checked({"m": {"type": "map", "extract": "List them", "prompt": "Do {{ item }}", "maxItems": 5,
                            "reduce": "Merge", "transitions": {"done": "done"}}, "done": end()})

    result = audit(config, pricing=PRICING, lookup=no_workflows)

    assert result["worstCase"]["modelCalls"] == 20
    assert {"severity": "info", "code": "assumed_count", "state": "m",
            "message": "'m' gets its items at run time; the worst case assumes maxItems (20)."} in result["findings"]
    assert worst(capped)["modelCalls"] == 7  # extract, 5 items, reduce


def test_a_round_robin_of_four_candidates_counts_its_matchups():
    first = {"type": "round_robin", "candidates": ["a", "b", "c", "d"], "criterion": "Best",
             "transitions": {"done": "done"}}
    resolved = {"type": "round_robin", "resolve": "Name the options", "criterion": "Best",
                "transitions": {"done": "done"}}

    assert worst(checked({"r": first, "done": end()}))["modelCalls"] == 6
    assert worst(checked({"r": {**first, "mode": "contested"}, "done": end()}))["modelCalls"] == 12
    result = audit(checked({"r": resolved, "done": end()}), pricing=PRICING, lookup=no_workflows)
    assert result["worstCase"]["modelCalls"] == 8 * 7 // 2 + 1  # 8 assumed candidates, plus the resolve call
    assert "assumed_count" in [f["code"] for f in result["findings"]]


def test_a_loop_bounded_only_by_a_person_is_an_unbounded_loop_warning():
    config = checked({"a": agent(to="h"), "h": human(again="a", ok="done"), "done": end()})

    result = audit(config, pricing=PRICING, lookup=no_workflows)

    assert result["worstCase"] == {**result["worstCase"], "modelCalls": 1, "bounded": False}
    unbounded = [f for f in result["findings"] if f["code"] == "unbounded_loop"]
    assert unbounded == [{"severity": "warning", "code": "unbounded_loop", "state": "a",
                          "message": "The loop through a, h is bounded only by a person choosing to leave it; the "
                                     "worst case counts one pass."}]


def test_an_unguarded_loop_is_an_unbounded_loop_error_and_not_blamed_on_a_person():
    config = checked(loop())

    result = audit(config, pricing=PRICING, lookup=no_workflows)

    assert result["worstCase"]["bounded"] is False
    assert [(f["severity"], f["message"]) for f in result["findings"] if f["code"] == "unbounded_loop"] == [
        ("error", "The cycle a -> j -> a has no maxIterations and no human node: it may never end.")]


def test_the_cost_of_one_agent_call_follows_the_pricing():
    prompt = "x" * 403  # 100 tokens at four characters a token
    config = checked({"a": agent(prompt), "done": end()})

    cost = worst(config)["costUsd"]

    expected = (Decimal(3) * (403 // 4 + 2000) + Decimal(15) * 1000) / Decimal(1_000_000)
    assert cost == float(round(expected, 4)) == 0.0213


def test_the_cost_uses_the_node_model_then_the_workflow_model_then_the_default():
    node_model = checked({"a": agent("x" * 400, model="cheap"), "done": end()})
    workflow_model = checked({"a": agent("x" * 400), "done": end()}, model="cheap")
    unpriced = checked({"a": agent("x" * 400, model="unknown"), "done": end()})

    cheap = float(round((Decimal("0.25") * 2100 + Decimal("1.25") * 1000) / Decimal(1_000_000), 4))
    assert worst(node_model)["costUsd"] == cheap == 0.0018
    assert worst(workflow_model)["costUsd"] == cheap
    assert worst(unpriced)["costUsd"] == 0.0
    assert worst(unpriced)["modelCalls"] == 1


def test_the_cost_multiplies_by_calls_and_visits():
    config = checked({"v": {"type": "consensus", "prompt": "x" * 400, "agents": 3, "verdicts": ["ok"],
                            "maxIterations": 2, "transitions": {"ok": "done", "no_consensus": "v"}},
                      "done": end()})

    result = worst(config)

    assert result["modelCalls"] == 12
    assert result["costUsd"] == float(round(12 * (Decimal(3) * 2100 + Decimal(15) * 1000) / Decimal(1_000_000), 4))


def test_a_subworkflow_adds_its_childs_calls():
    child = checked({"a": agent(to="j"), "j": judge(ok="done"), "done": end()})
    config = checked({"a": agent(to="sub"), "sub": {"type": "subworkflow", "workflow": "child",
                                                    "transitions": {"completed": "done"}}, "done": end()})

    result = worst(config, lookup=workflows_in(child=child))

    assert result["modelCalls"] == 3
    assert result["costUsd"] == worst(checked({"a": agent(), "done": end()}))["costUsd"] + worst(child)["costUsd"]
    assert worst(config)["modelCalls"] == 1  # a missing child adds nothing


def test_a_subworkflow_in_a_loop_counts_the_child_on_every_visit_and_its_unboundedness():
    child = checked({"a": agent(to="h"), "h": human(again="a", ok="done"), "done": end()})
    config = checked({"sub": {"type": "subworkflow", "workflow": "child", "maxIterations": 2,
                              "transitions": {"completed": "done", "failed": "sub"}}, "done": end()})

    result = worst(config, lookup=workflows_in(child=child))

    assert result["modelCalls"] == 2
    assert result["bounded"] is False


def test_audit_of_mutually_recursive_subworkflows_terminates():
    lookup = workflows_in(a=parent("b"), b=parent("a"))

    assert worst(parent("b"), lookup=lookup)["modelCalls"] == 0


def test_a_second_unguarded_loop_is_not_blamed_on_a_person_either():
    config = checked({
        "a": agent(to="j"),
        "j": judge(again="a", next="b"),
        "b": agent(to="k"),
        "k": judge(again="b", ok="done"),
        "done": end(),
    })

    messages = [f["message"] for f in findings(config) if f["code"] == "unbounded_loop"]

    assert messages == ["The cycle a -> j -> a has no maxIterations and no human node: it may never end."]
    assert worst(config)["bounded"] is False
