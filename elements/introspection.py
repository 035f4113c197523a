"""introspect: operations from the route table, the protocol's types, element formats, categories."""

from __future__ import annotations

from typing import Any

from core.errors import InvalidInput
from elements.fields import TYPE_FIELDS
from elements.selectors import GROUP_BY_FIELDS
from elements.types import ElementType, element_type_parse

TYPES: dict[str, dict[str, Any]] = {
    "ElementType": {"kind": "enum", "description": "The six element types.",
                    "values": [t.value for t in ElementType]},
    "CRUDEndpoint": {"kind": "enum", "description": "The five MCP-AQL tools.",
                     "values": ["mcp_aql_create", "mcp_aql_read", "mcp_aql_update", "mcp_aql_delete",
                                "mcp_aql_execute"]},
    "OperationInput": {"kind": "object", "description": "What every tool takes.",
                       "fields": {"operation": "string (required)", "element_type": "string (singular or plural)",
                                  "params": "object", "operations": "array of OperationInput (a batch, max 50)"}},
    "OperationResult": {"kind": "union", "description": "What every operation answers.",
                        "members": ["OperationSuccess", "OperationFailure"]},
    "OperationSuccess": {"kind": "object", "description": "A successful operation.",
                         "fields": {"success": "true", "data": "the operation's result"}},
    "OperationFailure": {"kind": "object", "description": "A failed operation; nothing was changed.",
                         "fields": {"success": "false", "error": "a human-readable message",
                                    "confirmation": "present when the gatekeeper needs confirm_operation"}},
    "EndpointPermissions": {"kind": "object", "description": "How each endpoint is gated by default.",
                            "fields": {"read": "auto-approved", "create": "confirmed once per session",
                                       "update": "confirmed each time", "delete": "confirmed each time",
                                       "execute": "confirmed each time"}},
}

_REQUIRED = {
    ElementType.PERSONA: ["name", "description", "instructions"],
    ElementType.SKILL: ["name", "description", "content"],
    ElementType.TEMPLATE: ["name", "description", "content"],
    ElementType.AGENT: ["name", "description", "content or goal.template"],
    ElementType.MEMORY: ["name", "description"],
    ElementType.ENSEMBLE: ["name", "description", "metadata.elements"],
}
_MINIMAL = {
    ElementType.PERSONA: {"element_name": "code-reviewer", "description": "Reviews code for bugs.",
                          "instructions": "You ARE a meticulous code reviewer. ALWAYS explain why."},
    ElementType.SKILL: {"element_name": "sql-tuning", "description": "Tunes slow SQL.",
                        "content": "# SQL tuning\n\nRead the plan first..."},
    ElementType.TEMPLATE: {"element_name": "bug-report", "description": "A bug report.",
                           "content": "## {{title}}\n\nSteps: {{steps}}"},
    ElementType.AGENT: {"element_name": "triager", "description": "Triages issues.",
                        "goal": {"template": "Triage {issue}", "parameters": [{"name": "issue", "type": "string",
                                                                               "required": True}]}},
    ElementType.MEMORY: {"element_name": "project-notes", "description": "Notes on the project."},
    ElementType.ENSEMBLE: {"element_name": "review-team", "description": "Reviewer with its skills.",
                           "metadata": {"elements": [{"element_name": "code-reviewer", "element_type": "persona"},
                                                     {"element_name": "sql-tuning", "element_type": "skill"}]}},
}


def _format_spec(element_type: ElementType) -> dict[str, Any]:
    required = _REQUIRED[element_type]
    optional = ["version", "tags", "triggers", "author", "category", "instructions", "content", "gatekeeper",
                *TYPE_FIELDS[element_type]]
    return {
        "elementType": element_type.value,
        "fileFormat": ".yaml" if element_type is ElementType.MEMORY else ".md (YAML front matter + markdown body)",
        "requiredFields": required,
        "optionalFields": [f for f in optional if f not in required],
        "dualFieldGuidance": "instructions: behavioural directives in command voice ('You ARE...', 'ALWAYS...'); "
                             "content: reference material and knowledge.",
        "syntaxNotes": [
            "Names: letters, digits, spaces, '-', '_' and '.', at most 100 characters; case-sensitive.",
            "description at most 500 characters; content and instructions at most 500,000.",
            "Type-specific fields may be sent top-level or under metadata.",
            *(["Placeholders are {{name}} or {{object.path}}; variables are derived from them on save."]
              if element_type is ElementType.TEMPLATE else []),
            *(["Memories are append-only: add entries with addEntry."] if element_type is ElementType.MEMORY else []),
        ],
        "minimalExample": {"operation": "create_element", "element_type": element_type.value,
                           "params": _MINIMAL[element_type]},
        "fullExample": {"operation": "create_element", "element_type": element_type.value,
                        "params": {**_MINIMAL[element_type], "tags": ["example"], "version": "1.0.0"}},
        "namingConventions": ["kebab-case is recommended (code-reviewer); spaces are allowed."],
    }


def _operations() -> list[dict[str, Any]]:
    from elements.mcpaql import ROUTES, Endpoint

    order = list(Endpoint)
    routes = sorted(ROUTES.values(), key=lambda r: (order.index(r.endpoint), r.name))
    return [{"name": r.name, "endpoint": r.endpoint.name, "description": r.description} for r in routes]


def _operation(name: str) -> dict[str, Any] | None:
    from elements.mcpaql import ROUTES, Endpoint

    route = ROUTES.get(name)
    if route is None:
        return None
    return {
        "name": route.name, "endpoint": route.endpoint.name, "mcpTool": route.endpoint.tool,
        "description": route.description,
        "permissions": {"readOnly": route.endpoint is Endpoint.READ,
                        "destructive": route.endpoint in (Endpoint.UPDATE, Endpoint.DELETE, Endpoint.EXECUTE)},
        "parameters": [{"name": p.name, "type": p.type, "required": p.required, "description": p.description,
                        **({"default": p.default} if p.default is not None else {})} for p in route.params],
        "returns": {"name": "data", "kind": "object", "description": route.returns or "See the description."},
        "examples": list(route.examples),
    }


def answer(query: str, name: str | None) -> dict[str, Any]:
    if query == "operations":
        return {"operation": _operation(name)} if name else {"operations": _operations()}
    if query == "types":
        if name:
            return {"type": {"name": name, **TYPES[name]} if name in TYPES else None}
        return {"types": [{"name": n, "kind": t["kind"], "description": t["description"]} for n, t in TYPES.items()]}
    if query == "format":
        if name:
            try:
                return {"formatSpec": _format_spec(element_type_parse(name))}
            except InvalidInput:  # an unknown type answers null, as the other queries do
                return {"formatSpec": None}
        return {"formatSpec": [_format_spec(t) for t in ElementType]}
    if query == "categories":
        return {"categories": {
            "formatRules": {"pattern": "^[a-zA-Z][a-zA-Z0-9\\-_]{0,20}$",
                            "description": "A letter, then up to 20 letters, digits, '-' or '_'.",
                            "examples": ["development", "creative-writing", "data_science"]},
            "supportedTypes": ["persona", "skill", "template", "memory"],
            "allowedGroupByFields": list(GROUP_BY_FIELDS),
            "discovery": {"description": "Count elements per category with list_elements and aggregate.",
                          "examples": ['{"operation": "list_elements", "element_type": "skill", "params": '
                                       '{"aggregate": {"count": true, "group_by": "category"}}}']},
        }}
    return {}
