"""A playbook's plan: its format, its check, and its two-way mapping to a workflow definition.

A plan is an input card (a JSON Schema for the execution's input, which templates read as
`context`), ordered steps, and an output card:

    input: {type: object, properties: {repo: {type: string}}, required: [repo]}
    steps:
      - {id: fetch, title: Fetch open issues, kind: capability,
         capability: github.list_repository_issues, input: {owner: "{{ context.owner }}"}}
      - {id: digest, title: Write the digest, kind: ai, prompt: "Summarise: {{ fetch }}"}
      - {id: check, title: Worth sending?, kind: judge, prompt: "...", verdicts: [send, skip],
         continueOn: [send]}
      - {id: approve, title: Approve the post, kind: approval, prompt: "Post it?"}
    output: {description: The digest, value: "{{ digest.output }}"}

It compiles to a straight chain of nodes in Atrium's workflow format: a capability step is a script
node with `capability` (run through the capability runtime as the playbook's owner), an ai step an
ai_agent node, a judge step an ai_judge node, an approval step a human node (approve / reject).
Every step's failure ends the execution `failed`; a judge verdict outside `continueOn` and a
rejected approval end it early but `completed`, saying where it stopped.

`plan_from_definition` reads a plan back from a workflow: the plan whose compilation (under the
workflow's name and description) is exactly that workflow, or None (the workflow was edited into a
shape no plan describes).
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from core.errors import InvalidInput
from workflows.definition import ID_RE, MAX_ID_LENGTH

MAX_STEPS = 50
MAX_TITLE = 200
KINDS = ("capability", "ai", "judge", "approval")
DEFAULT_VERDICTS = ["pass", "fail"]
DONE, FAILED, STOP_PREFIX = "done", "failed", "stop_"
RESERVED = (DONE, FAILED)
STEP_KEYS: dict[str, set[str]] = {
    "capability": {"capability", "input", "timeout"},
    "ai": {"prompt", "model"},
    "judge": {"prompt", "verdicts", "continueOn", "model"},
    "approval": {"prompt"},
}
COMMON_KEYS = {"id", "title", "kind", "description"}
LABEL_FOR_STOP = {"judge": "verdict", "approval": "choice"}


class InvalidPlan(InvalidInput):
    code = "invalid_plan"


def _step_problems(index: int, step: Any, seen: set[str]) -> list[str]:
    where = f"steps[{index}]"
    if not isinstance(step, dict):
        return [f"{where}: must be a mapping with id, title and kind."]
    problems = []
    step_id, kind = step.get("id"), step.get("kind")
    if not isinstance(step_id, str) or not ID_RE.match(step_id) or len(step_id) > MAX_ID_LENGTH:
        problems.append(f"{where}.id: must be an id matching [a-zA-Z0-9_-]+ (at most {MAX_ID_LENGTH} characters).")
    elif step_id in RESERVED or step_id.startswith(STOP_PREFIX) or step_id == "context":
        problems.append(f"{where}.id: {step_id!r} is reserved (done, failed, context and stop_* are).")
    elif step_id in seen:
        problems.append(f"{where}.id: {step_id!r} is used by an earlier step.")
    else:
        seen.add(step_id)
    title = step.get("title")
    if not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE:
        problems.append(f"{where}.title: must be a non-empty string of at most {MAX_TITLE} characters.")
    if kind not in KINDS:
        problems.append(f"{where}.kind: must be one of {', '.join(KINDS)} (got {kind!r}).")
        return problems
    unknown = set(step) - COMMON_KEYS - STEP_KEYS[kind]
    if unknown:
        problems.append(f"{where}: {kind} steps have no key {', '.join(sorted(map(str, unknown)))}; allowed: "
                        f"{', '.join(sorted(COMMON_KEYS | STEP_KEYS[kind]))}.")
    if kind == "capability":
        if not isinstance(step.get("capability"), str) or not step["capability"].strip():
            problems.append(f"{where}.capability: a capability step names the capability it executes "
                            "(an action as integrationId.ACTION, or a skill's name).")
        if "input" in step and not isinstance(step["input"], dict):
            problems.append(f"{where}.input: must be a mapping (string values are templates).")
    else:
        if not isinstance(step.get("prompt"), str) or not step["prompt"].strip():
            problems.append(f"{where}.prompt: a {kind} step needs a prompt (a template).")
    if kind == "judge":
        verdicts = step.get("verdicts", DEFAULT_VERDICTS)
        if not isinstance(verdicts, list) or len(verdicts) < 2 or not all(
                isinstance(v, str) and ID_RE.match(v) for v in verdicts) or len(set(verdicts)) != len(verdicts):
            problems.append(f"{where}.verdicts: must be two or more distinct names matching [a-zA-Z0-9_-]+.")
        else:
            go_on = step.get("continueOn", verdicts[:1])
            if not isinstance(go_on, list) or not go_on or not set(go_on) <= set(verdicts) or \
                    set(go_on) == set(verdicts):
                problems.append(f"{where}.continueOn: must list some, not all, of the verdicts "
                                f"({', '.join(verdicts)}).")
    return problems


def plan_problems(plan: Any) -> list[str]:
    """Every way `plan` is not a plan, as sentences; empty when it is one."""
    if not isinstance(plan, dict):
        return ["The plan must be a mapping with input, steps and output."]
    problems = []
    unknown = set(plan) - {"input", "steps", "output"}
    if unknown:
        problems.append(f"The plan has no key {', '.join(sorted(map(str, unknown)))}; allowed: input, steps, output.")
    card = plan.get("input", {"type": "object"})
    if not isinstance(card, dict) or card.get("type", "object") != "object":
        problems.append("input: the input card must be a JSON Schema of type object.")
    else:
        try:
            Draft202012Validator.check_schema(card)
        except SchemaError as exc:
            problems.append(f"input: not a valid JSON Schema: {exc.message}")
    steps = plan.get("steps")
    if not isinstance(steps, list) or not steps:
        problems.append("steps: a plan needs at least one step.")
    elif len(steps) > MAX_STEPS:
        problems.append(f"steps: at most {MAX_STEPS} steps (got {len(steps)}).")
    else:
        seen: set[str] = set()
        for index, step in enumerate(steps):
            problems.extend(_step_problems(index, step, seen))
    output = plan.get("output", {})
    if not isinstance(output, dict) or set(output) - {"description", "value"}:
        problems.append("output: the output card is a mapping with an optional description and value "
                        "(a template, or a mapping of templates).")
    elif "description" in output and not isinstance(output["description"], str):
        problems.append("output.description: must be a string.")
    return problems


def plan_check(plan: Any) -> dict[str, Any]:
    problems = plan_problems(plan)
    if problems:
        raise InvalidPlan(f"The plan is not valid: {'; '.join(problems)}", extra={"problems": problems})
    return plan


# --- compiling --------------------------------------------------------------------------------------

def _node(step: dict[str, Any], next_id: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The step's node, and the early-stop end node it needs (judge and approval steps)."""
    kind = step["kind"]
    node: dict[str, Any] = {}
    stop: dict[str, Any] | None = None
    if kind == "capability":
        node = {"type": "script", "label": step["title"], "capability": step["capability"],
                "input": step.get("input", {})}
        if "timeout" in step:
            node["timeout"] = step["timeout"]
        node["transitions"] = {"success": next_id, "failure": FAILED}
    elif kind == "ai":
        node = {"type": "ai_agent", "label": step["title"], "prompt": step["prompt"]}
        if "model" in step:
            node["model"] = step["model"]
        node["transitions"] = {"done": next_id}
    elif kind == "judge":
        verdicts = list(step.get("verdicts", DEFAULT_VERDICTS))
        go_on = step.get("continueOn", verdicts[:1])
        node = {"type": "ai_judge", "label": step["title"], "prompt": step["prompt"], "verdicts": verdicts}
        if "model" in step:
            node["model"] = step["model"]
        node["transitions"] = {v: next_id if v in go_on else STOP_PREFIX + step["id"] for v in verdicts}
        stop = {"type": "end", "output": {"stoppedAt": step["id"], "verdict": f"{{{{ {step['id']}.verdict }}}}",
                                          "reasoning": f"{{{{ {step['id']}.reasoning }}}}"}}
    else:
        node = {"type": "human", "label": step["title"], "prompt": step["prompt"],
                "transitions": {"approve": next_id, "reject": STOP_PREFIX + step["id"]}}
        stop = {"type": "end", "output": {"stoppedAt": step["id"], "choice": "reject"}}
    if step.get("description"):
        node = {"type": node["type"], "label": node["label"], "description": step["description"],
                **{k: v for k, v in node.items() if k not in ("type", "label")}}
    return node, stop


def plan_compile(*, name: str, goal: str, plan: dict[str, Any]) -> dict[str, Any]:
    """The workflow definition a (checked) plan runs as."""
    steps = plan["steps"]
    definition: dict[str, Any] = {"name": name}
    if goal:
        definition["description"] = goal
    definition["start"] = steps[0]["id"]
    if "input" in plan:
        definition["context"] = plan["input"]
    nodes: dict[str, Any] = {}
    stops: dict[str, Any] = {}
    for index, step in enumerate(steps):
        next_id = steps[index + 1]["id"] if index + 1 < len(steps) else DONE
        node, stop = _node(step, next_id)
        nodes[step["id"]] = node
        if stop is not None:
            stops[STOP_PREFIX + step["id"]] = stop
    done: dict[str, Any] = {"type": "end"}
    output = plan.get("output", {})
    if output.get("description"):
        done["description"] = output["description"]
    if "value" in output:
        done["output"] = output["value"]
    nodes[DONE] = done
    nodes.update(stops)
    nodes[FAILED] = {"type": "end", "status": "failed"}
    definition["nodes"] = nodes
    return definition


def _step_from(node_id: str, node: dict[str, Any]) -> dict[str, Any] | None:
    kinds = {"script": "capability", "ai_agent": "ai", "ai_judge": "judge", "human": "approval"}
    kind = kinds.get(node.get("type"))
    if kind is None or (kind == "capability" and "capability" not in node):
        return None
    step: dict[str, Any] = {"id": node_id, "title": node.get("label") or node_id, "kind": kind}
    if node.get("description"):
        step["description"] = node["description"]
    if kind == "capability":
        step["capability"] = node["capability"]
        step["input"] = node.get("input", {})
        if "timeout" in node:
            step["timeout"] = node["timeout"]
    else:
        step["prompt"] = node.get("prompt")
        if node.get("model"):
            step["model"] = node["model"]
    if kind == "judge":
        verdicts = node.get("verdicts") or []
        step["verdicts"] = verdicts
        transitions = node.get("transitions") or {}
        step["continueOn"] = [v for v in verdicts if not str(transitions.get(v, "")).startswith(STOP_PREFIX)]
    return step


def _next(node: dict[str, Any]) -> str | None:
    transitions = node.get("transitions") or {}
    for event in ("success", "done", "approve"):
        if event in transitions:
            return transitions[event]
    go_on = [t for t in transitions.values() if not str(t).startswith(STOP_PREFIX)]
    return go_on[0] if go_on else None


def plan_from_definition(definition: dict[str, Any]) -> dict[str, Any] | None:
    """The plan that compiles to exactly `definition` (with its name and description as the
    playbook's name and goal), or None when no plan does."""
    nodes = definition.get("nodes")
    if not isinstance(nodes, dict):
        return None
    steps: list[dict[str, Any]] = []
    current = definition.get("start")
    while current != DONE:
        node = nodes.get(current)
        if not isinstance(node, dict) or len(steps) >= MAX_STEPS:
            return None
        step = _step_from(current, node)
        if step is None:
            return None
        steps.append(step)
        current = _next(node)
    plan: dict[str, Any] = {}
    if "context" in definition:
        plan["input"] = definition["context"]
    plan["steps"] = steps
    done = nodes.get(DONE) or {}
    output: dict[str, Any] = {}
    if done.get("description"):
        output["description"] = done["description"]
    if "output" in done:
        output["value"] = done["output"]
    plan["output"] = output
    if plan_problems(plan):
        return None
    name, goal = definition.get("name"), definition.get("description", "")
    if not isinstance(name, str) or not isinstance(goal, str):
        return None
    if plan_compile(name=name, goal=goal, plan=plan) != definition:
        return None
    return plan


def plan_capabilities(plan: dict[str, Any]) -> list[str]:
    """The capability names the plan's steps execute, in order, once each."""
    names = [step["capability"] for step in plan["steps"] if step["kind"] == "capability"]
    return list(dict.fromkeys(names))
