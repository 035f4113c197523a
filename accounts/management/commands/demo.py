import secrets
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from accounts.caller import Caller
from accounts.models import AuditEvent, User
from accounts.services import token_create


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


class Command(BaseCommand):
    help = "Create the demo user once, then print the MCP URL and a fresh personal token for it."

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
        _, raw = token_create(caller=Caller.trusted(user, via=AuditEvent.Via.COMMAND), user=user,
                              label="make run")
        scripts = sandbox.mode()
        self.stdout.write(
            "\n".join([
                "",
                "Atrium is starting.",
                f"  Console and admin:  {settings.ATRIUM_PUBLIC_URL}/admin/   user demo, {password_line}",
                f"  MCP URL:            {settings.ATRIUM_MCP_URL}",
                f"  Token for demo:     {raw}",
                "",
                "  Claude Code:  claude mcp add --transport http atrium "
                f"{settings.ATRIUM_MCP_URL} --header \"Authorization: Bearer {raw}\"",
                "  Docs:         docs/connecting-clients.md",
                "",
                f"  Script nodes: {scripts.name}. {scripts.reason}",
                "",
            ])
        )
