"""What each element type accepts: the shared fields, the type-specific ones, and their rules.

`clean_fields` turns a client's field set into the exact values to store, or refuses it with a
clear error before anything is written.
"""

from __future__ import annotations

from typing import Any

from core.errors import InvalidInput
from elements import validation
from elements.gatekeeper import clean_policy
from elements.templating import derive_variables, validate_template
from elements.types import ElementType

COMMON_FIELDS = ("description", "instructions", "content", "tags", "triggers", "category", "author", "version",
                 "gatekeeper")

# Keys that belong in `metadata` for each type; clients may send them top-level or under metadata.
TYPE_FIELDS: dict[ElementType, tuple[str, ...]] = {
    ElementType.PERSONA: (),
    ElementType.SKILL: ("proficiency_levels", "parameters"),
    ElementType.TEMPLATE: ("variables", "output_format", "includes"),
    ElementType.AGENT: ("goal", "activates", "tools", "systemPrompt", "autonomy", "resilience", "riskTolerance",
                        "maxConcurrentGoals", "decisionFramework", "specializations", "learningEnabled"),
    ElementType.MEMORY: ("retentionDays", "retention", "autoLoad", "priority", "privacyLevel", "searchable",
                         "trustLevel", "memoryType", "storage_backend"),
    ElementType.ENSEMBLE: ("elements", "activationStrategy", "conflictResolution", "contextSharing", "allowNested",
                           "maxNestingDepth", "resourceLimits"),
}
ENSEMBLE_MEMBER_ALIASES = ("members", "components", "items")
# Where a v1 body goes when an element is read or upgraded.
BODY_IS_INSTRUCTIONS = {ElementType.PERSONA, ElementType.SKILL, ElementType.AGENT}
UNSAFE_KEYS = {"__proto__", "constructor", "prototype"}

ROLES = ("primary", "support", "override", "monitor")
ACTIVATIONS = ("always", "on-demand", "conditional")
STRATEGIES = ("all", "sequential", "lazy", "conditional", "priority")
CONFLICTS = ("last-write", "first-write", "priority", "merge", "error")
MAX_ENSEMBLE_MEMBERS = 50
MAX_NESTING_DEPTH = 10


def version_key(version: str) -> str:
    numbers, _, prerelease = version.partition("-")
    # A release sorts after its prereleases: "~" is after every character a prerelease may use.
    return ".".join(part.zfill(6) for part in numbers.split(".")) + ("-" + prerelease if prerelease else "~")


def split_params(element_type: ElementType, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate a client's params into shared fields and metadata (type-specific and free-form)."""
    if not isinstance(params.get("metadata", {}), dict | type(None)):
        raise InvalidInput("metadata must be an object.", code="invalid_metadata")
    metadata = dict(params.get("metadata") or {})
    for key in TYPE_FIELDS[element_type]:
        if key in params:
            metadata[key] = params[key]
    if element_type is ElementType.ENSEMBLE and "elements" not in metadata:
        for alias in ENSEMBLE_MEMBER_ALIASES:
            source = params.get(alias, metadata.get(alias))
            if source is not None:
                metadata["elements"] = source
                break
        for alias in ENSEMBLE_MEMBER_ALIASES:
            metadata.pop(alias, None)
    common = {key: params[key] for key in COMMON_FIELDS if key in params}
    # Shared fields sent under metadata (as some clients do) count as shared fields.
    for key in COMMON_FIELDS:
        if key in metadata and key not in common:
            common[key] = metadata.pop(key)
    return common, metadata


def _clean_metadata(value: Any, path: str = "metadata", depth: int = 0) -> Any:
    """Free-form metadata: JSON values only, no prototype-pollution keys, bounded depth."""
    if depth > 10:
        raise InvalidInput(f"{path} is nested too deeply (at most 10 levels).", code="invalid_metadata")
    if isinstance(value, dict):
        bad = UNSAFE_KEYS.intersection(value)
        if bad:
            raise InvalidInput(f"{path} may not use the key(s) {', '.join(sorted(bad))}.", code="invalid_metadata")
        return {str(k): _clean_metadata(v, f"{path}.{k}", depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_metadata(v, f"{path}[]", depth + 1) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise InvalidInput(f"{path} holds a value that is not JSON.", code="invalid_metadata")


def _clean_ensemble_members(members: Any) -> list[dict[str, Any]]:
    from elements.types import element_type_parse

    if not isinstance(members, list) or not members:
        raise InvalidInput("An ensemble needs metadata.elements: a non-empty list of "
                           "{element_name, element_type, role?, priority?, activation?, condition?, dependencies?}.",
                           code="ensemble_members_required")
    if len(members) > MAX_ENSEMBLE_MEMBERS:
        raise InvalidInput(f"An ensemble has at most {MAX_ENSEMBLE_MEMBERS} elements (got {len(members)}).",
                           code="ensemble_too_large")
    cleaned = []
    for index, member in enumerate(members):
        where = f"metadata.elements[{index}]"
        if not isinstance(member, dict):
            raise InvalidInput(f"{where} must be an object.", code="invalid_ensemble_member")
        name = member.get("element_name", member.get("name"))
        kind = member.get("element_type", member.get("type"))
        if not isinstance(name, str) or not name.strip() or kind is None:
            raise InvalidInput(f"{where} needs element_name and element_type.", code="invalid_ensemble_member")
        role = member.get("role", "primary")
        role = "primary" if role == "core" else role
        if role not in ROLES:
            raise InvalidInput(f"{where}.role must be one of {', '.join(ROLES)}.", code="invalid_ensemble_member")
        activation = member.get("activation", "always")
        if activation not in ACTIVATIONS:
            raise InvalidInput(f"{where}.activation must be one of {', '.join(ACTIVATIONS)}.",
                               code="invalid_ensemble_member")
        priority = member.get("priority", 50)
        if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 100:
            raise InvalidInput(f"{where}.priority must be a whole number from 0 to 100.",
                               code="invalid_ensemble_member")
        dependencies = member.get("dependencies") or []
        if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
            raise InvalidInput(f"{where}.dependencies must be a list of element names.",
                               code="invalid_ensemble_member")
        entry = {"element_name": name.strip(), "element_type": element_type_parse(kind).value, "role": role,
                 "priority": priority, "activation": activation}
        if member.get("condition"):
            entry["condition"] = str(member["condition"])
        if dependencies:
            entry["dependencies"] = dependencies
        if member.get("purpose"):
            entry["purpose"] = str(member["purpose"])
        cleaned.append(entry)
    names = [m["element_name"] for m in cleaned]
    for member in cleaned:
        missing = [d for d in member.get("dependencies", []) if d not in names]
        if missing:
            raise InvalidInput(f"Ensemble member {member['element_name']} depends on {', '.join(missing)}, "
                               "which is not in the ensemble.", code="invalid_ensemble_member")
    return cleaned


def _clean_type_metadata(element_type: ElementType, metadata: dict[str, Any], fields: dict[str, Any]) -> None:
    if element_type is ElementType.ENSEMBLE:
        metadata["elements"] = _clean_ensemble_members(metadata.get("elements"))
        for key, allowed in (("activationStrategy", STRATEGIES), ("conflictResolution", CONFLICTS)):
            if key in metadata and metadata[key] not in allowed:
                raise InvalidInput(f"{key} must be one of {', '.join(allowed)}.", code="invalid_ensemble")
        depth = metadata.get("maxNestingDepth", 5)
        if not isinstance(depth, int) or not 1 <= depth <= MAX_NESTING_DEPTH:
            raise InvalidInput(f"maxNestingDepth must be a whole number from 1 to {MAX_NESTING_DEPTH}.",
                               code="invalid_ensemble")
    elif element_type is ElementType.TEMPLATE:
        declared = metadata.get("variables") or []
        if not isinstance(declared, list):
            raise InvalidInput("variables must be a list of {name, type, required, ...}.", code="invalid_template")
        problems = validate_template(fields["content"], declared)
        if problems:
            raise InvalidInput("Invalid template: " + "; ".join(problems), code="invalid_template")
        metadata["variables"] = derive_variables(fields["content"], declared)
    elif element_type is ElementType.AGENT:
        goal = metadata.get("goal")
        if goal is not None and (not isinstance(goal, dict) or not isinstance(goal.get("template", ""), str)):
            raise InvalidInput("goal must be an object {template, parameters?, successCriteria?}.",
                               code="invalid_agent")
    elif element_type is ElementType.MEMORY and "priority" in metadata and (
        not isinstance(metadata["priority"], int) or isinstance(metadata["priority"], bool)
    ):
        raise InvalidInput("priority must be a whole number (lower loads first).", code="invalid_memory")


def _goal_template(goal: object) -> object:
    # Read before the type fields are checked, so a goal that is not an object counts as none here
    # and is refused by name there.
    return goal.get("template") if isinstance(goal, dict) else None


def clean_fields(element_type: ElementType, fields: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    """The complete, valid values to store for an element of `element_type`.

    `fields` holds the shared fields (all of them, already merged with what is stored), and
    `metadata` the type-specific and free-form ones.
    """
    cleaned: dict[str, Any] = {
        "description": validation.clean_description(fields.get("description") or ""),
        "instructions": validation.clean_text(fields.get("instructions"), field="instructions"),
        "content": validation.clean_text(fields.get("content"), field="content"),
        "tags": validation.clean_tags(fields.get("tags") or []),
        "triggers": validation.clean_triggers(fields.get("triggers") or []),
        "category": validation.clean_category(fields.get("category") or ""),
        "author": str(fields.get("author") or "")[:150],
        "version": validation.clean_version(fields.get("version") or "1.0.0"),
        "gatekeeper": clean_policy(fields.get("gatekeeper")),
    }
    if element_type is ElementType.PERSONA:
        if not cleaned["instructions"] and cleaned["content"]:
            # The original treats a persona given only content as its instructions.
            cleaned["instructions"], cleaned["content"] = cleaned["content"], ""
        if not cleaned["instructions"]:
            raise InvalidInput("Persona instructions are required.", code="instructions_required")
        validation.check_persona_instructions(cleaned["instructions"])
    elif element_type is ElementType.TEMPLATE and not cleaned["content"]:
        raise InvalidInput("A template needs content: the body with its {{placeholders}}.", code="content_required")
    elif element_type is ElementType.SKILL and not (cleaned["content"] or cleaned["instructions"]):
        # An upgraded v1 skill keeps its body as instructions, so either field will do.
        raise InvalidInput("A skill needs content (or instructions).", code="content_required")
    elif element_type is ElementType.AGENT and not (cleaned["content"] or cleaned["instructions"]
                                                     or _goal_template(metadata.get("goal"))):
        raise InvalidInput("An agent needs content, instructions or goal.template.", code="content_required")
    if element_type is not ElementType.PERSONA:
        for field in ("instructions", "content"):
            if cleaned[field]:
                validation.check_body(cleaned[field], element_type=element_type, field=field)
    cleaned["version_key"] = version_key(cleaned["version"])
    cleaned_metadata = _clean_metadata(metadata)
    _clean_type_metadata(element_type, cleaned_metadata, cleaned)
    cleaned["metadata"] = cleaned_metadata
    return cleaned
