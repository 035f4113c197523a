"""Roscoe's workflow tools: CRUD, authoring helpers and skill import. Every tool takes exactly
one of `cwd` or `global: true`; writers answer errors as isError with {error, code}."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp import types
from pydantic import Field, WithJsonSchema

from core.errors import DomainError
from core.tools import Toolset, error_payload_result, tool
from workflows import conversion, mcp_schemas, playbook_selectors, playbooks, selectors, services, templates
from workflows.definition import AUTHORING, executors, json_schema
from workflows.scoping import MAX_CWD_CHARS, Scope, scope_resolve

Cwd = Annotated[str | None, Field(max_length=MAX_CWD_CHARS, description=(
    "Absolute path of a directory inside the project this call is about (your working directory); resolved to "
    "the project's root. Pass this or global: true."))]
Global = Annotated[bool | None, Field(alias="global", description="true to use your global store instead of a "
                                                                  "project (no working directory).")]
SourceName = Literal["global", "repo"]
Source = Annotated[SourceName | None, Field(description="global or repo. Omitted: repo first when the call has a "
                                                        "project, else global.")]
WorkflowId = Annotated[str, Field(description="A workflow id: letters, digits, _ and -.")]
Config = Annotated[dict[str, Any] | str | None, Field(description="The workflow, as an object or as YAML text "
                                                                  "(comments are kept). get_workflow_schema has "
                                                                  "the format.")]

# Taken as sent, not as a bool: lax validation would read "true", 1 or "yes" as true, and only the
# JSON literal true may delete (the service refuses anything else with confirm_required).
Confirm = Annotated[Any, WithJsonSchema({"type": "boolean", "const": True,
                                         "description": "Must be literally true (the JSON literal, not a string "
                                                        "or a number)."})]

READ, WRITE = "workflows:read", "workflows:write"


class WorkflowTools(Toolset):
    def _error_result(self, exc: DomainError) -> types.CallToolResult:
        if isinstance(exc, conversion.ConversionFailed):
            return error_payload_result(exc.payload)
        return error_payload_result({"error": exc.message, "code": exc.code, **exc.extra})

    def _scope(self, cwd: str | None, global_: bool | None) -> Scope:
        return scope_resolve(caller=self.caller, cwd=cwd, global_=global_)

    # --- CRUD ------------------------------------------------------------------------------------

    @tool(name="list_workflows", title="List workflows", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.LIST_WORKFLOWS)
    def list_workflows(self, cwd: Cwd = None, global_: Global = None) -> Any:
        """List workflows from the global store and the project: [{id, name, description, source, shadowed}].
        When an id exists in both, the repo one wins and the global one is shadowed: true."""
        return selectors.workflow_list(scope=self._scope(cwd, global_))

    @tool(name="get_workflow", title="Get a workflow", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.GET_WORKFLOW)
    def get_workflow(self, workflow_id: WorkflowId, source: Source = None, cwd: Cwd = None,
                     global_: Global = None) -> Any:
        """The full workflow configuration plus a source field. Without source, repo first."""
        workflow = selectors.workflow_find(scope=self._scope(cwd, global_), workflow_id=workflow_id, source=source)
        return {**workflow.config, "source": workflow.source}

    @tool(name="create_workflow", title="Create a workflow", scope=WRITE, read_only=False, destructive=False,
          idempotent=False, open_world=False, output_schema=mcp_schemas.WORKFLOW_WRITTEN)
    def create_workflow(self, id: WorkflowId, source: Source = None, config: Config = None,
                        overwrite: Annotated[bool, Field(description="Replace an existing workflow with this id.")]
                        = False, cwd: Cwd = None, global_: Global = None) -> Any:
        """Write a new workflow (a minimal template when config is omitted); validated (schema and integrity)
        before anything is written. Answers {id, source, path}; errors {error, code, details?} with code
        invalid_id, invalid_config, integrity_error, conflict, no_repo_source or io_error."""
        scope = self._scope(cwd, global_)
        workflow = services.workflow_save(caller=self.caller, scope=scope, workflow_id=id, source=source,
                                          config=config, overwrite=overwrite)
        return {"id": workflow.workflow_id, "source": workflow.source, "path": selectors.path_of(workflow, scope)}

    @tool(name="update_workflow", title="Update a workflow", scope=WRITE, read_only=False, destructive=True,
          idempotent=True, open_world=False, output_schema=mcp_schemas.WORKFLOW_CHANGED)
    def update_workflow(self, id: WorkflowId, config: Annotated[dict[str, Any] | str, Field(
            description="The whole new workflow, as an object or YAML text.")], source: Source = None,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Replace a workflow's contents; refuses to write when schema or integrity validation fails (the
        earlier version stays in the revision history). Answers {ok: true, source, path}."""
        scope = self._scope(cwd, global_)
        workflow = services.workflow_update(caller=self.caller, scope=scope, workflow_id=id, source=source,
                                            config=config)
        return {"ok": True, "source": workflow.source, "path": selectors.path_of(workflow, scope)}

    @tool(name="delete_workflow", title="Delete a workflow", scope=WRITE, read_only=False, destructive=True,
          idempotent=False, open_world=False, output_schema=mcp_schemas.WORKFLOW_CHANGED)
    def delete_workflow(self, id: WorkflowId, confirm: Confirm = None, source: Source = None,
            force: Annotated[bool, Field(description="Delete even when a subworkflow node references it.")] = False,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Delete a workflow (a snapshot stays in its revision history). Needs confirm: true. Refuses while
        another workflow's subworkflow node references it, answering {error, code: referenced, referencedBy};
        force: true deletes anyway. Answers {ok: true, path, source}."""
        scope = self._scope(cwd, global_)
        workflow = services.workflow_delete(caller=self.caller, scope=scope, workflow_id=id, source=source,
                                            confirm=confirm, force=force)
        return {"ok": True, "path": selectors.path_of(workflow, scope), "source": workflow.source}

    @tool(name="list_workflow_references", title="List references to a workflow", scope=READ, read_only=True,
          destructive=False, idempotent=True, open_world=False, output_schema=mcp_schemas.REFERENCES)
    def list_workflow_references(self, workflow_id: WorkflowId, source: Source = None, cwd: Cwd = None,
                                 global_: Global = None) -> Any:
        """The subworkflow nodes that name this workflow, in every source of the scope (source scopes
        nothing here): {referrers: [{workflowId, nodeId, source}]}. Call before delete_workflow or
        rename_workflow."""
        referrers = selectors.workflow_referrers(scope=self._scope(cwd, global_), workflow_id=workflow_id)
        return {"referrers": selectors.referrer_rows(referrers)}

    @tool(name="move_workflow", title="Move a workflow", scope=WRITE, read_only=False, destructive=False,
          idempotent=False, open_world=False, output_schema=mcp_schemas.MOVED)
    def move_workflow(self, id: WorkflowId, to: Annotated[SourceName, Field(description="global or repo.")],
                      cwd: Cwd = None, global_: Global = None) -> Any:
        """Move a workflow between the global store and the project; refuses when the target already has
        the id. Answers {ok: true, id, from, to, path}."""
        scope = self._scope(cwd, global_)
        workflow, origin = services.workflow_move(caller=self.caller, scope=scope, workflow_id=id, to=to)
        return {"ok": True, "id": workflow.workflow_id, "from": origin, "to": workflow.source,
                "path": selectors.path_of(workflow, scope)}

    @tool(name="duplicate_workflow", title="Duplicate a workflow", scope=WRITE, read_only=False, destructive=False,
          idempotent=False, open_world=False, output_schema=mcp_schemas.WORKFLOW_WRITTEN)
    def duplicate_workflow(self, from_id: WorkflowId, to_id: WorkflowId, to_source: Annotated[
            SourceName, Field(description="global or repo.")], from_source: Source = None,
            overwrite: Annotated[bool, Field(description="Replace an existing workflow with to_id.")] = False,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Copy a workflow (and its bundled files) to a new id, setting its name to to_id. Answers
        {id, source, path}."""
        scope = self._scope(cwd, global_)
        workflow = services.workflow_duplicate(caller=self.caller, scope=scope, from_id=from_id,
                                               from_source=from_source, to_id=to_id, to_source=to_source,
                                               overwrite=overwrite)
        return {"id": workflow.workflow_id, "source": workflow.source, "path": selectors.path_of(workflow, scope)}

    @tool(name="rename_workflow", title="Rename a workflow", scope=WRITE, read_only=False, destructive=False,
          idempotent=False, open_world=False, output_schema=mcp_schemas.RENAMED)
    def rename_workflow(self, id: WorkflowId, new_id: WorkflowId, source: Source = None,
                        rewrite_references: Annotated[bool, Field(
                            description="Point every subworkflow node at the new id (default true).")] = True,
                        cwd: Cwd = None, global_: Global = None) -> Any:
        """Rename a workflow and set its name to new_id; refuses when new_id exists in the same source. By
        default every subworkflow node that resolves to it is rewritten, all in one transaction: if one
        rewrite fails, everything is rolled back (rolledBack: true). Answers {id, source, path, rewritten,
        failed, rolledBack}."""
        scope = self._scope(cwd, global_)
        result = services.workflow_rename(caller=self.caller, scope=scope, workflow_id=id, new_id=new_id,
                                          source=source, rewrite_references=rewrite_references)
        workflow = result.workflow
        return {"id": workflow.workflow_id, "source": workflow.source, "path": selectors.path_of(workflow, scope),
                "rewritten": result.rewritten, "failed": result.failed, "rolledBack": False}

    # --- authoring helpers -----------------------------------------------------------------------

    @tool(name="get_workflow_schema", title="Workflow format", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.WORKFLOW_SCHEMA)
    def get_workflow_schema(self, cwd: Cwd = None, global_: Global = None) -> Any:
        """The JSON Schema of the workflow YAML, every node type (executor) with its config keys, the
        configured models {available, default}, and an authoring list of gotchas. Read it once before
        writing a workflow."""
        self._scope(cwd, global_)
        return {"jsonSchema": json_schema(), "executors": executors(), "models": selectors.models_configured(),
                "authoring": list(AUTHORING)}

    @tool(name="validate_workflow", title="Validate a workflow", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.VALIDATION)
    def validate_workflow(self, config: Config = None, id: Annotated[str | None, Field(
            description="A stored workflow's id, instead of config.")] = None, source: Source = None,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Dry-run schema and integrity validation of config, or of a stored workflow (id, optional source).
        Answers {valid: true, errors: []} or {valid: false, code: invalid_config|integrity_error, errors}."""
        return selectors.validation_report(scope=self._scope(cwd, global_), config=config, workflow_id=id,
                                           source=source)

    @tool(name="lint_workflow", title="Lint a workflow", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.LINT)
    def lint_workflow(self, config: Config = None, id: Annotated[str | None, Field(
            description="A stored workflow's id, instead of config.")] = None, source: Source = None,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Validation plus warnings: {errors, warnings: [{code, message, state?}]}. Codes: dead_state,
        unreachable_state, unknown_model, unhandled_event, unknown_context_key, no_end_node."""
        return selectors.lint_report(scope=self._scope(cwd, global_), config=config, workflow_id=id, source=source)

    @tool(name="audit_workflow", title="Audit a workflow", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.AUDIT)
    def audit_workflow(self, config: Config = None, id: Annotated[str | None, Field(
            description="A stored workflow's id, instead of config.")] = None, source: Source = None,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """A review of risk and cost: scripts without timeouts or with dangerous commands, loops only a
        person bounds, and the worst-case number of model calls and its cost. Answers {findings: [{severity:
        info|warning|error, code, message, state?}], worstCase: {modelCalls, costUsd, bounded}}."""
        return selectors.audit_report(scope=self._scope(cwd, global_), config=config, workflow_id=id, source=source)

    # --- skill import ----------------------------------------------------------------------------

    @tool(name="list_skills", title="List skills", scope=READ, read_only=True, destructive=False, idempotent=True,
          open_world=False, output_schema=mcp_schemas.SKILLS)
    def list_skills(self, content_scan: Annotated[bool, Field(
            description="Also walk the repository tree (depth 6). false: only the standard skill folders.")] = True,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Skill candidates (SKILL.md files with name and description front matter) in the standard skill
        folders and the repository, when this server can read them, plus your skill elements (path
        element:<name>). Answers {count, skills: [{path, name, description}]}."""
        return conversion.skills_list(caller=self.caller, scope=self._scope(cwd, global_),
                                      content_scan=content_scan)

    @tool(name="convert_skill", title="Convert a skill (step 1)", scope=WRITE, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.CONVERSION_HANDBACK)
    def convert_skill(self, skill_path: Annotated[str, Field(
            description="Absolute path of a skill folder or markdown file, or element:<name>.")],
            target_id: Annotated[str | None, Field(description="Workflow id; default: the skill's name, "
                                                                "slugged.")] = None,
            target_source: Source = None,
            overwrite: Annotated[bool, Field(description="Replace an existing workflow.")] = False,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Step 1 of turning a skill into a workflow. Makes no model call: answers {action: run_completion,
        prompt, model, finalize_args}. Run prompt yourself, then call finalize_skill_conversion with your raw
        output and finalize_args. Failure: {ok: false, stage: resolve, message}."""
        return conversion.skill_conversion_prepare(caller=self.caller, scope=self._scope(cwd, global_),
                                                   skill_path=skill_path, target_id=target_id,
                                                   target_source=target_source, overwrite=overwrite)

    @tool(name="finalize_skill_conversion", title="Convert a skill (step 2)", scope=WRITE, read_only=False,
          destructive=False, idempotent=False, open_world=False, output_schema=mcp_schemas.CONVERSION_WRITTEN)
    def finalize_skill_conversion(self, raw_model_output: Annotated[str, Field(
            description="Your completion of convert_skill's prompt (workflow YAML, fenced or bare).")],
            skill_path: Annotated[str, Field(description="From finalize_args.")],
            target_source: Annotated[SourceName, Field(description="From finalize_args.")],
            target_id: Annotated[str | None, Field(description="From finalize_args.")] = None,
            overwrite: Annotated[bool, Field(description="From finalize_args.")] = False,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Step 2: re-reads the skill, parses and validates your completion, and writes the workflow with the
        skill's scripts/ bundled. Answers {id, source, path, assetCount, skippedBundleDirs, skippedNote?};
        failure {ok: false, stage: resolve|parse|validate|write, message, rawModelOutput?}."""
        return conversion.skill_conversion_finalize(
            caller=self.caller, scope=self._scope(cwd, global_), raw_model_output=raw_model_output,
            skill_path=skill_path, target_id=target_id, target_source=target_source, overwrite=overwrite)


# --- Aident's playbook, template and dashboard tools -------------------------------------------------

PLAYBOOKS_READ, PLAYBOOKS_CREATE = "playbooks:read", "playbooks:create"
PLAYBOOKS_EXECUTE, PLAYBOOKS_MANAGE = "playbooks:execute", "playbooks:manage"
TEMPLATES_READ, TEMPLATES_USE, DASHBOARD_READ = "templates:read", "templates:use", "dashboard:read"

PlaybookId = Annotated[str, Field(min_length=1, max_length=32, description=(
    "The playbook's id (playbookId from playbooks_list; the reference calls it the editor session id)."))]
TemplateId = Annotated[str, Field(min_length=1, max_length=100, description="The template's id (templateId).")]
ExecutionId = Annotated[str, Field(min_length=1, max_length=32, description=(
    "The execution's id (executionId from playbooks_execute or executions_list)."))]
Limit = Annotated[int, Field(ge=1, le=100, description="At most this many (default 20).")]
Offset = Annotated[int, Field(ge=0, le=100_000, description="Skip this many first (default 0).")]
Category = Annotated[str | None, Field(max_length=60, description=(
    "Only templates of this category (engineering, reporting, notifications, knowledge, operations)."))]


class PlaybookTools(Toolset):
    """Errors are {error, code} (plus the fields the tool names) with isError set, as the capability tools'."""

    def _error_result(self, exc: DomainError) -> types.CallToolResult:
        return error_payload_result({"error": exc.message, "code": exc.code, **exc.extra})

    @tool(name="playbooks_list", title="List playbooks", scope=PLAYBOOKS_READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.PLAYBOOK_PAGE)
    def playbooks_list(self, limit: Limit = 20, offset: Offset = 0) -> Any:
        """Your playbooks, most recently changed first, with status and trigger info: {playbooks: [{playbookId,
        name, goal, status (Healthy or Not Ready), statusReasons, triggerActive, triggers, nextFireAt,
        integrations, lastExecution, detached}], total, limit, offset}."""
        return playbook_selectors.playbook_list(caller=self.caller, limit=limit, offset=offset)

    @tool(name="playbooks_get", title="Get a playbook", scope=PLAYBOOKS_READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.PLAYBOOK)
    def playbooks_get(self, playbookId: PlaybookId) -> Any:
        """A playbook's details: status with its reasons, the plan (input card, steps, output card), content (its
        compiled workflow's YAML), workflowId (edit it with the workflow tools, global store; the plan follows, or
        the playbook says it was detached), integrations with your connection state, and trigger configuration."""
        return playbook_selectors.playbook_detail(caller=self.caller, playbook_id=playbookId)

    @tool(name="playbooks_generate", title="Generate a playbook", scope=PLAYBOOKS_CREATE, read_only=False,
          destructive=False, idempotent=False, open_world=False, output_schema=mcp_schemas.PLAYBOOK_GENERATED)
    def playbooks_generate(
        self,
        prompt: Annotated[str, Field(min_length=10, max_length=4000, description=(
            "What the playbook should do, in words (at least 10 characters)."))],
    ) -> Any:
        """Create a playbook from a description. With a model backend on the server the model drafts it from the
        prompt, the capability catalogue and the templates; without one Atrium drafts it from the best-matching
        template and capabilities. Either way the answer is a saved playbook (as playbooks_get shows it), `draft`
        (how it was made) and `refinePrompt`, a ready prompt for you to improve it through the workflow tools or
        the REST API. A draft's capability steps need their scopes on your token (capabilities:execute, and an
        Atrium action's own), else insufficient_scope (an Atrium extension)."""
        return playbooks.playbook_generate(caller=self.caller, prompt=prompt)

    @tool(name="playbooks_execute", title="Execute a playbook", scope=PLAYBOOKS_EXECUTE, read_only=False,
          destructive=True, idempotent=False, open_world=True, output_schema=mcp_schemas.EXECUTION_STARTED)
    def playbooks_execute(
        self,
        playbookId: PlaybookId,
        input: Annotated[dict[str, Any] | None, Field(description=(
            "Input for the playbook, matching its plan's input card (playbooks_get shows it)."))] = None,
    ) -> Any:
        """Start an execution and return at once: {executionId, sessionId, status, url}. It goes on on the server;
        poll executions_get or executions_messages. Its AI steps are yours to answer (get_run_status and
        advance_run with the executionId as run_id and global: true); a trigger's executions are answered by the
        server's model backend when there is one. An input that breaks the input card fails with invalid_input
        and `problems`."""
        playbook = playbooks.playbook_get_owned(caller=self.caller, playbook_id=playbookId)
        run = playbooks.execution_start(caller=self.caller, playbook=playbook, input=input)
        return playbook_selectors.execution_started(run)

    @tool(name="playbooks_trigger_activate", title="Turn a playbook's triggers on or off", scope=PLAYBOOKS_MANAGE,
          read_only=False, destructive=False, idempotent=True, open_world=False, output_schema=mcp_schemas.TRIGGERS_SET)
    def playbooks_trigger_activate(
        self, playbookId: PlaybookId,
        enabled: Annotated[bool, Field(description="true to enable the playbook's triggers, false to disable them.")],
    ) -> Any:
        """Enable or disable the playbook's triggers (all of them). Answers {playbookId, enabled, triggers, status,
        statusReasons}."""
        playbook = playbooks.playbook_triggers_activate(caller=self.caller, playbook_id=playbookId, enabled=enabled)
        detail = playbook_selectors.playbook_detail(caller=self.caller, playbook_id=playbook.pk)
        return {"playbookId": playbook.pk, "enabled": enabled, "triggers": detail["triggers"],
                "status": detail["status"], "statusReasons": detail["statusReasons"]}

    @tool(name="playbooks_history", title="A playbook's executions", scope=PLAYBOOKS_READ, read_only=True,
          destructive=False, idempotent=True, open_world=False, output_schema=mcp_schemas.PLAYBOOK_HISTORY)
    def playbooks_history(
        self, playbookId: PlaybookId,
        limit: Annotated[int, Field(ge=1, le=100, description="At most this many (default 10).")] = 10,
    ) -> Any:
        """The playbook's executions, newest first: {playbookId, name, executions: [{executionId, status, startedBy,
        triggerId, startedAt, completedAt, stopReason, error, totalCostUsd, url}], total}."""
        return playbook_selectors.playbook_history(caller=self.caller, playbook_id=playbookId, limit=limit)

    @tool(name="templates_search", title="Search playbook templates", scope=TEMPLATES_READ, read_only=True,
          destructive=False, idempotent=True, open_world=False, output_schema=mcp_schemas.TEMPLATE_HITS)
    def templates_search(
        self,
        query: Annotated[str | None, Field(max_length=500, description="Words to look for.")] = None,
        category: Category = None,
    ) -> Any:
        """Templates matching the words (name, description, category, integrations, step titles), best first:
        {templates: [{templateId, name, description, category, integrations, stepCount, triggerTypes, score}]}
        (score only when there are words; higher is better). No words: every template."""
        return {"templates": templates.template_search(caller=self.caller, query=query, category=category)}

    @tool(name="templates_list", title="List playbook templates", scope=TEMPLATES_READ, read_only=True,
          destructive=False, idempotent=True, open_world=False, output_schema=mcp_schemas.TEMPLATE_PAGE)
    def templates_list(self, category: Category = None, limit: Limit = 20, offset: Offset = 0) -> Any:
        """The templates, by category and name: {templates: [...], total, limit, offset}."""
        return templates.template_list(caller=self.caller, category=category, limit=limit, offset=offset)

    @tool(name="templates_get", title="Get a playbook template", scope=TEMPLATES_READ, read_only=True,
          destructive=False, idempotent=True, open_world=False, output_schema=mcp_schemas.TEMPLATE)
    def templates_get(self, templateId: TemplateId) -> Any:
        """A template's details: description, plan, example input, suggested triggers and requiredIntegrations
        [{integrationId, name, connected}] with your connection state (`ready` when all are connected)."""
        return templates.template_get(caller=self.caller, template_id=templateId)

    @tool(name="templates_instantiate", title="Create a playbook from a template", scope=TEMPLATES_USE,
          read_only=False, destructive=False, idempotent=False, open_world=False,
          output_schema=mcp_schemas.PLAYBOOK_INSTANTIATED)
    def templates_instantiate(
        self, templateId: TemplateId,
        name: Annotated[str | None, Field(min_length=1, max_length=200, description=(
            "A name for the new playbook (default: the template's)."))] = None,
    ) -> Any:
        """Create a playbook of yours from the template, with its suggested triggers turned off (turn them on with
        playbooks_trigger_activate once its integrations are connected). Answers the playbook as playbooks_get
        does, plus createdTriggers: each new webhook trigger's URL and signing secret, shown only here. Its
        capability steps will run as you, so your token needs what executing them would (capabilities:execute,
        and an Atrium action's own scope); else insufficient_scope with `scopes` (an Atrium extension)."""
        playbook = playbooks.playbook_instantiate(caller=self.caller, template_id=templateId, name=name)
        return {**playbook_selectors.playbook_detail(caller=self.caller, playbook_id=playbook.pk),
                "createdTriggers": playbook_selectors.created_triggers(playbook)}

    @tool(name="dashboard_overview", title="Dashboard", scope=DASHBOARD_READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.DASHBOARD)
    def dashboard_overview(self) -> Any:
        """Playbooks with an active trigger or a running execution: {playbooks: [{playbookId, name, status,
        statusReasons, triggers, nextFireAt, runningExecutions, lastExecution}], totals}."""
        return playbook_selectors.dashboard_overview(caller=self.caller)

    @tool(name="executions_list", title="List executions", scope=DASHBOARD_READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.EXECUTION_PAGE)
    def executions_list(self, limit: Limit = 20, offset: Offset = 0) -> Any:
        """Recent executions across your playbooks, newest first: {executions: [{executionId, playbookId,
        playbookName, status, startedBy, startedAt, completedAt, error, totalCostUsd, url}], total, limit, offset}."""
        return playbook_selectors.executions_list(caller=self.caller, limit=limit, offset=offset)

    @tool(name="executions_get", title="Get an execution", scope=DASHBOARD_READ, read_only=True, destructive=False,
          idempotent=True, open_world=False, output_schema=mcp_schemas.EXECUTION)
    def executions_get(self, executionId: ExecutionId) -> Any:
        """An execution: status, input, result, error, stopReason, messages, costs, url (the run page), and while it
        waits pendingStep and waitingFor (who is to answer: a host, the server's model or a person; an Atrium
        extension)."""
        run = playbook_selectors.execution_get_owned(caller=self.caller, execution_id=executionId)
        return playbook_selectors.execution_detail(run)

    @tool(name="executions_messages", title="An execution's messages", scope=DASHBOARD_READ, read_only=True,
          destructive=False, idempotent=True, open_world=False, output_schema=mcp_schemas.EXECUTION_MESSAGES)
    def executions_messages(
        self,
        sessionId: Annotated[str, Field(min_length=1, max_length=32, description=(
            "The execution's session id (its executionId)."))],
    ) -> Any:
        """A simplified chat transcript of the execution, for polling: {sessionId, status, done, messages: [{role
        (system, user, assistant, tool), content, stepId, at}]}."""
        return playbook_selectors.execution_messages_get(caller=self.caller, session_id=sessionId)
