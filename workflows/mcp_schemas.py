"""The output schemas of the workflow tools (Roscoe's) and the playbook, template and dashboard tools
(Aident's): what the structuredContent of each answer that is not an error holds. Every error of these
tools is answered with isError, so no schema covers one; validate_workflow's {valid: false} is an
answer, not an error.

Enumerations come from the tables that define the values (run statuses, trigger types, step kinds,
the node types that pause), so a new value cannot make a valid answer break its schema."""

from __future__ import annotations

from typing import Any

from core.output_schemas import (
    ANY,
    BOOLEAN,
    INTEGER,
    INTEGER_OR_NULL,
    NUMBER,
    NUMBER_OR_NULL,
    OBJECT,
    OBJECT_OR_NULL,
    TEXT,
    TEXT_OR_NULL,
    TEXTS,
    array_of,
    enum,
    nullable,
    obj,
    one_of,
)
from runs.mcp_schemas import AWAITING_CHILD, COST_FIELDS, PENDING_STEP, WAITING_FOR
from runs.models import Run
from workflows.models import Trigger, Workflow
from workflows.plans import KINDS
from workflows.playbook_selectors import HEALTHY, NOT_READY

# --- Roscoe's workflow tools -------------------------------------------------------------------------

SOURCE = enum(*Workflow.Source.values)
WORKFLOW_ROW = obj({"id": TEXT, "name": TEXT, "description": TEXT_OR_NULL, "source": SOURCE, "shadowed": BOOLEAN})
LIST_WORKFLOWS = obj({"result": array_of(WORKFLOW_ROW)},
                     description="The reference's array, as the object MCP requires: {result: [...]}.")
# A stored workflow is schema-checked: these keys are there, and every node has a type.
NODE = obj({"type": TEXT})
GET_WORKFLOW = obj(
    {"name": TEXT, "start": TEXT, "nodes": {"type": "object", "additionalProperties": NODE}, "source": SOURCE},
    {"description": TEXT, "model": TEXT, "context": ANY},
    description="The workflow's configuration as stored, plus the source it was found in.",
)
WORKFLOW_WRITTEN = obj({"id": TEXT, "source": SOURCE, "path": TEXT})
WORKFLOW_CHANGED = obj({"ok": {"const": True}, "source": SOURCE, "path": TEXT})
REFERENCES = obj({"referrers": array_of(obj({"workflowId": TEXT, "nodeId": TEXT, "source": SOURCE}))})
MOVED = obj({"ok": {"const": True}, "id": TEXT, "from": SOURCE, "to": SOURCE, "path": TEXT})
# rewritten and failed name each referring workflow as source:id.
RENAMED = obj({"id": TEXT, "source": SOURCE, "path": TEXT, "rewritten": TEXTS, "failed": TEXTS,
               "rolledBack": BOOLEAN})

EXECUTOR = obj(
    {"type": TEXT, "description": TEXT, "output": TEXT, "pauses": BOOLEAN,
     # A node type's fixed events, or in words where the node's own config gives them (verdicts).
     "events": {"type": ["array", "string"], "items": TEXT},
     "configKeys": array_of(obj({"name": TEXT, "required": BOOLEAN, "description": TEXT}))},
    {"exactlyOneOf": array_of(TEXTS)},
)
PRICE = obj({"inputUsdPerMTok": NUMBER, "outputUsdPerMTok": NUMBER})
MODELS = obj({"available": TEXTS, "default": TEXT_OR_NULL,
              "prices": {"type": "object", "additionalProperties": PRICE}})
WORKFLOW_SCHEMA = obj({"jsonSchema": OBJECT, "executors": array_of(EXECUTOR), "models": MODELS, "authoring": TEXTS})

VALIDATION = one_of(
    obj({"valid": {"const": True}, "errors": {"type": "array", "maxItems": 0}}),
    obj({"valid": {"const": False}, "code": enum("invalid_config", "integrity_error"), "errors": TEXTS}),
)
LINT = obj({"errors": TEXTS, "warnings": array_of(obj({"code": TEXT, "message": TEXT}, {"state": TEXT}))})
AUDIT = obj({
    "findings": array_of(obj({"severity": enum("info", "warning", "error"), "code": TEXT, "message": TEXT},
                             {"state": TEXT})),
    "worstCase": obj({"modelCalls": INTEGER, "costUsd": NUMBER, "bounded": BOOLEAN}),
})

SKILLS = obj({"count": INTEGER, "skills": array_of(obj({"path": TEXT, "name": TEXT, "description": TEXT}))})
CONVERSION_HANDBACK = obj({
    "action": {"const": "run_completion"}, "prompt": TEXT, "model": TEXT_OR_NULL,
    "finalize_args": obj({"skill_path": TEXT, "target_id": TEXT, "target_source": SOURCE, "overwrite": BOOLEAN}),
})
CONVERSION_WRITTEN = obj({"id": TEXT, "source": SOURCE, "path": TEXT, "assetCount": INTEGER,
                          "skippedBundleDirs": TEXTS}, {"skippedNote": TEXT})

# --- Aident's playbook, template and dashboard tools ---------------------------------------------------

RUN_STATUS = enum(*Run.Status.values)
PLAYBOOK_STATUS = enum(HEALTHY, NOT_READY)
# Every key is always there; those that do not apply to the trigger's type are null.
TRIGGER = obj({
    "id": INTEGER, "type": enum(*Trigger.Kind.values), "enabled": BOOLEAN, "cron": TEXT_OR_NULL,
    "preset": TEXT_OR_NULL, "schedule": TEXT_OR_NULL, "timezone": TEXT_OR_NULL, "nextFireAt": TEXT_OR_NULL,
    "lastFiredAt": TEXT_OR_NULL, "event": TEXT_OR_NULL, "filters": OBJECT_OR_NULL,
    "webhookUrlPrefix": TEXT_OR_NULL, "input": OBJECT,
})
INTEGRATION_STATE = obj({"integrationId": TEXT, "name": TEXT, "connected": BOOLEAN, "connectionRequired": BOOLEAN,
                         "available": BOOLEAN})
# A plan is the author's; a client relies on its steps' ids, titles and kinds.
PLAN = obj({"steps": array_of(obj({"id": TEXT, "title": TEXT, "kind": enum(*KINDS)}))},
           {"input": OBJECT, "output": OBJECT})

EXECUTION_FIELDS: dict[str, Any] = {
    "executionId": TEXT, "sessionId": TEXT, "playbookId": TEXT, "playbookName": TEXT, "status": RUN_STATUS,
    "startedBy": enum("user", "trigger"), "triggerId": INTEGER_OR_NULL, "startedAt": TEXT,
    "completedAt": TEXT_OR_NULL, "stopReason": TEXT_OR_NULL, "error": TEXT_OR_NULL, "totalCostUsd": NUMBER,
    "url": TEXT,
}
EXECUTION_ROW = obj(EXECUTION_FIELDS)
EXECUTION_PAGE = obj({"executions": array_of(EXECUTION_ROW), "total": INTEGER, "limit": INTEGER, "offset": INTEGER})

PLAYBOOK_ROW = obj({
    "playbookId": TEXT, "name": TEXT, "goal": TEXT, "status": PLAYBOOK_STATUS, "statusReasons": TEXTS,
    "triggerActive": BOOLEAN, "triggers": array_of(TRIGGER), "nextFireAt": TEXT_OR_NULL, "integrations": TEXTS,
    "runningExecutions": INTEGER, "lastExecution": nullable(EXECUTION_ROW), "detached": BOOLEAN,
    "updatedAt": TEXT,
})
PLAYBOOK_PAGE = obj({"playbooks": array_of(PLAYBOOK_ROW), "total": INTEGER, "limit": INTEGER, "offset": INTEGER})
# A playbook as playbooks_get shows it; generate and instantiate answer it with more.
PLAYBOOK_FIELDS: dict[str, Any] = {
    "playbookId": TEXT, "name": TEXT, "goal": TEXT, "status": PLAYBOOK_STATUS, "statusReasons": TEXTS,
    "plan": PLAN, "content": TEXT, "workflowId": TEXT_OR_NULL, "detached": BOOLEAN, "detachedReason": TEXT_OR_NULL,
    "integrations": array_of(INTEGRATION_STATE), "triggers": array_of(TRIGGER), "templateId": TEXT_OR_NULL,
    "spendingCapUsd": NUMBER_OR_NULL, "version": TEXT, "createdAt": TEXT, "updatedAt": TEXT,
}
PLAYBOOK = obj(PLAYBOOK_FIELDS)
DRAFT = obj({"source": enum("model", "template", "capabilities"), "templateId": TEXT_OR_NULL,
             "capabilities": TEXTS}, {"modelError": TEXT})
PLAYBOOK_GENERATED = obj({**PLAYBOOK_FIELDS, "draft": DRAFT, "refinePrompt": TEXT})
EXECUTION_STARTED = obj({"executionId": TEXT, "sessionId": TEXT, "playbookId": TEXT, "status": RUN_STATUS,
                         "url": TEXT})
TRIGGERS_SET = obj({"playbookId": TEXT, "enabled": BOOLEAN, "triggers": array_of(TRIGGER),
                    "status": PLAYBOOK_STATUS, "statusReasons": TEXTS})
PLAYBOOK_HISTORY = obj({"playbookId": TEXT, "name": TEXT, "executions": array_of(EXECUTION_ROW),
                        "total": INTEGER})

TEMPLATE_FIELDS: dict[str, Any] = {
    "templateId": TEXT, "name": TEXT, "description": TEXT, "category": TEXT, "integrations": TEXTS,
    "stepCount": INTEGER, "triggerTypes": array_of(enum(*Trigger.Kind.values)),
}
TEMPLATE_HITS = obj({"templates": array_of(obj(TEMPLATE_FIELDS, {"score": INTEGER}))},
                    description="score only when the query has words.")
TEMPLATE_PAGE = obj({"templates": array_of(obj(TEMPLATE_FIELDS)), "total": INTEGER, "limit": INTEGER,
                     "offset": INTEGER})
TEMPLATE = obj({
    **TEMPLATE_FIELDS, "plan": PLAN, "exampleInput": OBJECT,
    "suggestedTriggers": array_of(obj({"type": enum(*Trigger.Kind.values)})),
    "requiredIntegrations": array_of(INTEGRATION_STATE), "ready": BOOLEAN, "updatedAt": TEXT,
})
# Each new webhook trigger's URL and signing secret, shown in this answer only.
PLAYBOOK_INSTANTIATED = obj({**PLAYBOOK_FIELDS, "createdTriggers": array_of(
    obj({"triggerId": INTEGER, "webhookUrl": TEXT, "secret": TEXT}))})

DASHBOARD = obj({
    "playbooks": array_of(PLAYBOOK_ROW),
    "totals": obj({"playbooks": INTEGER, "shown": INTEGER, "healthy": INTEGER, "notReady": INTEGER,
                   "runningExecutions": INTEGER}),
})

# content is text, except a capability step's: its output (or {error, output} when it failed).
MESSAGE = obj({"role": enum("system", "user", "assistant", "tool"), "content": ANY, "at": TEXT},
              {"stepId": TEXT, "model": TEXT_OR_NULL, "name": TEXT_OR_NULL, "title": TEXT})
EXECUTION = obj({
    **EXECUTION_FIELDS, "input": ANY, "result": ANY, "pendingStep": nullable(PENDING_STEP),
    "awaitingChild": nullable(AWAITING_CHILD), "waitingFor": nullable(WAITING_FOR),
    "messages": array_of(MESSAGE), "costs": obj(COST_FIELDS),
})
EXECUTION_MESSAGES = obj({"sessionId": TEXT, "status": RUN_STATUS, "done": BOOLEAN, "messages": array_of(MESSAGE)})
