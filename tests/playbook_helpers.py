"""Playbooks for tests of what starts their executions: a Playbook row and its compiled workflow, made
the way playbook_create makes them (plan_compile, then workflow_save into the owner's global store)."""

from __future__ import annotations

from typing import Any

from accounts.caller import Caller
from accounts.models import User
from workflows.models import Playbook
from workflows.plans import plan_check, plan_compile
from workflows.scoping import Scope
from workflows.services import workflow_save

# One AI step: an execution starts and pauses there, with no script and no worker.
PLAN: dict[str, Any] = {
    "input": {"type": "object", "properties": {"repo": {"type": "string"}, "event": {"type": "object"}}},
    "steps": [{"id": "digest", "title": "Write the digest", "kind": "ai", "prompt": "Digest {{ context.repo }}"}],
    "output": {"value": "{{ digest.output }}"},
}


def playbook_make(user: User, *, name: str = "Morning digest", plan: dict[str, Any] | None = None) -> Playbook:
    plan = plan_check(plan or PLAN)
    caller = Caller.trusted(user, via="command")
    playbook = Playbook.objects.create(owner=user, name=name, plan=plan)
    playbook.workflow = workflow_save(caller=caller, scope=Scope(owner=user, project=None),
                                      workflow_id=f"playbook-{playbook.pk}", source="global",
                                      config=plan_compile(name=name, goal="", plan=plan), overwrite=False)
    playbook.save(update_fields=["workflow"])
    return playbook
