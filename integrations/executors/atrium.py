"""Atrium itself as an integration: memories, elements, workflows and docs as actions, through the
same services and selectors the MCP tools use. Each action needs the scope its MCP tool needs, so a
token that may execute capabilities gains nothing it could not already do."""

from __future__ import annotations

from typing import Any

from core.errors import Forbidden
from docs_kb import selectors as docs_selectors
from elements import selectors as element_selectors
from elements import services as element_services
from elements.types import ElementType
from integrations.executors import ActionCall, ActionSpec, IntegrationSpec, executor
from runs import engine
from runs import selectors as run_selectors
from workflows.scoping import scope_resolve

NAME = {"type": "string", "minLength": 1, "maxLength": 100}
ELEMENT_TYPES = ["persona", "skill", "template", "agent", "memory", "ensemble"]
ELEMENT = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "type": {"type": "string"}, "description": {"type": "string"},
                   "version": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
                   "instructions": {"type": "string"}, "content": {"type": "string"}},
    "required": ["name", "type"],
}
# An element's text is cut to this in action output: an agent that needs all of it has the element tools.
TEXT_CAP = 20_000

INTEGRATION = IntegrationSpec(
    id="atrium_tools",
    name="Atrium",
    description="This Atrium server's own portfolio, workflows and documentation as actions: add to a memory, "
                "read and search your elements, start a workflow run, search the docs.",
    category="productivity",
    agent_instructions="No connection is needed: every action acts as you, with your token's scopes "
                       "(elements:read, elements:write, runs:execute, docs:read as each action says). Use "
                       "atrium_tools.search_elements to find a name before get_element.",
    auth_scheme="none",
    connection_required=False,
    actions=(
        ActionSpec(
            name="add_memory_entry",
            description="Add an entry to one of your memory elements (remember a fact, note or decision for "
                        "later sessions). Needs elements:write.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["memory", "content"],
                          "properties": {"memory": NAME, "content": {"type": "string", "minLength": 1,
                                                                     "maxLength": 50_000},
                                         "tags": {"type": "array", "maxItems": 20,
                                                  "items": {"type": "string", "maxLength": 50}}}},
            output_schema={"type": "object", "required": ["memory", "entryId"],
                           "properties": {"memory": {"type": "string"}, "entryId": {"type": "string"}}},
            executor="atrium.add_memory_entry", config={"scope": "elements:write"},
        ),
        ActionSpec(
            name="get_element",
            description="Read one of your elements (persona, skill, template, agent, memory or ensemble) by type "
                        "and name: its description, instructions and content. Needs elements:read.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["type", "name"],
                          "properties": {"type": {"enum": ELEMENT_TYPES}, "name": NAME}},
            output_schema=ELEMENT,
            executor="atrium.get_element", config={"scope": "elements:read"},
        ),
        ActionSpec(
            name="search_elements",
            description="Find your elements (personas, skills, templates, agents, memories, ensembles) whose "
                        "name, description or text contain the words, best first. Needs elements:read.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["query"],
                          "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 500},
                                         "type": {"enum": ELEMENT_TYPES},
                                         "limit": {"type": "integer", "minimum": 1, "maximum": 50}}},
            output_schema={"type": "object", "required": ["results", "total"],
                           "properties": {"total": {"type": "integer"},
                                          "results": {"type": "array", "items": ELEMENT}}},
            executor="atrium.search_elements", config={"scope": "elements:read"},
        ),
        ActionSpec(
            name="start_workflow",
            description="Start a run of one of your global workflows with a start context; the run pauses at its "
                        "first AI or human step, which you answer with the run tools. Needs runs:execute.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["workflowId"],
                          "properties": {"workflowId": {"type": "string", "minLength": 1, "maxLength": 100},
                                         "context": {"type": "object"}}},
            output_schema={"type": "object", "required": ["runId", "status"],
                           "properties": {"runId": {"type": "string"}, "status": {"type": "string"},
                                          "url": {"type": "string"}}},
            executor="atrium.start_workflow", config={"scope": "runs:execute"},
        ),
        ActionSpec(
            name="search_docs",
            description="Search Atrium's documentation (how to write workflows, skills, connect clients...). "
                        "Needs docs:read.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["query"],
                          "properties": {"query": {"type": "string", "minLength": 2, "maxLength": 500},
                                         "limit": {"type": "integer", "minimum": 1, "maximum": 20}}},
            output_schema={"type": "object", "required": ["results"],
                           "properties": {"results": {"type": "array", "items": {"type": "object"}}}},
            executor="atrium.search_docs", config={"scope": "docs:read"},
        ),
    ),
)


def _require_scope(call: ActionCall) -> None:
    scope = call.action.config.get("scope")
    if scope and scope not in call.caller.scopes:
        raise Forbidden(f"{call.action.full_name} needs the scope '{scope}', which this token does not carry.",
                        code="insufficient_scope")


def _element(element: Any, *, text: bool) -> dict[str, Any]:
    shown = {"name": element.name, "type": element.element_type, "description": element.description,
             "version": element.version, "tags": element.tags}
    if text:
        shown["instructions"] = element.instructions[:TEXT_CAP]
        shown["content"] = element.content[:TEXT_CAP]
    return shown


@executor("atrium.add_memory_entry")
def add_memory_entry(call: ActionCall) -> dict[str, Any]:

    _require_scope(call)
    memory = element_selectors.element_get(caller=call.caller, element_type=ElementType.MEMORY,
                                           name=call.input["memory"])
    entry = element_services.memory_entry_add(caller=call.caller, memory=memory, content=call.input["content"],
                                              tags=call.input.get("tags"), source=call.action.full_name)
    return {"memory": memory.name, "entryId": entry.entry_id}


@executor("atrium.get_element")
def get_element(call: ActionCall) -> dict[str, Any]:

    _require_scope(call)
    element = element_selectors.element_get(caller=call.caller, element_type=ElementType(call.input["type"]),
                                            name=call.input["name"])
    return _element(element, text=True)


@executor("atrium.search_elements")
def search_elements(call: ActionCall) -> dict[str, Any]:

    _require_scope(call)
    kind = call.input.get("type")
    found, total = element_selectors.element_search(caller=call.caller, text=call.input["query"],
                                                    element_type=ElementType(kind) if kind else None,
                                                    page_size=call.input.get("limit", 10))
    return {"total": total, "results": [_element(element, text=False) for element, _ in found]}


@executor("atrium.start_workflow")
def start_workflow(call: ActionCall) -> dict[str, Any]:

    _require_scope(call)
    run = engine.run_start(caller=call.caller, scope=scope_resolve(caller=call.caller, cwd=None, global_=True),
                           workflow_id=call.input["workflowId"], source=None, context=call.input.get("context"),
                           host=None, caps=engine.Caps())
    result = run_selectors.start_result(run)
    return {"runId": result["runId"], "status": result["status"], "url": result.get("url", "")}


@executor("atrium.search_docs")
def search_docs(call: ActionCall) -> dict[str, Any]:

    _require_scope(call)
    return {"results": docs_selectors.docs_search(query=call.input["query"], limit=call.input.get("limit", 5))}
