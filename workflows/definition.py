"""The workflow definition format: one table of node types drives the schema check, the JSON
Schema get_workflow_schema returns, the executor summaries and the template fields the
integrity check reads.

`config_check` answers the schema questions (keys, types, values); graph rules (targets,
dominance, cycles, subworkflows) live in workflows.analysis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from workflows import expressions

ID_PATTERN = r"^[a-zA-Z0-9_-]+$"
# \Z, not $: in Python `$` also matches before a trailing newline, so "draft\n" would pass as an id.
ID_RE = re.compile(r"^[a-zA-Z0-9_-]+\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_ID_LENGTH = 100
MAX_NODES = 200
DEFAULT_SCRIPT_TIMEOUT = 60
MAX_SCRIPT_TIMEOUT = 3600
DEFAULT_MAP_MAX_ITEMS = 20
MAX_MAP_ITEMS = 100


@dataclass(frozen=True)
class Key:
    """One key of a node (or of the top level): its kind decides the check and the JSON Schema."""

    name: str
    kind: str
    description: str
    required: bool = False
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    # Template roots this key may use besides `context` and node ids (map's `item`, say).
    locals: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeType:
    name: str
    description: str
    output: str
    keys: tuple[Key, ...]
    # Fixed events; None when they come from the node (verdicts) or are free (human).
    events: tuple[str, ...] | None
    pauses: bool
    # Groups of keys of which exactly one must be present.
    one_of: tuple[tuple[str, ...], ...] = ()
    terminal: bool = False

    def key(self, name: str) -> Key | None:
        return next((k for k in self.keys if k.name == name), None)


LABEL = Key("label", "string", "Shown in pendingStep.label and the run page.")
DESCRIPTION = Key("description", "string", "What the node is for.")
TRANSITIONS = Key("transitions", "transitions", "Event -> id of the next node.", required=True)
MAX_ITERATIONS = Key("maxIterations", "integer", "How many times this node may be entered in one run; "
                     "every cycle needs a node with it (or a human node).", minimum=1, maximum=1000)
MODEL = Key("model", "string", "A configured model id; the workflow's `model`, else the default model, when omitted.")
COMMON = (LABEL, DESCRIPTION)
FLOW = (TRANSITIONS, MAX_ITERATIONS)

NODE_TYPES: dict[str, NodeType] = {t.name: t for t in (
    NodeType(
        "script", "Runs on the server in a sandboxed subprocess. A start or answer call waits for it a few "
        "seconds at most (ATRIUM_SCRIPT_WAIT_SECONDS), then answers with the run `running` while it goes on. The "
        "script text is not templated: pass values in through `env`, whose values are templates.",
        "stdout parsed as JSON when it is JSON, else {stdout, stderr, exitCode}",
        (*COMMON, Key("script", "text_raw", "A /bin/sh script."),
         Key("command", "argv", "An argv list run without a shell, e.g. [python3, check.py]."),
         Key("capability", "string", "Instead of a script: a capability to execute as the run's owner (an "
             "integration action as integrationId.ACTION, or a skill's name), through the capability runtime "
             "with the owner's vault connections. Its output is the node's output; an error, or an integration "
             "that is not connected, is `failure`. (An Atrium extension; playbook steps compile to it.)"),
         Key("input", "data", "The capability's input; string values are templates. Only with `capability`."),
         Key("timeout", "integer", f"Seconds before the script is killed (default {DEFAULT_SCRIPT_TIMEOUT}).",
             minimum=1, maximum=MAX_SCRIPT_TIMEOUT),
         Key("env", "env", "Environment variables; values are templates."), *FLOW),
        ("success", "failure"), pauses=False, one_of=(("script", "command", "capability"),),
    ),
    NodeType(
        "condition", "Evaluates `if` over the context and node outputs (comparisons, and/or/not, in, len, literals, "
        "dotted paths), synchronously.", "{value: bool}",
        (*COMMON, Key("if", "expression", "The expression, e.g. review.verdict == \"approve\".", required=True),
         *FLOW),
        ("true", "false"), pauses=False,
    ),
    NodeType(
        "ai_agent", "Pauses: the host runs `prompt` and answers with advance_run.", "{output: <text>}",
        (*COMMON, Key("prompt", "template", "The prompt, a template.", required=True), MODEL, *FLOW),
        ("done",), pauses=True,
    ),
    NodeType(
        "ai_judge", "Pauses like ai_agent; the answer must be {\"verdict\": <one of verdicts>, \"reasoning\": "
        "\"...\"}, else advance_run fails and the run stays at the node.", "{verdict, reasoning}",
        (*COMMON, Key("prompt", "template", "The prompt, a template.", required=True),
         Key("verdicts", "verdicts", "The verdicts the judge may give; each is an event.", required=True),
         MODEL, *FLOW),
        None, pauses=True,
    ),
    NodeType(
        "human", "Pauses; only resume_run (or the run page) continues it, with one of the transition keys.",
        "{choice}",
        (*COMMON, Key("prompt", "template", "What to ask the person, a template.", required=True), *FLOW),
        None, pauses=True,
    ),
    NodeType(
        "consensus", "Pauses for independent subagents. mode vote: each answers the judge envelope and a verdict "
        "wins with `quorum` votes, else no_consensus. mode usc: generate, then one aggregator picks the most "
        "consistent answer.", "{verdict, votes[]} (vote) or {output, index} (usc)",
        (*COMMON, Key("prompt", "template", "The prompt every agent gets, a template.", required=True),
         Key("agents", "agents", "How many agents (3 to 5), or a list of 3 to 5 {model?, prompt?} for "
             "per-agent diversity.", required=True),
         Key("mode", "choice", "vote (default) or usc.", choices=("vote", "usc")),
         Key("verdicts", "verdicts", "The verdicts (required in vote mode); each is an event."),
         Key("quorum", "integer", "Votes a verdict needs (default: a majority).", minimum=1, maximum=5),
         MODEL, *FLOW),
        None, pauses=True,
    ),
    NodeType(
        "round_robin", "Pauses for pairwise matchups over `candidates`, judged on `criterion`; mode first or "
        "contested (each pair judged both ways). With `resolve`, one subagent first turns that prompt into the "
        "candidate list.", "{winner, ranking[]}",
        (*COMMON, Key("candidates", "template_list", "A list, or a template that yields one."),
         Key("resolve", "template", "A prompt whose answer is a JSON array of candidates."),
         Key("criterion", "template", "What to judge on, a template.", required=True),
         Key("mode", "choice", "first (default) or contested.", choices=("first", "contested")),
         MODEL, *FLOW),
        ("done",), pauses=True, one_of=(("candidates", "resolve"),),
    ),
    NodeType(
        "map", "Pauses: items come from `items` (a list or a template yielding one) or from an `extract` prompt "
        "answered by one subagent with a JSON array; then one subagent per item runs `prompt` with {{ item }} and "
        "{{ index }}; then an optional `reduce` prompt over {{ results }}.", "{results[], output?}",
        (*COMMON, Key("items", "template_list", "A list, or a template that yields one."),
         Key("extract", "template", "A prompt whose answer is a JSON array of items."),
         Key("prompt", "template", "The per-item prompt; may use {{ item }} and {{ index }}.", required=True,
             locals=("item", "index")),
         Key("reduce", "template", "A prompt over all branch results ({{ results }}).", locals=("results",)),
         Key("maxItems", "integer", f"At most this many branches (default {DEFAULT_MAP_MAX_ITEMS}).", minimum=1,
             maximum=MAX_MAP_ITEMS),
         MODEL, *FLOW),
        ("done", "failed"), pauses=True, one_of=(("items", "extract"),),
    ),
    NodeType(
        "subworkflow", "Starts a child run of `workflow` with `context` (string values are templates); the "
        "parent waits until it ends.", "the child's final output",
        (*COMMON, Key("workflow", "id", "The id of a workflow in the same scope.", required=True),
         Key("context", "data", "The child's start context; string values are templates."), *FLOW),
        ("completed", "failed"), pauses=False,
    ),
    NodeType(
        "end", "Terminal: the run ends with `status`.", "the rendered output",
        (*COMMON, Key("status", "choice", "completed (default) or failed.", choices=("completed", "failed")),
         Key("output", "data", "The run's output; string values are templates.")),
        (), pauses=False, terminal=True,
    ),
)}

TOP_KEYS = (
    Key("name", "string", "Human-readable name.", required=True),
    Key("description", "string", "What the workflow does."),
    Key("start", "id", "Id of the first node.", required=True),
    Key("model", "string", "The default model for this workflow's AI nodes."),
    Key("context", "json_schema", "A JSON Schema for the start context."),
    Key("nodes", "nodes", "Node id -> node.", required=True),
)


# --- JSON Schema -------------------------------------------------------------------------------

def _key_schema(key: Key) -> dict[str, Any]:
    schema: dict[str, Any]
    match key.kind:
        case "string" | "text_raw" | "template" | "expression":
            schema = {"type": "string", "minLength": 1}
        case "id":
            schema = {"type": "string", "pattern": ID_PATTERN}
        case "integer":
            schema = {"type": "integer"}
            if key.minimum is not None:
                schema["minimum"] = key.minimum
            if key.maximum is not None:
                schema["maximum"] = key.maximum
        case "choice":
            schema = {"enum": list(key.choices)}
        case "argv":
            schema = {"type": "array", "items": {"type": "string"}, "minItems": 1}
        case "env":
            schema = {"type": "object", "propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
                      "additionalProperties": {"type": ["string", "number", "boolean"]}}
        case "transitions":
            schema = {"type": "object", "minProperties": 1,
                      "additionalProperties": {"type": "string", "pattern": ID_PATTERN}}
        case "verdicts":
            schema = {"type": "array", "items": {"type": "string", "pattern": ID_PATTERN}, "minItems": 1,
                      "uniqueItems": True}
        case "template_list":
            schema = {"oneOf": [{"type": "array"}, {"type": "string", "minLength": 1}]}
        case "agents":
            text = {"type": "string", "minLength": 1}
            agent = {"type": "object", "properties": {"model": text, "prompt": text},
                     "additionalProperties": False}
            schema = {"oneOf": [{"type": "integer", "minimum": 3, "maximum": 5},
                                {"type": "array", "items": agent, "minItems": 3, "maxItems": 5}]}
        case "data":
            schema = {}
        case "json_schema":
            schema = {"type": "object"}
        case "nodes":
            schema = {"type": "object", "minProperties": 1, "propertyNames": {"pattern": ID_PATTERN},
                      "additionalProperties": {"oneOf": [_node_schema(t) for t in NODE_TYPES.values()]}}
        case _:
            raise ValueError(f"No schema for key kind {key.kind}")
    return {"description": key.description, **schema}


def _node_schema(node_type: NodeType) -> dict[str, Any]:
    properties = {"type": {"const": node_type.name}} | {k.name: _key_schema(k) for k in node_type.keys}
    schema: dict[str, Any] = {
        "title": node_type.name, "description": node_type.description, "type": "object",
        "properties": properties, "required": ["type", *(k.name for k in node_type.keys if k.required)],
        "additionalProperties": False,
    }
    if node_type.one_of:
        schema["allOf"] = [{"oneOf": [{"required": [name]} for name in group]} for group in node_type.one_of]
    return schema


def json_schema() -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Atrium workflow",
        "type": "object",
        "properties": {k.name: _key_schema(k) for k in TOP_KEYS},
        "required": [k.name for k in TOP_KEYS if k.required],
        "additionalProperties": False,
    }


def executors() -> list[dict[str, Any]]:
    """Each node type with its config keys, for get_workflow_schema."""
    return [
        {
            "type": t.name,
            "description": t.description,
            "output": t.output,
            "pauses": t.pauses,
            "events": list(t.events) if t.events is not None else
            ("the keys of transitions" if t.name == "human" else "the verdicts (plus no_consensus for consensus)"),
            "configKeys": [{"name": k.name, "required": k.required, "description": k.description}
                           for k in t.keys],
            **({"exactlyOneOf": [list(g) for g in t.one_of]} if t.one_of else {}),
        }
        for t in NODE_TYPES.values()
    ]


# --- the schema check --------------------------------------------------------------------------

def _where(node_id: str | None, key: str | None = None) -> str:
    if node_id is None:
        return key or "workflow"
    return f"nodes.{node_id}" + (f".{key}" if key else "")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_template(text: str, where: str, errors: list[str]) -> None:
    try:
        expressions.template_parse(text)
    except expressions.ExpressionError as exc:
        errors.append(f"{where}: bad template: {exc}")


def _check_templates_in(value: Any, where: str, errors: list[str]) -> None:
    if isinstance(value, str):
        _check_template(value, where, errors)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_templates_in(v, f"{where}.{k}", errors)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_templates_in(v, f"{where}[{i}]", errors)


def _check_key(key: Key, value: Any, where: str, errors: list[str]) -> None:
    match key.kind:
        case "string" | "text_raw":
            if not isinstance(value, str) or not value.strip():
                errors.append(f"{where}: must be a non-empty string.")
        case "template":
            if not isinstance(value, str) or not value.strip():
                errors.append(f"{where}: must be a non-empty string (a template).")
            else:
                _check_template(value, where, errors)
        case "expression":
            if not isinstance(value, str) or not value.strip():
                errors.append(f"{where}: must be a non-empty expression string.")
            else:
                try:
                    expressions.parse(value)
                except expressions.ExpressionError as exc:
                    errors.append(f"{where}: bad expression: {exc}")
        case "id":
            if not isinstance(value, str) or not ID_RE.match(value):
                errors.append(f"{where}: must be an id matching [a-zA-Z0-9_-]+.")
        case "integer":
            if not _is_int(value):
                errors.append(f"{where}: must be an integer.")
            elif key.minimum is not None and value < key.minimum:
                errors.append(f"{where}: must be at least {key.minimum}.")
            elif key.maximum is not None and value > key.maximum:
                errors.append(f"{where}: must be at most {key.maximum}.")
        case "choice":
            if value not in key.choices:
                errors.append(f"{where}: must be one of {', '.join(key.choices)} (got {value!r}).")
        case "argv":
            if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
                errors.append(f"{where}: must be a non-empty list of strings (argv).")
        case "env":
            if not isinstance(value, dict):
                errors.append(f"{where}: must be a mapping of variable names to values.")
                return
            for name, v in value.items():
                if not isinstance(name, str) or not ENV_NAME_RE.match(name):
                    errors.append(f"{where}: {name!r} is not a valid environment variable name.")
                elif isinstance(v, str):
                    _check_template(v, f"{where}.{name}", errors)
                elif not isinstance(v, int | float | bool):
                    errors.append(f"{where}.{name}: must be a string, number or boolean.")
        case "transitions":
            if not isinstance(value, dict) or not value:
                errors.append(f"{where}: must be a mapping of events to node ids, with at least one event.")
                return
            for event, target in value.items():
                if not isinstance(target, str) or not ID_RE.match(target):
                    errors.append(f"{where}.{event}: the target must be a node id (got {target!r}).")
        case "verdicts":
            if (not isinstance(value, list) or not value
                    or not all(isinstance(v, str) and ID_RE.match(v) for v in value)):
                errors.append(f"{where}: must be a non-empty list of verdict names matching [a-zA-Z0-9_-]+.")
            elif len(set(value)) != len(value):
                errors.append(f"{where}: verdicts must be unique.")
        case "template_list":
            if isinstance(value, str) and value.strip():
                _check_template(value, where, errors)
            elif isinstance(value, list):
                _check_templates_in(value, where, errors)
            else:
                errors.append(f"{where}: must be a list, or a template that yields one.")
        case "agents":
            if _is_int(value):
                if not 3 <= value <= 5:
                    errors.append(f"{where}: must be 3 to 5 agents (got {value}).")
            elif isinstance(value, list) and 3 <= len(value) <= 5:
                for i, agent in enumerate(value):
                    if (not isinstance(agent, dict) or set(agent) - {"model", "prompt"}
                            or not all(isinstance(v, str) and v.strip() for v in agent.values())):
                        errors.append(f"{where}[{i}]: must be a mapping with optional model and prompt (strings).")
                    elif isinstance(agent.get("prompt"), str):
                        _check_template(agent["prompt"], f"{where}[{i}].prompt", errors)
            else:
                errors.append(f"{where}: must be a number from 3 to 5, or a list of 3 to 5 agents.")
        case "data":
            _check_templates_in(value, where, errors)
        case _:
            raise ValueError(f"No check for key kind {key.kind}")


def _check_node(node_id: str, node: Any, errors: list[str]) -> None:
    where = _where(node_id)
    if not isinstance(node, dict):
        errors.append(f"{where}: must be a mapping with a `type`.")
        return
    type_name = node.get("type")
    node_type = NODE_TYPES.get(type_name) if isinstance(type_name, str) else None
    if node_type is None:
        errors.append(f"{where}: unknown node type {type_name!r}; known types: {', '.join(NODE_TYPES)}.")
        return
    known = {k.name for k in node_type.keys} | {"type"}
    for name in node:
        if name not in known:
            hint = " (end nodes have no transitions)" if node_type.terminal and name == "transitions" else ""
            errors.append(f"{where}: {node_type.name} nodes have no key {name!r}{hint}; "
                          f"allowed: {', '.join(sorted(known))}.")
    for key in node_type.keys:
        if key.name in node:
            _check_key(key, node[key.name], _where(node_id, key.name), errors)
        elif key.required:
            errors.append(f"{where}: {node_type.name} nodes need {key.name!r} ({key.description})")
    for group in node_type.one_of:
        present = [name for name in group if name in node]
        if len(present) != 1:
            errors.append(f"{where}: {node_type.name} nodes need exactly one of {', '.join(group)}"
                          f" (found {', '.join(present) or 'none'}).")
    if node_type.name == "script" and "input" in node and "capability" not in node:
        errors.append(f"{where}: `input` is a capability's input; script and command nodes take `env`.")
    if node_type.name == "script" and "capability" in node and "env" in node:
        errors.append(f"{where}: a capability node takes its values in `input`, not `env`.")
    if node_type.name == "consensus":
        if node.get("mode", "vote") == "vote" and "verdicts" not in node:
            errors.append(f"{where}: consensus nodes in vote mode need 'verdicts'.")
        agents = node.get("agents")
        count = agents if _is_int(agents) else len(agents) if isinstance(agents, list) else None
        quorum = node.get("quorum")
        if count is not None and _is_int(quorum) and quorum > count:
            errors.append(f"{where}.quorum: {quorum} is more votes than agents ({count}).")


def config_normalize(config: Any) -> Any:
    """Transition keys as strings: YAML reads `true:` and `false:` (a condition's events) as booleans."""
    if not isinstance(config, dict) or not isinstance(config.get("nodes"), dict):
        return config
    for node in config["nodes"].values():
        if isinstance(node, dict) and isinstance(node.get("transitions"), dict):
            node["transitions"] = {
                (str(event).lower() if isinstance(event, bool) else str(event)): target
                for event, target in node["transitions"].items()
            }
    config["nodes"] = {str(node_id): node for node_id, node in config["nodes"].items()}
    return config


def config_check(config: Any) -> list[str]:
    """Schema errors, each naming where and the rule; [] when the definition is well formed."""
    if not isinstance(config, dict):
        return [f"A workflow must be a mapping of keys (name, start, nodes, ...), not {type(config).__name__}."]
    errors: list[str] = []
    known = {k.name for k in TOP_KEYS}
    for name in config:
        if name not in known:
            errors.append(f"workflow: unknown key {name!r}; allowed: {', '.join(sorted(known))}.")
    for key in TOP_KEYS:
        if key.name not in config:
            if key.required:
                errors.append(f"workflow: missing required key {key.name!r} ({key.description})")
            continue
        value = config[key.name]
        if key.kind == "json_schema":
            if not isinstance(value, dict):
                errors.append("context: must be a JSON Schema object.")
            else:
                try:
                    Draft202012Validator.check_schema(value)
                except SchemaError as exc:
                    errors.append(f"context: not a valid JSON Schema: {exc.message}.")
        elif key.kind == "nodes":
            if not isinstance(value, dict) or not value:
                errors.append("nodes: must be a mapping of node ids to nodes, with at least one node.")
                continue
            if len(value) > MAX_NODES:
                errors.append(f"nodes: {len(value)} nodes; the limit is {MAX_NODES}.")
            for node_id, node in value.items():
                if not isinstance(node_id, str) or not ID_RE.match(node_id):
                    errors.append(f"nodes: {node_id!r} is not a valid node id ([a-zA-Z0-9_-]+).")
                    continue
                _check_node(node_id, node, errors)
        else:
            _check_key(key, value, key.name, errors)
    return errors


@dataclass(frozen=True)
class TemplateField:
    """A place in a node that holds a template or an expression, and the extra roots it may use."""

    node_id: str
    where: str
    text: str
    is_expression: bool = False
    locals: tuple[str, ...] = field(default=())


def template_fields(config: dict[str, Any]) -> list[TemplateField]:
    """Every template and expression in a well-formed definition."""
    found: list[TemplateField] = []

    def collect(node_id: str, where: str, value: Any, local_names: tuple[str, ...]) -> None:
        if isinstance(value, str):
            if expressions.is_template(value):
                found.append(TemplateField(node_id, where, value, locals=local_names))
        elif isinstance(value, dict):
            for k, v in value.items():
                collect(node_id, f"{where}.{k}", v, local_names)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                collect(node_id, f"{where}[{i}]", v, local_names)

    for node_id, node in config["nodes"].items():
        node_type = NODE_TYPES[node["type"]]
        for key in node_type.keys:
            if key.name not in node:
                continue
            where = _where(node_id, key.name)
            if key.kind == "expression":
                found.append(TemplateField(node_id, where, node[key.name], is_expression=True))
            elif key.kind in ("template", "template_list", "env", "data", "agents"):
                collect(node_id, where, node[key.name], key.locals)
    return found


def node_events(node: dict[str, Any]) -> tuple[str, ...] | None:
    """The events a node can emit; None when any name is allowed (human)."""
    node_type = NODE_TYPES[node["type"]]
    if node_type.name == "human":
        return None
    if node_type.name == "ai_judge":
        return tuple(node["verdicts"])
    if node_type.name == "consensus":
        if node.get("mode", "vote") == "usc":
            return ("done", "no_consensus")
        return (*node.get("verdicts", ()), "no_consensus")
    return node_type.events


def agent_count(node: dict[str, Any]) -> int:
    agents = node.get("agents", 3)
    return agents if _is_int(agents) else len(agents)


AUTHORING = (
    "A template reference {{ node.field }} is valid only when that node runs on every path from start to the "
    "node using it (it dominates it). After a branch, reference a node both branches pass through, or add a "
    "fallback: {{ node.field || \"default\" }}.",
    "Every cycle needs a node with maxIterations (the most times it may be entered in one run), or a human node.",
    "Transition keys must be the node's events: script success/failure, condition true/false, ai_agent done, "
    "ai_judge and consensus their verdicts (consensus also no_consensus), map done/failed, subworkflow "
    "completed/failed, human any names you like. end nodes have no transitions.",
    "YAML reads unquoted true and false as booleans; condition transitions `true:` and `false:` are understood, "
    "but quote other such words used as values.",
    "Script text is not templated (that would let a model's output inject shell commands): pass values in "
    "through env, whose values are templates, and read them as $NAME.",
    "A script's stdout is parsed as JSON when it is JSON, so print one JSON object to hand fields to later nodes.",
    "ai_judge answers must be exactly {\"verdict\": \"<one of verdicts>\", \"reasoning\": \"...\"}; anything else "
    "is refused and the run stays at the node.",
    "A subworkflow's `workflow` must exist in the same scope; a workflow may not include itself, directly or "
    "through others.",
    "Bundled files (a converted skill's scripts/) sit in $ATRIUM_WORKFLOW_DIR when script nodes run.",
    "Validate (validate_workflow) and lint (lint_workflow) before writing; audit_workflow estimates the worst-case "
    "number of model calls and their cost.",
)
