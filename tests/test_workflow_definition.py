"""The workflow definition format: the schema check, its JSON Schema, YAML normalisation and the
comment-keeping YAML edits. Pure functions: no database."""

import copy
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from workflows.analysis import integrity_check, lint
from workflows.definition import (
    NODE_TYPES,
    config_check,
    config_normalize,
    executors,
    json_schema,
)
from workflows.errors import InvalidConfig
from workflows.yamltext import yaml_dump, yaml_load, yaml_rewrite_subworkflow, yaml_set_name

# Verbatim from /work/shared/reference/workflow-schema.md.
EXAMPLE_YAML = r"""name: Review loop                # required, human-readable
description: Draft, judge, revise # optional
start: draft                     # required: id of the first node
context:                         # optional JSON Schema for the start context
  type: object
  properties: {topic: {type: string}}
  required: [topic]
nodes:                           # required: node id -> node; ids match [a-zA-Z0-9_-]+
  draft:
    type: ai_agent
    label: Draft the text        # optional, shown in pendingStep.label and the UI
    model: claude-sonnet-4-5     # optional; lint warns (unknown_model) when it is not a configured model
    prompt: "Write about {{ context.topic }}. Earlier feedback: {{ review.reasoning || \"none\" }}"
    transitions: {done: review}
  review:
    type: ai_judge
    prompt: "Judge this draft: {{ draft.output }}"
    verdicts: [approve, revise]  # the response must be {"verdict": "<one of these>", "reasoning": "..."}
    transitions: {approve: publish, revise: draft}
    maxIterations: 3             # this node may be entered at most 3 times in one run
  publish:
    type: script
    script: "echo '{\"published\": true}'"   # /bin/sh script; or `command: [argv, ...]`
    timeout: 30                  # seconds, default 60
    transitions: {success: done, failure: failed}
  done: {type: end}              # status completed; optional `output:` template
  failed: {type: end, status: failed}
"""


def example() -> dict[str, Any]:
    return config_normalize(yaml_load(EXAMPLE_YAML))


def no_workflows(workflow_id: str) -> None:
    return None


# A minimal valid node of each type; the node under test is `n`, and `end` is where it goes.
MINIMAL: dict[str, dict[str, Any]] = {
    "script": {"type": "script", "script": "echo hi", "transitions": {"success": "end"}},
    "condition": {"type": "condition", "if": "context.x == 1", "transitions": {"true": "end", "false": "end"}},
    "ai_agent": {"type": "ai_agent", "prompt": "Say hi", "transitions": {"done": "end"}},
    "ai_judge": {"type": "ai_judge", "prompt": "Judge", "verdicts": ["ok"], "transitions": {"ok": "end"}},
    "human": {"type": "human", "prompt": "Ship it?", "transitions": {"yes": "end"}},
    "consensus": {"type": "consensus", "prompt": "Vote", "agents": 3, "verdicts": ["go", "stop"],
                  "transitions": {"go": "end", "stop": "end", "no_consensus": "end"}},
    "round_robin": {"type": "round_robin", "candidates": ["a", "b"], "criterion": "Which is better?",
                    "transitions": {"done": "end"}},
    "map": {"type": "map", "items": ["a", "b"], "prompt": "Summarise {{ item }}", "transitions": {"done": "end"}},
    "subworkflow": {"type": "subworkflow", "workflow": "child", "transitions": {"completed": "end"}},
    "end": {"type": "end"},
}

REQUIRED = [
    ("script", "transitions"),
    ("condition", "if"),
    ("condition", "transitions"),
    ("ai_agent", "prompt"),
    ("ai_agent", "transitions"),
    ("ai_judge", "prompt"),
    ("ai_judge", "verdicts"),
    ("ai_judge", "transitions"),
    ("human", "prompt"),
    ("human", "transitions"),
    ("consensus", "prompt"),
    ("consensus", "agents"),
    ("consensus", "transitions"),
    ("round_robin", "criterion"),
    ("round_robin", "transitions"),
    ("map", "prompt"),
    ("map", "transitions"),
    ("subworkflow", "workflow"),
    ("subworkflow", "transitions"),
]


def with_node(node: dict[str, Any], **top: Any) -> dict[str, Any]:
    """A workflow whose start node `n` is the given node, followed by an end node."""
    return {"name": "Test", "start": "n", "nodes": {"n": node, "end": {"type": "end"}}, **top}


def node_of(type_name: str, **changes: Any) -> dict[str, Any]:
    node = copy.deepcopy(MINIMAL[type_name])
    for key, value in changes.items():
        if value is None:
            node.pop(key, None)
        else:
            node[key] = value
    return node


def errors_for(node: dict[str, Any]) -> list[str]:
    return config_check(with_node(node))


def assert_one_error(errors: list[str], *parts: str) -> None:
    matching = [e for e in errors if all(part in e for part in parts)]
    assert matching, f"no error containing {parts!r} in {errors!r}"


def schema_errors(config: Any) -> list[str]:
    return [e.message for e in Draft202012Validator(json_schema()).iter_errors(config)]


# --- the example ---------------------------------------------------------------------------------

def test_the_documented_example_passes_the_schema_check_integrity_and_lint_without_warnings():
    config = example()

    assert config["nodes"]["review"]["verdicts"] == ["approve", "revise"]
    assert config["nodes"]["draft"]["prompt"] == ('Write about {{ context.topic }}. Earlier feedback: '
                                                  '{{ review.reasoning || "none" }}')
    assert config_check(config) == []
    assert integrity_check(config, workflow_id="review-loop", lookup=no_workflows) == []
    assert lint(config, models={"claude-sonnet-4-5"}) == []


def test_the_json_schema_is_a_valid_draft_2020_12_schema_that_accepts_the_example():
    schema = json_schema()

    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema_errors(example()) == []


def test_the_json_schema_rejects_an_unknown_node_type_and_an_unknown_node_key():
    unknown_type = example()
    unknown_type["nodes"]["draft"]["type"] = "ai_wizard"
    unknown_key = example()
    unknown_key["nodes"]["draft"]["temperature"] = 0.2

    assert schema_errors(unknown_type)
    assert schema_errors(unknown_key)


def test_the_json_schema_rejects_what_the_schema_check_rejects_for_the_common_mistakes():
    end_with_transitions = with_node({"type": "end", "transitions": {"done": "end"}})
    both_script_and_command = with_node(node_of("script", command=["ls"]))
    unknown_top_key = {**example(), "version": 2}
    missing_start = example()
    del missing_start["start"]

    for config in (end_with_transitions, both_script_and_command, unknown_top_key, missing_start):
        assert schema_errors(config), config
        assert config_check(config), config


@pytest.mark.parametrize("type_name", sorted(MINIMAL))
def test_the_json_schema_accepts_a_minimal_node_of_every_type(type_name):
    assert schema_errors(with_node(node_of(type_name))) == []


def test_executors_list_every_node_type_with_its_keys_and_exactly_one_of_groups():
    listed = {e["type"]: e for e in executors()}

    assert set(listed) == set(NODE_TYPES)
    assert listed["script"]["exactlyOneOf"] == [["script", "command", "capability"]]
    assert listed["script"]["events"] == ["success", "failure"]
    assert listed["script"]["pauses"] is False
    assert listed["ai_agent"]["pauses"] is True
    assert {"name": "prompt", "required": True} in [
        {"name": k["name"], "required": k["required"]} for k in listed["ai_agent"]["configKeys"]]
    assert listed["human"]["events"] == "the keys of transitions"


# --- every node type -----------------------------------------------------------------------------

@pytest.mark.parametrize("type_name", sorted(MINIMAL))
def test_a_minimal_valid_node_of_every_type_passes_the_schema_check(type_name):
    assert errors_for(node_of(type_name)) == []


@pytest.mark.parametrize("type_name", sorted(MINIMAL))
def test_a_minimal_valid_node_of_every_type_passes_the_integrity_check(type_name):
    config = with_node(node_of(type_name))

    child = with_node(node_of("ai_agent"))
    assert integrity_check(config, workflow_id="parent",
                           lookup=lambda wid: child if wid == "child" else None) == []


@pytest.mark.parametrize(("type_name", "key"), REQUIRED)
def test_each_missing_required_key_is_reported_naming_the_node_and_the_key(type_name, key):
    errors = errors_for(node_of(type_name, **{key: None}))

    assert_one_error(errors, f"nodes.n: {type_name} nodes need '{key}'")


MISTYPED = [
    ("script", {"timeout": "10"}, "nodes.n.timeout: must be an integer."),
    ("script", {"timeout": 0}, "nodes.n.timeout: must be at least 1."),
    ("script", {"timeout": 3601}, "nodes.n.timeout: must be at most 3600."),
    ("script", {"timeout": True}, "nodes.n.timeout: must be an integer."),
    ("consensus", {"agents": 2}, "nodes.n.agents: must be 3 to 5 agents (got 2)."),
    ("consensus", {"agents": 6}, "nodes.n.agents: must be 3 to 5 agents (got 6)."),
    ("consensus", {"agents": "3"}, "nodes.n.agents: must be a number from 3 to 5, or a list of 3 to 5 agents."),
    ("consensus", {"agents": [{}, {}]}, "nodes.n.agents: must be a number from 3 to 5, or a list of 3 to 5 agents."),
    ("consensus", {"agents": [{}, {}, {"temperature": 1}]}, "nodes.n.agents[2]: must be a mapping"),
    ("consensus", {"agents": [{"model": 3}, {}, {}]}, "nodes.n.agents[0]: must be a mapping"),
    ("consensus", {"agents": [{}, {"prompt": ""}, {}]}, "nodes.n.agents[1]: must be a mapping"),
    ("ai_judge", {"verdicts": ["ok", "ok"]}, "nodes.n.verdicts: verdicts must be unique."),
    ("ai_judge", {"verdicts": []}, "nodes.n.verdicts: must be a non-empty list of verdict names"),
    ("ai_judge", {"verdicts": "ok"}, "nodes.n.verdicts: must be a non-empty list of verdict names"),
    ("ai_judge", {"verdicts": ["looks good"]}, "nodes.n.verdicts: must be a non-empty list of verdict names"),
    ("consensus", {"mode": "x"}, "nodes.n.mode: must be one of vote, usc (got 'x')."),
    ("round_robin", {"mode": "x"}, "nodes.n.mode: must be one of first, contested (got 'x')."),
    ("end", {"status": "done"}, "nodes.n.status: must be one of completed, failed (got 'done')."),
    ("ai_agent", {"maxIterations": 0}, "nodes.n.maxIterations: must be at least 1."),
    ("ai_agent", {"maxIterations": 1001}, "nodes.n.maxIterations: must be at most 1000."),
    ("ai_agent", {"maxIterations": "3"}, "nodes.n.maxIterations: must be an integer."),
    ("script", {"env": {"1X": "a"}}, "nodes.n.env: '1X' is not a valid environment variable name."),
    ("script", {"env": {"MY-VAR": "a"}}, "nodes.n.env: 'MY-VAR' is not a valid environment variable name."),
    ("script", {"env": {"X\n": "a"}}, "nodes.n.env: 'X\\n' is not a valid environment variable name."),
    ("script", {"env": {"X": [1]}}, "nodes.n.env.X: must be a string, number or boolean."),
    ("script", {"env": ["X=1"]}, "nodes.n.env: must be a mapping of variable names to values."),
    ("script", {"script": None, "command": "ls -l"}, "nodes.n.command: must be a non-empty list of strings (argv)."),
    ("script", {"script": None, "command": []}, "nodes.n.command: must be a non-empty list of strings (argv)."),
    ("script", {"script": None, "command": ["ls", 1]}, "nodes.n.command: must be a non-empty list of strings"),
    ("script", {"script": "  "}, "nodes.n.script: must be a non-empty string."),
    ("script", {"transitions": {"success": "not an id"}},
     "nodes.n.transitions.success: the target must be a node id (got 'not an id')."),
    ("script", {"transitions": {"success": "end\n"}}, "nodes.n.transitions.success: the target must be a node id"),
    ("script", {"transitions": {"success": 3}}, "nodes.n.transitions.success: the target must be a node id (got 3)."),
    ("script", {"transitions": {}}, "nodes.n.transitions: must be a mapping of events to node ids, with at least"),
    ("script", {"transitions": ["end"]}, "nodes.n.transitions: must be a mapping of events to node ids"),
    ("ai_agent", {"prompt": ""}, "nodes.n.prompt: must be a non-empty string (a template)."),
    ("ai_agent", {"prompt": 42}, "nodes.n.prompt: must be a non-empty string (a template)."),
    ("ai_agent", {"label": 3}, "nodes.n.label: must be a non-empty string."),
    ("subworkflow", {"workflow": "my child"}, "nodes.n.workflow: must be an id matching [a-zA-Z0-9_-]+."),
    ("map", {"maxItems": 101}, "nodes.n.maxItems: must be at most 100."),
    ("map", {"items": 5}, "nodes.n.items: must be a list, or a template that yields one."),
    ("round_robin", {"candidates": ""}, "nodes.n.candidates: must be a list, or a template that yields one."),
    ("consensus", {"quorum": 6}, "nodes.n.quorum: must be at most 5."),
    ("condition", {"if": ""}, "nodes.n.if: must be a non-empty expression string."),
]


@pytest.mark.parametrize(("type_name", "changes", "expected"), MISTYPED,
                         ids=[f"{t}-{'-'.join(c)}-{i}" for i, (t, c, _) in enumerate(MISTYPED)])
def test_mistyped_values_are_reported_naming_the_node_the_key_and_the_rule(type_name, changes, expected):
    assert_one_error(errors_for(node_of(type_name, **changes)), expected)


ONE_OF = [
    ("script", {"command": ["ls"]},
     "nodes.n: script nodes need exactly one of script, command, capability (found script, command)."),
    ("script", {"script": None}, "nodes.n: script nodes need exactly one of script, command, capability (found none)."),
    ("map", {"extract": "List the files"},
     "nodes.n: map nodes need exactly one of items, extract (found items, extract)."),
    ("map", {"items": None}, "nodes.n: map nodes need exactly one of items, extract (found none)."),
    ("round_robin", {"resolve": "List the names"},
     "nodes.n: round_robin nodes need exactly one of candidates, resolve (found candidates, resolve)."),
    ("round_robin", {"candidates": None}, "nodes.n: round_robin nodes need exactly one of candidates, resolve "
                                          "(found none)."),
]


@pytest.mark.parametrize(("type_name", "changes", "expected"), ONE_OF)
def test_exactly_one_of_groups_refuse_both_and_neither(type_name, changes, expected):
    assert_one_error(errors_for(node_of(type_name, **changes)), expected)


@pytest.mark.parametrize(("type_name", "changes"), [
    ("script", {"script": None, "command": ["python3", "check.py"]}),
    ("map", {"items": None, "extract": "List the chapters of {{ context.book }}"}),
    ("map", {"items": "{{ context.files }}"}),
    ("round_robin", {"candidates": None, "resolve": "Name three titles"}),
    ("round_robin", {"candidates": "{{ context.titles }}", "mode": "contested"}),
])
def test_the_other_member_of_each_exactly_one_of_group_is_valid(type_name, changes):
    assert errors_for(node_of(type_name, **changes)) == []


def test_an_end_node_with_transitions_is_refused_with_the_hint():
    errors = errors_for({"type": "end", "transitions": {"done": "end"}})

    assert_one_error(errors, "nodes.n: end nodes have no key 'transitions' (end nodes have no transitions); allowed:")


def test_an_unknown_node_key_names_the_allowed_keys():
    errors = errors_for(node_of("ai_agent", temperature=0.2))

    assert errors == ["nodes.n: ai_agent nodes have no key 'temperature'; "
                      "allowed: description, label, maxIterations, model, prompt, transitions, type."]


def test_an_unknown_node_type_lists_the_known_types():
    errors = errors_for({"type": "ai_wizard", "prompt": "x"})

    assert errors == [f"nodes.n: unknown node type 'ai_wizard'; known types: {', '.join(NODE_TYPES)}."]


def test_a_node_that_is_not_a_mapping_is_refused():
    assert errors_for(["ai_agent"]) == ["nodes.n: must be a mapping with a `type`."]


def test_a_consensus_node_in_vote_mode_needs_verdicts_but_one_in_usc_mode_does_not():
    default_mode = errors_for(node_of("consensus", verdicts=None, transitions={"no_consensus": "end"}))
    vote = errors_for(node_of("consensus", verdicts=None, mode="vote", transitions={"no_consensus": "end"}))
    usc = errors_for(node_of("consensus", verdicts=None, mode="usc", transitions={"done": "end"}))

    assert default_mode == ["nodes.n: consensus nodes in vote mode need 'verdicts'."]
    assert vote == ["nodes.n: consensus nodes in vote mode need 'verdicts'."]
    assert usc == []


def test_a_quorum_larger_than_the_agents_is_refused():
    counted = errors_for(node_of("consensus", agents=3, quorum=4))
    listed = errors_for(node_of("consensus", agents=[{"model": "m"}, {}, {"prompt": "Argue against"}], quorum=4))
    fits = errors_for(node_of("consensus", agents=5, quorum=4))

    assert counted == ["nodes.n.quorum: 4 is more votes than agents (3)."]
    assert listed == ["nodes.n.quorum: 4 is more votes than agents (3)."]
    assert fits == []


def test_an_unknown_top_level_key_is_refused_naming_it():
    errors = config_check(with_node(node_of("ai_agent"), version=2))

    assert errors == ["workflow: unknown key 'version'; allowed: context, description, model, name, nodes, start."]


def test_missing_top_level_keys_are_each_reported():
    errors = config_check({"description": "nothing else"})

    assert_one_error(errors, "workflow: missing required key 'name'")
    assert_one_error(errors, "workflow: missing required key 'start'")
    assert_one_error(errors, "workflow: missing required key 'nodes'")


@pytest.mark.parametrize("nodes", [{}, [], None, "draft"])
def test_nodes_must_be_a_non_empty_mapping(nodes):
    errors = config_check({"name": "Test", "start": "n", "nodes": nodes})

    assert errors == ["nodes: must be a mapping of node ids to nodes, with at least one node."]


@pytest.mark.parametrize("node_id", ["bad id", "naïve", "a.b", "", "end\n"])
def test_a_bad_node_id_is_refused(node_id):
    errors = config_check({"name": "Test", "start": "end", "nodes": {node_id: {"type": "end"}, "end": {"type": "end"}}})

    assert errors == [f"nodes: {node_id!r} is not a valid node id ([a-zA-Z0-9_-]+)."]


@pytest.mark.parametrize("start", ["no such", 3, ""])
def test_start_must_be_an_id(start):
    errors = config_check({**with_node(node_of("ai_agent")), "start": start})

    assert errors == ["start: must be an id matching [a-zA-Z0-9_-]+."]


def test_top_level_strings_must_be_non_empty():
    errors = config_check({**with_node(node_of("ai_agent")), "name": "", "model": 4})

    assert "name: must be a non-empty string." in errors
    assert "model: must be a non-empty string." in errors


def test_the_context_must_be_a_valid_json_schema():
    not_a_mapping = config_check(with_node(node_of("ai_agent"), context=["topic"]))
    invalid = config_check(with_node(node_of("ai_agent"), context={"type": "nonsense"}))
    valid = config_check(with_node(node_of("ai_agent"), context={"type": "object", "required": ["topic"]}))

    assert not_a_mapping == ["context: must be a JSON Schema object."]
    assert len(invalid) == 1
    assert invalid[0].startswith("context: not a valid JSON Schema: ")
    assert valid == []


def test_a_config_that_is_not_a_mapping_is_refused():
    assert config_check(["name"]) == ["A workflow must be a mapping of keys (name, start, nodes, ...), not list."]


@pytest.mark.parametrize(("node", "where"), [
    (node_of("ai_agent", prompt="Write about {{ a "), "nodes.n.prompt: bad template: "),
    (node_of("ai_agent", prompt="Write about {{ }}"), "nodes.n.prompt: bad template: "),
    (node_of("map", prompt="{{ item }}", reduce="Merge {{ results"), "nodes.n.reduce: bad template: "),
    (node_of("map", items=["ok", "{{ a. }}"]), "nodes.n.items[1]: bad template: "),
    (node_of("script", env={"TOPIC": "{{ context.topic"}), "nodes.n.env.TOPIC: bad template: "),
    (node_of("consensus", agents=[{}, {"prompt": "{{ x =="}, {}]), "nodes.n.agents[1].prompt: bad template: "),
    (node_of("round_robin", criterion="{{ 'open }}"), "nodes.n.criterion: bad template: "),
    (node_of("subworkflow", context={"topic": "{{ a b }}"}), "nodes.n.context.topic: bad template: "),
    ({"type": "end", "output": {"summary": "{{ draft.output "}}, "nodes.n.output.summary: bad template: "),
])
def test_bad_template_syntax_is_reported_where_it_is(node, where):
    errors = errors_for(node)

    assert len(errors) == 1, errors
    assert errors[0].startswith(where)


def test_an_unterminated_template_names_the_problem():
    errors = errors_for(node_of("ai_agent", prompt="Write about {{ a "))

    assert_one_error(errors, "nodes.n.prompt: bad template:", "Unterminated '{{'")


def test_the_script_text_is_not_templated_so_braces_in_it_are_not_checked():
    assert errors_for(node_of("script", script="echo '{{ not a template'")) == []


@pytest.mark.parametrize("expression", ["review.verdict ==", "a b", "len(", "(x", "a == 'open", "{{ a }}"])
def test_a_bad_condition_expression_is_reported(expression):
    errors = errors_for(node_of("condition", **{"if": expression}))

    assert len(errors) == 1, errors
    assert errors[0].startswith("nodes.n.if: bad expression: ")


@pytest.mark.parametrize("expression", [
    'review.verdict == "approve"', "not (a.x and b.y) or len(items.output) > 2", 'context.tag in ["a", "b"]',
])
def test_a_good_condition_expression_is_accepted(expression):
    assert errors_for(node_of("condition", **{"if": expression})) == []


def test_more_than_the_node_limit_is_refused():
    nodes = {f"n{i}": {"type": "end"} for i in range(201)}

    assert config_check({"name": "Big", "start": "n0", "nodes": nodes}) == ["nodes: 201 nodes; the limit is 200."]


# --- config_normalize ----------------------------------------------------------------------------

def test_yaml_boolean_transition_keys_become_the_strings_true_and_false():
    config = config_normalize(yaml_load(
        "name: Branch\n"
        "start: check\n"
        "nodes:\n"
        "  check:\n"
        "    type: condition\n"
        "    if: context.n > 2\n"
        "    transitions:\n"
        "      true: big\n"
        "      false: small\n"
        "  big: {type: end}\n"
        "  small: {type: end}\n"))

    assert config["nodes"]["check"]["transitions"] == {"true": "big", "false": "small"}
    assert config_check(config) == []
    assert integrity_check(config, workflow_id=None, lookup=no_workflows) == []


def test_without_normalising_boolean_transition_keys_would_not_be_events():
    raw = yaml_load("t: {true: big, false: small}\n")

    assert raw["t"] == {True: "big", False: "small"}


def test_yaml_1_2_keeps_yes_no_on_and_off_as_strings():
    config = config_normalize(yaml_load(
        "name: Ask\n"
        "start: ask\n"
        "nodes:\n"
        "  ask:\n"
        "    type: ai_judge\n"
        "    prompt: Ship it?\n"
        "    verdicts: [yes, no]\n"
        "    transitions: {yes: shipped, no: held}\n"
        "  shipped: {type: end}\n"
        "  held: {type: end, status: failed}\n"))

    assert config["nodes"]["ask"]["verdicts"] == ["yes", "no"]
    assert config["nodes"]["ask"]["transitions"] == {"yes": "shipped", "no": "held"}
    assert yaml_load("a: [on, off, y, n]\n") == {"a": ["on", "off", "y", "n"]}
    assert config_check(config) == []
    assert integrity_check(config, workflow_id=None, lookup=no_workflows) == []


def test_numeric_node_ids_and_events_become_strings():
    config = config_normalize({"name": "N", "start": "1", "nodes": {1: {"type": "human", "prompt": "?",
                                                                          "transitions": {2: "1"}}}})

    assert config["nodes"] == {"1": {"type": "human", "prompt": "?", "transitions": {"2": "1"}}}


@pytest.mark.parametrize("value", [None, [], "text", {"name": "x"}, {"nodes": ["a"]}])
def test_config_normalize_leaves_what_it_cannot_normalise_alone(value):
    assert config_normalize(copy.deepcopy(value)) == value


# --- yamltext ------------------------------------------------------------------------------------

COMMENTED = """\
# The release workflow. Keep this comment.
name: Release    # the name
description: Ship it
start: build
nodes:
  build:
    type: script
    command:
    - make
    - dist
    transitions: {success: ship, failure: failed}
  ship:
    type: subworkflow
    workflow: deploy   # the deploy workflow
    context:
      env: production
    transitions:
      completed: done
      failed: failed
  again:
    type: subworkflow
    workflow: deploy
    transitions: {completed: done}
  other:
    type: subworkflow
    workflow: deploy-staging
    transitions: {completed: done}
  done: {type: end}
  failed: {type: end, status: failed}   # trailing comment
"""


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    old, new = before.splitlines(), after.splitlines()
    assert len(old) == len(new)
    return [(a, b) for a, b in zip(old, new, strict=True) if a != b]


def test_yaml_set_name_changes_only_the_name_and_keeps_comments():
    renamed = yaml_set_name(COMMENTED, "Release v2")

    assert changed_lines(COMMENTED, renamed) == [("name: Release    # the name", "name: Release v2 # the name")]
    assert yaml_load(renamed)["name"] == "Release v2"


def test_yaml_set_name_keeps_the_documented_example_apart_from_the_name():
    renamed = yaml_set_name(EXAMPLE_YAML, "Review loop v2")

    assert changed_lines(EXAMPLE_YAML, renamed) == [
        ("name: Review loop                # required, human-readable",
         "name: Review loop v2             # required, human-readable")]


def test_yaml_set_name_keeps_a_four_space_layout():
    text = ("name: Wide\n"
            "start: a\n"
            "nodes:\n"
            "    a:\n"
            "        type: ai_judge\n"
            "        prompt: Judge\n"
            "        verdicts:\n"
            "            - ok\n"
            "        transitions:\n"
            "            ok: b\n"
            "    b:\n"
            "        type: end\n")

    assert changed_lines(text, yaml_set_name(text, "Wider")) == [("name: Wide", "name: Wider")]


def test_yaml_rewrite_subworkflow_points_matching_nodes_at_the_new_id_and_names_them():
    text, changed = yaml_rewrite_subworkflow(COMMENTED, "deploy", "deploy-v2")

    assert changed == ["ship", "again"]
    assert changed_lines(COMMENTED, text) == [
        ("    workflow: deploy   # the deploy workflow", "    workflow: deploy-v2 # the deploy workflow"),
        ("    workflow: deploy", "    workflow: deploy-v2"),
    ]
    nodes = yaml_load(text)["nodes"]
    assert nodes["other"]["workflow"] == "deploy-staging"


def test_yaml_rewrite_subworkflow_leaves_the_text_identical_when_nothing_matches():
    text, changed = yaml_rewrite_subworkflow(COMMENTED, "nosuch", "other")

    assert changed == []
    assert text is COMMENTED


def test_yaml_load_errors_carry_line_and_column_and_are_invalid_config():
    with pytest.raises(InvalidConfig) as raised:
        yaml_load("name: x\nnodes:\n  a: [1, 2\n")

    assert raised.value.code == "invalid_config"
    assert len(raised.value.errors) == 1
    assert raised.value.errors[0].startswith("The YAML does not parse (line 4, column 1): ")


def test_yaml_load_refuses_duplicate_keys_naming_where():
    with pytest.raises(InvalidConfig) as raised:
        yaml_load("name: x\nstart: a\nname: y\n")

    assert raised.value.code == "invalid_config"
    assert "(line 3, column 1)" in raised.value.errors[0]
    assert 'duplicate key "name"' in raised.value.errors[0]


def test_yaml_load_refuses_text_over_the_limit():
    with pytest.raises(InvalidConfig) as raised:
        yaml_load("a: " + "x" * 200_000)

    assert "the limit is 200000" in raised.value.errors[0]


def test_yaml_dump_round_trips_through_yaml_load_in_key_order():
    config = example()

    dumped = yaml_dump(config)

    assert yaml_load(dumped) == config
    assert dumped.startswith("name: Review loop\ndescription: Draft, judge, revise\nstart: draft\n")


def test_yaml_load_keeps_unquoted_dates_as_text_since_json_has_no_dates():
    config = config_normalize(yaml_load(
        "name: Dated\n"
        "start: done\n"
        "nodes:\n"
        "  done:\n"
        "    type: end\n"
        "    output: {released: 2024-01-01, at: 2024-01-01 10:00:00}\n"))

    assert config["nodes"]["done"]["output"] == {"released": "2024-01-01", "at": "2024-01-01 10:00:00"}
    assert config_check(config) == []


@pytest.mark.parametrize(("text", "where"), [
    ("name: x\nnodes: {done: {type: end, output: !!binary aGk=}}\n", "nodes.done.output"),
    ("name: x\nnodes: {done: {type: end, output: [1, .inf]}}\n", "nodes.done.output[1]"),
    ("tags: !!set {a, b}\n", "tags"),
    (".nan\n", "the top level"),
])
def test_yaml_load_refuses_values_json_cannot_hold_naming_where(text, where):
    with pytest.raises(InvalidConfig) as raised:
        yaml_load(text)

    assert raised.value.code == "invalid_config"
    assert raised.value.errors == [f"The YAML holds a value JSON cannot at {where} (binary data, a set, infinity or "
                                   "NaN); quote it to make it text."]


def test_yaml_rewrite_subworkflow_keeps_unquoted_dates_as_written():
    text = "name: x\nreleased: 2024-01-01   # when\nnodes:\n  s: {type: subworkflow, workflow: old}\n"

    rewritten, changed = yaml_rewrite_subworkflow(text, "old", "new")

    assert changed == ["s"]
    assert changed_lines(text, rewritten) == [("  s: {type: subworkflow, workflow: old}",
                                               "  s: {type: subworkflow, workflow: new}")]
