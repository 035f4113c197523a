"""Playbooks for tests of what starts their executions."""

from __future__ import annotations

from typing import Any

from accounts.models import User
from core.caller import Caller
from workflows.models import Playbook
from workflows.playbooks import playbook_create

# One AI step: an execution starts and pauses there, with no script and no worker.
PLAN: dict[str, Any] = {
    "input": {"type": "object", "properties": {"repo": {"type": "string"}, "event": {"type": "object"}}},
    "steps": [{"id": "digest", "title": "Write the digest", "kind": "ai", "prompt": "Digest {{ context.repo }}"}],
    "output": {"value": "{{ digest.output }}"},
}


def playbook_make(user: User, *, name: str = "Morning digest", plan: dict[str, Any] | None = None) -> Playbook:
    return playbook_create(caller=Caller.trusted(user, via="command"), name=name, plan=plan or PLAN)
