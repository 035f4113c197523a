"""Skill import: find skills, and turn one into a workflow in two steps so the model call runs on
the host (convert_skill hands back a prompt; finalize_skill_conversion checks and writes the answer).

A skill is a SKILL.md (Agent Skills standard) on a disk this server may read, or one of the
caller's skill elements, addressed as `element:<name>`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from core.caller import Caller
from core.errors import DomainError
from elements.models import Element
from elements.types import ElementType
from workflows import skills
from workflows.definition import ID_RE, MAX_ID_LENGTH
from workflows.errors import DefinitionInvalid
from workflows.scoping import Scope, server_paths_allowed
from workflows.selectors import default_source, models_configured, path_of, workflow_find
from workflows.services import Asset, workflow_save
from workflows.yamltext import yaml_load

ELEMENT_PREFIX = "element:"
SKIPPED_NOTE = ("references/, examples/ and assets/ are not bundled; copy what the workflow needs into its prompts "
                "or scripts/.")


class ConversionFailed(DomainError):
    """Answered as {ok: false, stage, message, rawModelOutput?}."""

    code = "conversion_failed"

    def __init__(self, stage: str, message: str, *, raw: str | None = None, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.payload: dict[str, Any] = {"ok": False, "stage": stage, "message": message}
        if errors:
            self.payload["errors"] = errors
        if raw is not None:
            self.payload["rawModelOutput"] = raw


def _element_skills(caller: Caller) -> list[Element]:
    return list(Element.objects.filter(owner=caller.user, element_type=ElementType.SKILL).order_by("name"))


def skills_list(*, caller: Caller, scope: Scope, content_scan: bool) -> dict[str, Any]:
    found: list[dict[str, str]] = []
    if server_paths_allowed(caller):
        root = Path(scope.root) if scope.root else None
        start = Path(scope.cwd) if scope.cwd and Path(scope.cwd).is_dir() else root
        home = Path(os.path.expanduser("~"))
        for candidate in skills.skills_scan(home=home, env=os.environ, start=start, git_root=root,
                                            content_scan=content_scan):
            found.append({"path": candidate.path, "name": candidate.name, "description": candidate.description})
    for element in _element_skills(caller):
        found.append({"path": f"{ELEMENT_PREFIX}{element.name}", "name": element.name,
                      "description": element.description})
    return {"count": len(found), "skills": found}


def _element_bundle(caller: Caller, name: str) -> skills.SkillBundle:
    element = Element.objects.filter(owner=caller.user, element_type=ElementType.SKILL, name=name).first()
    if element is None:
        raise ConversionFailed("resolve", f"You have no skill element named {name!r}; list_skills shows your skills.")
    body = "\n\n".join(part for part in (element.instructions, element.content) if part.strip())
    text = f"---\nname: {element.name}\ndescription: {element.description}\n---\n\n{body}\n"
    return skills.SkillBundle(skill_file=f"{ELEMENT_PREFIX}{name}", root="", name=element.name,
                              description=element.description, text=text, body=body, scripts=(), skipped_dirs=())


def skill_resolve(*, caller: Caller, skill_path: str) -> skills.SkillBundle:
    if skill_path.startswith(ELEMENT_PREFIX):
        return _element_bundle(caller, skill_path.removeprefix(ELEMENT_PREFIX))
    if not server_paths_allowed(caller):
        raise ConversionFailed("resolve", "This server cannot read files on your machine. Import the skill as a "
                                          "skill element first (mcp_aql_create import_element) and pass "
                                          "element:<name>, or run Atrium locally or over stdio.")
    try:
        return skills.skill_bundle_read(skill_path)
    except skills.SkillError as exc:
        raise ConversionFailed("resolve", exc.message) from exc


def _target(caller: Caller, scope: Scope, bundle: skills.SkillBundle, target_id: str | None,
            target_source: str | None) -> tuple[str, str]:
    workflow_id = target_id or skills.slugify_id(bundle.name)[:MAX_ID_LENGTH]
    if not workflow_id or not ID_RE.match(workflow_id):
        raise ConversionFailed("resolve", f"{workflow_id!r} is not a usable workflow id; pass target_id.")
    try:
        source = default_source(scope=scope, source=target_source)
    except DomainError as exc:
        raise ConversionFailed("resolve", exc.message) from exc
    return workflow_id, source


def _exists(scope: Scope, workflow_id: str, source: str) -> bool:
    try:
        workflow_find(scope=scope, workflow_id=workflow_id, source=source)
    except DomainError:
        return False
    return True


def conversion_prompt(bundle: skills.SkillBundle, workflow_id: str) -> str:
    scripts = "\n".join(f"- {f.path}{' (executable)' if f.executable else ''}" for f in bundle.scripts) or "- none"
    return f"""Convert the skill below into an Atrium workflow: a YAML state machine. Answer with the workflow \
YAML only, in one ```yaml fenced block.

# The format
Top-level keys: name (set it to "{workflow_id}"), description, start (the first node's id), optional context (a \
JSON Schema for the start context), nodes (node id -> node; ids match [a-zA-Z0-9_-]+).
Node types (each non-end node has `transitions: {{event: next-node-id}}`):
- ai_agent: prompt; event done. Output {{{{ node.output }}}}.
- ai_judge: prompt, verdicts: [a, b]; one event per verdict. Output verdict and reasoning.
- human: prompt; transitions keyed by the choices a person picks.
- script: script (/bin/sh) or command (argv), timeout (seconds); events success, failure. The script text is \
not templated: pass values in with env: {{NAME: "{{{{ node.output }}}}"}}.
- condition: if: an expression (==, !=, <, >, and, or, not, in, len(), dotted paths); events true, false.
- consensus: prompt, agents: 3-5, verdicts, quorum; events: each verdict and no_consensus.
- map: items (a list or template) or extract (a prompt answered with a JSON array), prompt using {{{{ item }}}}, \
optional reduce over {{{{ results }}}}; events done, failed.
- end: status completed or failed, optional output.

# Rules
- Use {{{{ nodeId.field }}}} template interpolation whenever a step refers to "the previous result", "the gathered \
context" and so on; {{{{ context.key }}}} reads the start context.
- A reference is only valid if the producing node runs on every path that reaches the consuming node (dominance). \
Branching workflows must reference a node both branches pass through, or use a fallback: \
{{{{ nodeId.field || "default" }}}}.
- Default to ai_judge for routine routing; use consensus (3-5 agents with a quorum) for high-stakes decisions \
(production deploys, security severity, migration safety).
- Cycles (verify -> fix -> re-verify) need maxIterations on at least one node in the loop, unless a human node \
sits in it.
- The skill's bundled scripts are kept with the workflow: run them from script nodes as \
"$ATRIUM_WORKFLOW_DIR/scripts/<file>" (ROSCOE_WORKFLOW_DIR is set too).
- Put a human node before anything irreversible the skill does (deploys, deletes, sending messages).

# Bundled scripts
{scripts}

# The skill ({bundle.skill_file})
{bundle.text}
"""


def skill_conversion_prepare(*, caller: Caller, scope: Scope, skill_path: str, target_id: str | None,
                             target_source: str | None, overwrite: bool) -> dict[str, Any]:
    bundle = skill_resolve(caller=caller, skill_path=skill_path)
    workflow_id, source = _target(caller, scope, bundle, target_id, target_source)
    if not overwrite and _exists(scope, workflow_id, source):
        raise ConversionFailed("resolve", f"A workflow {workflow_id!r} already exists in the {source} source; pass "
                                          "overwrite: true or another target_id.")
    return {
        "action": "run_completion",
        "prompt": conversion_prompt(bundle, workflow_id),
        "model": models_configured()["default"],
        "finalize_args": {"skill_path": skill_path, "target_id": workflow_id, "target_source": source,
                          "overwrite": overwrite},
    }


def skill_conversion_finalize(*, caller: Caller, scope: Scope, raw_model_output: str, skill_path: str,
                              target_id: str | None, target_source: str, overwrite: bool) -> dict[str, Any]:
    # The bundle is read again: nothing the host echoes back is trusted as a source of files.
    bundle = skill_resolve(caller=caller, skill_path=skill_path)
    workflow_id, source = _target(caller, scope, bundle, target_id, target_source)
    text = skills.completion_yaml(raw_model_output)
    try:
        parsed = yaml_load(text)
    except DefinitionInvalid as exc:
        raise ConversionFailed("parse", exc.message, raw=raw_model_output) from exc
    if not isinstance(parsed, dict):
        raise ConversionFailed("parse", "The completion holds no workflow YAML mapping.", raw=raw_model_output)
    assets = [Asset(f.path, f.content, f.executable) for f in bundle.scripts]
    try:
        workflow = workflow_save(caller=caller, scope=scope, workflow_id=workflow_id, source=source,
                                 config=text, overwrite=overwrite, assets=assets)
    except DefinitionInvalid as exc:
        raise ConversionFailed("validate", exc.message, raw=raw_model_output, errors=exc.errors) from exc
    except DomainError as exc:
        raise ConversionFailed("write", exc.message) from exc
    result: dict[str, Any] = {"id": workflow.workflow_id, "source": workflow.source, "path": path_of(workflow, scope),
                              "assetCount": len(assets), "skippedBundleDirs": list(bundle.skipped_dirs)}
    if bundle.skipped_dirs:
        result["skippedNote"] = SKIPPED_NOTE
    return result
