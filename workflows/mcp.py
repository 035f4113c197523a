"""Roscoe's workflow tools: CRUD, authoring helpers and skill import. Every tool takes exactly
one of `cwd` or `global: true`; writers answer errors as isError with {error, code}."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp import types
from pydantic import Field, WithJsonSchema

from accounts.errors import DomainError
from accounts.mcp_registry import Toolset, error_payload_result, tool
from workflows import conversion, selectors, services
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
          idempotent=True, open_world=False)
    def list_workflows(self, cwd: Cwd = None, global_: Global = None) -> Any:
        """List workflows from the global store and the project: [{id, name, description, source, shadowed}].
        When an id exists in both, the repo one wins and the global one is shadowed: true."""
        return selectors.workflow_list(scope=self._scope(cwd, global_))

    @tool(name="get_workflow", title="Get a workflow", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False)
    def get_workflow(self, workflow_id: WorkflowId, source: Source = None, cwd: Cwd = None,
                     global_: Global = None) -> Any:
        """The full workflow configuration plus a source field. Without source, repo first."""
        workflow = selectors.workflow_find(scope=self._scope(cwd, global_), workflow_id=workflow_id, source=source)
        return {**workflow.config, "source": workflow.source}

    @tool(name="create_workflow", title="Create a workflow", scope=WRITE, read_only=False, destructive=False,
          idempotent=False, open_world=False)
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
          idempotent=True, open_world=False)
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
          idempotent=False, open_world=False)
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
          destructive=False, idempotent=True, open_world=False)
    def list_workflow_references(self, workflow_id: WorkflowId, source: Source = None, cwd: Cwd = None,
                                 global_: Global = None) -> Any:
        """The subworkflow nodes that name this workflow, in every source of the scope (source scopes
        nothing here): {referrers: [{workflowId, nodeId, source}]}. Call before delete_workflow or
        rename_workflow."""
        referrers = selectors.workflow_referrers(scope=self._scope(cwd, global_), workflow_id=workflow_id)
        return {"referrers": selectors.referrer_rows(referrers)}

    @tool(name="move_workflow", title="Move a workflow", scope=WRITE, read_only=False, destructive=False,
          idempotent=False, open_world=False)
    def move_workflow(self, id: WorkflowId, to: Annotated[SourceName, Field(description="global or repo.")],
                      cwd: Cwd = None, global_: Global = None) -> Any:
        """Move a workflow between the global store and the project; refuses when the target already has
        the id. Answers {ok: true, id, from, to, path}."""
        scope = self._scope(cwd, global_)
        workflow, origin = services.workflow_move(caller=self.caller, scope=scope, workflow_id=id, to=to)
        return {"ok": True, "id": workflow.workflow_id, "from": origin, "to": workflow.source,
                "path": selectors.path_of(workflow, scope)}

    @tool(name="duplicate_workflow", title="Duplicate a workflow", scope=WRITE, read_only=False, destructive=False,
          idempotent=False, open_world=False)
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
          idempotent=False, open_world=False)
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
          idempotent=True, open_world=False)
    def get_workflow_schema(self, cwd: Cwd = None, global_: Global = None) -> Any:
        """The JSON Schema of the workflow YAML, every node type (executor) with its config keys, the
        configured models {available, default}, and an authoring list of gotchas. Read it once before
        writing a workflow."""
        self._scope(cwd, global_)
        return {"jsonSchema": json_schema(), "executors": executors(), "models": selectors.models_configured(),
                "authoring": list(AUTHORING)}

    @tool(name="validate_workflow", title="Validate a workflow", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False)
    def validate_workflow(self, config: Config = None, id: Annotated[str | None, Field(
            description="A stored workflow's id, instead of config.")] = None, source: Source = None,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Dry-run schema and integrity validation of config, or of a stored workflow (id, optional source).
        Answers {valid: true, errors: []} or {valid: false, code: invalid_config|integrity_error, errors}."""
        return selectors.validation_report(scope=self._scope(cwd, global_), config=config, workflow_id=id,
                                           source=source)

    @tool(name="lint_workflow", title="Lint a workflow", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False)
    def lint_workflow(self, config: Config = None, id: Annotated[str | None, Field(
            description="A stored workflow's id, instead of config.")] = None, source: Source = None,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Validation plus warnings: {errors, warnings: [{code, message, state?}]}. Codes: dead_state,
        unreachable_state, unknown_model, unhandled_event, unknown_context_key, no_end_node."""
        return selectors.lint_report(scope=self._scope(cwd, global_), config=config, workflow_id=id, source=source)

    @tool(name="audit_workflow", title="Audit a workflow", scope=READ, read_only=True, destructive=False,
          idempotent=True, open_world=False)
    def audit_workflow(self, config: Config = None, id: Annotated[str | None, Field(
            description="A stored workflow's id, instead of config.")] = None, source: Source = None,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """A review of risk and cost: scripts without timeouts or with dangerous commands, loops only a
        person bounds, and the worst-case number of model calls and its cost. Answers {findings: [{severity:
        info|warning|error, code, message, state?}], worstCase: {modelCalls, costUsd, bounded}}."""
        return selectors.audit_report(scope=self._scope(cwd, global_), config=config, workflow_id=id, source=source)

    # --- skill import ----------------------------------------------------------------------------

    @tool(name="list_skills", title="List skills", scope=READ, read_only=True, destructive=False, idempotent=True,
          open_world=False)
    def list_skills(self, content_scan: Annotated[bool, Field(
            description="Also walk the repository tree (depth 6). false: only the standard skill folders.")] = True,
            cwd: Cwd = None, global_: Global = None) -> Any:
        """Skill candidates (SKILL.md files with name and description front matter) in the standard skill
        folders and the repository, when this server can read them, plus your skill elements (path
        element:<name>). Answers {count, skills: [{path, name, description}]}."""
        return conversion.skills_list(caller=self.caller, scope=self._scope(cwd, global_),
                                      content_scan=content_scan)

    @tool(name="convert_skill", title="Convert a skill (step 1)", scope=WRITE, read_only=True, destructive=False,
          idempotent=True, open_world=False)
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
          destructive=False, idempotent=False, open_world=False)
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
