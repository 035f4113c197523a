"""An agent's definition as execute_agent reads it from the element's metadata: its goal (template,
parameters, success criteria), what it activates, its tools and its system prompt; and what a
goal becomes once its parameters are checked and filled in.

Pure functions: the agent element is read, never written, here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from core.errors import InvalidInput
from elements import validation
from elements.types import ElementType

MAX_GOAL_TEMPLATE = 1000
MAX_RENDERED_GOAL = 5000
MAX_PARAMETERS = 100
MAX_PARAMETER_NAME = 100
MAX_PARAMETER_TEXT = 10_000
MAX_SUCCESS_CRITERIA = 50
MAX_CRITERION = 500
MAX_SYSTEM_PROMPT = 50_000
PARAMETER_TYPES = ("string", "number", "boolean")
DEFAULT_PRIORITY = 5  # goal.priority, from 1 (lowest) to 10
# Single-brace placeholders, as the original's goal templates use them.
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]{0,99})\}")
ACTIVATABLE = {t.plural: t for t in ElementType} | {t.value: t for t in ElementType}
V1_PARAMETER = {"name": "objective", "type": "string", "required": True,
                "description": "What the agent should accomplish"}


@dataclass(frozen=True)
class GoalParameter:
    name: str
    type: str
    required: bool
    description: str = ""
    default: Any = None

    def to_json(self) -> dict[str, Any]:
        data = {"name": self.name, "type": self.type, "required": self.required, "description": self.description}
        if self.default is not None:
            data["default"] = self.default
        return data


@dataclass(frozen=True)
class Goal:
    template: str
    parameters: tuple[GoalParameter, ...]
    success_criteria: tuple[str, ...]
    priority: int = DEFAULT_PRIORITY


def _invalid(agent_name: str, what: str) -> InvalidInput:
    return InvalidInput(f"Agent '{agent_name}' has an invalid {what}: fix it with edit_element.", code="invalid_agent")


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "null" if value is None else type(value).__name__.replace("dict", "object").replace("list", "array")


def _criteria(value: object, agent_name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if (not isinstance(value, list) or len(value) > MAX_SUCCESS_CRITERIA
            or not all(isinstance(c, str) and len(c) <= MAX_CRITERION for c in value)):
        raise _invalid(agent_name, f"goal.successCriteria (a list of at most {MAX_SUCCESS_CRITERIA} texts of at "
                                   f"most {MAX_CRITERION} characters)")
    return tuple(value)


def goal_of(metadata: dict[str, Any], agent_name: str) -> Goal | None:
    """The agent's goal, or None for a v1 agent (one without goal.template)."""
    goal = metadata.get("goal")
    if not isinstance(goal, dict) or not goal.get("template"):
        return None
    template = goal["template"]
    if not isinstance(template, str) or len(template) > MAX_GOAL_TEMPLATE:
        raise _invalid(agent_name, f"goal.template (text of at most {MAX_GOAL_TEMPLATE} characters)")
    parameters = parameters_from(goal.get("parameters"), agent_name)
    criteria = goal.get("successCriteria", goal.get("success_criteria"))
    priority = goal.get("priority", DEFAULT_PRIORITY)
    if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 10:
        raise _invalid(agent_name, "goal.priority (a whole number from 1 to 10)")
    return Goal(template=template, parameters=parameters, success_criteria=_criteria(criteria, agent_name),
                priority=priority)


def parameters_from(declared: object, agent_name: str) -> tuple[GoalParameter, ...]:
    """The goal's declared parameters: [{name, type, required, description, default}]."""
    declared = declared or []
    if not isinstance(declared, list) or len(declared) > MAX_PARAMETERS:
        raise _invalid(agent_name, f"goal.parameters (a list of at most {MAX_PARAMETERS})")
    parameters = []
    for index, raw in enumerate(declared):
        where = f"goal.parameters[{index}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"].strip():
            raise _invalid(agent_name, f"{where} (each needs a name)")
        kind = raw.get("type", "string")
        if kind not in PARAMETER_TYPES:
            raise _invalid(agent_name, f"{where}.type ({', '.join(PARAMETER_TYPES)})")
        parameters.append(GoalParameter(name=raw["name"].strip()[:MAX_PARAMETER_NAME], type=kind,
                                        required=bool(raw.get("required", False)),
                                        description=str(raw.get("description") or "")[:500],
                                        default=raw.get("default")))
    return tuple(parameters)


def v1_goal(instructions: str) -> dict[str, Any]:
    """The goal a v1 agent gets on its first execution: a template from the first line of its
    instructions with the required string parameter `objective`, and the success criteria listed
    under a "success criteria" line of the instructions."""
    lines = [line.strip() for line in instructions.splitlines()]
    first = next((line.lstrip("#>*- ").strip() for line in lines if line.lstrip("#>*- ").strip()), "")
    # Braces in the instructions would read as placeholders.
    lead = first.replace("{", "").replace("}", "")[:200].rstrip(" .:")
    template = f"{lead}: {{objective}}" if lead else "{objective}"
    criteria: list[str] = []
    for index, line in enumerate(lines):
        if "success criteria" in line.lower():
            for item in lines[index + 1:]:
                bullet = re.match(r"^(?:[-*+]|\d{1,3}[.)])\s+(.+)$", item)
                if bullet is None:
                    if item or criteria:
                        break
                    continue
                criteria.append(bullet.group(1)[:MAX_CRITERION])
                if len(criteria) == MAX_SUCCESS_CRITERIA:
                    break
            break
    return {"template": template, "parameters": [dict(V1_PARAMETER)], "successCriteria": criteria}


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _check_value(name: str, value: object, expected: str | None) -> object:
    kind = _kind(value)
    if expected is not None and kind != expected:
        raise InvalidInput(f"Goal parameter '{name}' must be a {expected} (got {_a(kind)}).", code="invalid_parameter")
    if kind not in PARAMETER_TYPES:
        raise InvalidInput(f"Goal parameter '{name}' must be a string, number or boolean (got {_a(kind)}).",
                           code="invalid_parameter")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"Goal parameter '{name}' must be a finite number.", code="invalid_parameter")
    if isinstance(value, str) and len(value) > MAX_PARAMETER_TEXT:
        raise InvalidInput(f"Goal parameter '{name}' is at most {MAX_PARAMETER_TEXT:,} characters (got "
                           f"{len(value):,}).", code="invalid_parameter")
    return value


def parameters_check(goal: Goal, values: dict[str, Any], agent_name: str) -> tuple[dict[str, Any], list[str]]:
    """The goal's parameters from the caller's values and the declared defaults, type-checked and
    bounded, with security warnings. Every missing required parameter is named in one error.
    Parameters the goal does not declare are taken too (a placeholder may use them)."""
    if len(values) > MAX_PARAMETERS:
        raise InvalidInput(f"At most {MAX_PARAMETERS} goal parameters (got {len(values)}).", code="invalid_parameter")
    declared = {p.name: p for p in goal.parameters}
    missing = [p for p in goal.parameters if p.required and values.get(p.name) is None and p.default is None]
    if missing:
        listed = ", ".join(f"{p.name} ({p.type}{': ' + p.description if p.description else ''})" for p in missing)
        raise InvalidInput(
            f"Missing required parameter(s) for agent '{agent_name}': {listed}. Pass them in parameters, e.g. "
            f'{{"parameters": {{"{missing[0].name}": ...}}}}. The agent\'s goal.parameters are in get_element; '
            'introspect {"query": "format", "name": "agent"} describes the agent format.',
            code="missing_parameter")
    checked: dict[str, Any] = {}
    warnings: list[str] = []
    for name, value in values.items():
        if not isinstance(name, str) or not name or len(name) > MAX_PARAMETER_NAME:
            raise InvalidInput(f"Goal parameter names are 1 to {MAX_PARAMETER_NAME} characters.",
                               code="invalid_parameter")
        if value is None:
            continue
        parameter = declared.get(name)
        checked[name] = _check_value(name, value, parameter.type if parameter else None)
        if isinstance(value, str):
            threats = validation.scan_injection(value, element_type=ElementType.AGENT)
            critical = [t for t in threats if t.severity == "critical"]
            if critical:
                raise InvalidInput(f"Goal parameter '{name}' contains security threats: "
                                   f"{', '.join(dict.fromkeys(t.pattern for t in critical))}.",
                                   code="prompt_injection")
            warnings += [f"Goal parameter '{name}': {t.pattern} ({t.severity})" for t in threats]
    for parameter in goal.parameters:
        if parameter.name not in checked and parameter.default is not None:
            checked[parameter.name] = _check_value(parameter.name, parameter.default, parameter.type)
    return checked, warnings


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def goal_render(template: str, values: dict[str, Any]) -> tuple[str, list[str]]:
    """The goal with its {placeholders} filled in; unmatched ones are left as written and warned
    about, and a goal longer than MAX_RENDERED_GOAL is cut there."""
    unmatched: list[str] = []

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in values:
            return _text(values[name])
        unmatched.append(name)
        return match.group(0)

    rendered = PLACEHOLDER.sub(fill, template)
    warnings = []
    if unmatched:
        names = ", ".join("{" + n + "}" for n in dict.fromkeys(unmatched))
        warnings.append(f"{len(unmatched)} placeholder(s) were not substituted: {names}")
    if len(rendered) > MAX_RENDERED_GOAL:
        rendered = rendered[:MAX_RENDERED_GOAL]
        warnings.append(f"The goal was truncated to {MAX_RENDERED_GOAL:,} characters.")
    return rendered, warnings


def activates_of(metadata: dict[str, Any], agent_name: str) -> list[tuple[ElementType, str]]:
    """What the agent activates: (type, name) pairs in the order it lists them."""
    activates = metadata.get("activates") or {}
    if not isinstance(activates, dict):
        raise _invalid(agent_name, "activates (an object of type: [names])")
    pairs = []
    for key, names in activates.items():
        element_type = ACTIVATABLE.get(str(key).lower())
        if element_type is None:
            raise _invalid(agent_name, f"activates key '{str(key)[:40]}' ({', '.join(ACTIVATABLE)})")
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _invalid(agent_name, f"activates.{key} (a list of names)")
        pairs += [(element_type, n.strip()) for n in names if n.strip()]
    return pairs


def tools_of(metadata: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The agent's tools: (allowed, denied) operation names or globs."""
    tools = metadata.get("tools")
    if not isinstance(tools, dict):
        return [], []

    def names(key: str) -> list[str]:
        value = tools.get(key)
        return [v for v in value if isinstance(v, str) and v] if isinstance(value, list) else []

    return names("allowed"), names("denied")


def system_prompt_of(metadata: dict[str, Any]) -> str:
    prompt = metadata.get("systemPrompt", metadata.get("system_prompt"))
    return prompt[:MAX_SYSTEM_PROMPT] if isinstance(prompt, str) else ""
