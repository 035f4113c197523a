"""A stand-in for workflows.playbooks.execution_start, used only while that service is not in this tree.

The triggers call `workflows.playbooks.execution_start(caller=, playbook=, input=, trigger=)`; this
does what it is specified to, as simply as possible: check the input against the plan's input card
(InvalidInput, code invalid_input, extra {"problems"}), create the playbook's run and drive it here.
Nothing is imported at module level, so a worker can install it before Django is set up.
"""

from __future__ import annotations

import sys
import types
from typing import Any


def execution_start(*, caller: Any, playbook: Any, input: dict[str, Any] | None, trigger: Any = None) -> Any:
    from jsonschema import Draft202012Validator

    from accounts.errors import InvalidInput
    from runs import engine
    from runs.models import Run
    from workflows.scoping import Scope

    input = {} if input is None else input
    card = playbook.plan.get("input")
    if card:
        problems = [f"{'.'.join(map(str, e.path)) or 'input'}: {e.message}"
                    for e in Draft202012Validator(card).iter_errors(input)]
        if problems:
            raise InvalidInput(f"The input does not match the playbook's input card: {'; '.join(problems)}",
                               code="invalid_input", extra={"problems": problems})
    workflow = playbook.workflow
    run = engine.run_create(caller=caller, scope=Scope(owner=playbook.owner, project=None), definition=workflow.config,
                            context=input, workflow=workflow, workflow_key=workflow.workflow_id,
                            source=workflow.source, playbook=playbook, trigger=trigger)
    engine.drive(run.pk)
    return Run.objects.get(pk=run.pk)


def missing() -> bool:
    try:
        from workflows import playbooks
    except ImportError:
        return True
    return not hasattr(playbooks, "execution_start")


def install(monkeypatch: Any = None) -> None:
    """Put the stand-in where the triggers look for execution_start, if nothing is there."""
    if not missing():
        return
    module = sys.modules.get("workflows.playbooks") or types.ModuleType("workflows.playbooks")
    if monkeypatch is None:
        sys.modules["workflows.playbooks"] = module
        module.execution_start = execution_start
        return
    monkeypatch.setitem(sys.modules, "workflows.playbooks", module)
    monkeypatch.setattr(module, "execution_start", execution_start, raising=False)
    import workflows

    monkeypatch.setattr(workflows, "playbooks", module, raising=False)
