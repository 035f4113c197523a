"""`manage.py demo`, which `make run` calls: the demo user and content once, a fresh token each time."""

import hashlib

import pytest
from django.core.management import call_command

from accounts.models import PersonalToken, User
from elements.models import Element, MemoryEntry
from workflows.models import Workflow

pytestmark = pytest.mark.django_db


def test_it_creates_the_demo_user_and_content_once_and_a_token_each_run(capsys):
    call_command("demo")
    first = capsys.readouterr().out
    call_command("demo")
    second = capsys.readouterr().out

    demo = User.objects.get(username="demo")
    assert "password" in first and "shown once" in first and "shown once" not in second
    assert set(Element.objects.filter(owner=demo).values_list("name", flat=True)) == {
        "code-reviewer", "debugging", "bug-report", "project-notes"}
    assert MemoryEntry.objects.count() == 1
    review_loop = Workflow.objects.get(owner=demo)
    assert (review_loop.workflow_id, review_loop.project) == ("review-loop", None)
    assert review_loop.yaml_text.startswith("# Draft, judge, revise")
    tokens = [line.split()[-1] for line in (first + second).splitlines() if "Token for demo" in line]
    assert len(tokens) == 2 and tokens[0] != tokens[1]
    assert {hashlib.sha256(t.encode()).hexdigest() for t in tokens} == set(
        PersonalToken.objects.filter(user=demo).values_list("digest", flat=True))
    assert "/mcp" in first


def test_it_says_which_sandbox_script_nodes_run_in(capsys, settings):
    from runs import sandbox

    call_command("demo")
    assert f"  Script nodes: bwrap. {sandbox.mode().reason}\n" in capsys.readouterr().out

    settings.ATRIUM_SCRIPT_SANDBOX = "subprocess"
    call_command("demo")
    line = next(line for line in capsys.readouterr().out.splitlines() if "Script nodes:" in line)
    assert line.startswith("  Script nodes: unavailable. Script nodes cannot run: ATRIUM_SCRIPT_SANDBOX=subprocess")
