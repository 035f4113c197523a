import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from accounts.models import AuditEvent, PersonalToken, User
from accounts.services import token_create, token_digest
from core.caller import Caller

# The token `make run` printed last, kept beside the SQLite database on the developer's own machine
# (mode 0600) so the next start prints the same one while it is valid instead of minting another.
# The database still holds only its digest.
TOKEN_FILE = "demo-token"


def demo_content(caller: Caller) -> None:
    """A few elements and a workflow to try the tools on."""
    from elements.services import element_create, memory_entry_add
    from elements.types import ElementType

    element_create(caller=caller, element_type=ElementType.PERSONA, name="code-reviewer", params={
        "description": "A careful reviewer who explains every finding.",
        "instructions": "You ARE a meticulous code reviewer. ALWAYS explain why a change matters, "
                        "and suggest the smallest fix.", "tags": ["review", "code"], "triggers": ["review"]})
    element_create(caller=caller, element_type=ElementType.SKILL, name="debugging", params={
        "description": "A method for finding bugs.", "triggers": ["debug"], "category": "development",
        "content": "1. Reproduce the bug.\n2. Shrink the input.\n3. Bisect the change.\n4. Fix, then add a test."})
    element_create(caller=caller, element_type=ElementType.TEMPLATE, name="bug-report", params={
        "description": "A bug report.", "content": "## {{title}}\n\nSteps to reproduce:\n{{steps}}\n\n"
                                                  "Expected: {{expected}}"})
    notes = element_create(caller=caller, element_type=ElementType.MEMORY, name="project-notes", params={
        "description": "Things to remember about this project."})
    memory_entry_add(caller=caller, memory=notes, content="The team prefers small pull requests.",
                     tags=["process"])
    demo_workflow(caller)


DEMO_WORKFLOW = """\
# Draft, judge, revise: at most three rounds of review.
name: Review loop
description: Draft a text, have it judged, and revise until it is approved.
start: draft
context:
  type: object
  properties: {topic: {type: string}}
  required: [topic]
nodes:
  draft:
    type: ai_agent
    label: Draft the text
    prompt: "Write about {{ context.topic }}. Earlier feedback: {{ review.reasoning || 'none' }}"
    transitions: {done: review}
  review:
    type: ai_judge
    label: Judge the draft
    prompt: "Judge this draft: {{ draft.output }}"
    verdicts: [approve, revise]
    maxIterations: 3
    transitions: {approve: done, revise: draft}
  done:
    type: end
    output: "{{ draft.output }}"
"""


def demo_workflow(caller: Caller) -> None:
    """A global workflow to try the workflow tools on."""
    from workflows.scoping import Scope
    from workflows.services import workflow_save

    workflow_save(caller=caller, scope=Scope(owner=caller.user, project=None), workflow_id="review-loop",
                  source="global", config=DEMO_WORKFLOW, overwrite=False)


def demo_token(user: User) -> tuple[str, bool]:
    """The token `make run` printed last if it is still an active token of `user`, else a new one
    (kept for next time): (raw token, whether it is the one printed before)."""
    path = Path(settings.VAR_DIR) / TOKEN_FILE
    try:
        kept = path.read_text().strip()
    except OSError:
        kept = ""
    if kept:
        token = PersonalToken.objects.filter(user=user, digest=token_digest(kept)).first()
        if token is not None and token.is_active:
            return kept, True
    _, raw = token_create(caller=Caller.trusted(user, via=AuditEvent.Via.COMMAND), user=user, label="make run")
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as kept_file:
        kept_file.write(raw + "\n")
    return raw, False


class Command(BaseCommand):
    help = ("Create the demo user once, then print the MCP URL and a personal token for it: the one printed last "
            "time while it is valid, else a new one.")

    def handle(self, *args: Any, **options: Any) -> None:
        from runs import sandbox

        user = User.objects.filter(username="demo").first()
        if user is None:
            password = secrets.token_urlsafe(12)
            user = User.objects.create_superuser("demo", email="demo@example.com", password=password)
            demo_content(Caller.trusted(user, via=AuditEvent.Via.COMMAND))
            password_line = f"password {password}  (shown once; change it with: manage.py changepassword demo)"
        else:
            password_line = "password as printed when it was created (reset: manage.py changepassword demo)"
        raw, reused = demo_token(user)
        scripts = sandbox.mode()
        self.stdout.write(
            "\n".join([
                "",
                "Atrium is starting.",
                f"  Console and admin:  {settings.ATRIUM_PUBLIC_URL}/admin/   user demo, {password_line}",
                f"  MCP URL:            {settings.ATRIUM_MCP_URL}",
                f"  Token for demo:     {raw}",
                "                      " + ("the same token as last time; revoke it (Tokens page, admin or API) for "
                                           "a new one" if reused else f"new; the next start prints it again while "
                                           f"it is valid (kept in {settings.VAR_DIR / TOKEN_FILE})"),
                "",
                "  Claude Code:  claude mcp add --transport http atrium "
                f"{settings.ATRIUM_MCP_URL} --header \"Authorization: Bearer {raw}\"",
                "  Docs:         docs/connecting-clients.md",
                "",
                f"  Script nodes: {scripts.name}. {scripts.reason}",
                "",
            ])
        )
