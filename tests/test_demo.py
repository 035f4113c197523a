"""`manage.py demo`, which `make run` calls: the demo user and content once, and a token: the one printed
last time while it is valid, else a new one."""

import hashlib
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from accounts.models import PersonalToken, User
from elements.models import Element, MemoryEntry
from workflows.models import Workflow

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path


def tokens_printed(out: str) -> list[str]:
    return [line.split()[-1] for line in out.splitlines() if "Token for demo" in line]


def test_it_creates_the_demo_user_and_content_once_and_prints_the_same_token_while_valid(capsys, settings):
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
    tokens = tokens_printed(first + second)
    assert len(tokens) == 2 and tokens[0] == tokens[1]
    assert "the same token as last time" in second and "the same token as last time" not in first
    assert [hashlib.sha256(tokens[0].encode()).hexdigest()] == list(
        PersonalToken.objects.filter(user=demo).values_list("digest", flat=True))
    assert (settings.VAR_DIR / "demo-token").stat().st_mode & 0o777 == 0o600
    assert "/mcp" in first


@pytest.mark.parametrize("end", ["revoke", "expire", "lose"])
def test_a_token_revoked_expired_or_lost_is_replaced_by_a_new_one(capsys, settings, end):
    call_command("demo")
    (first,) = tokens_printed(capsys.readouterr().out)
    token = PersonalToken.objects.get(digest=hashlib.sha256(first.encode()).hexdigest())
    if end == "revoke":
        token.revoked_at = timezone.now()
        token.save()
    elif end == "expire":
        token.expires_at = timezone.now() - timedelta(seconds=1)
        token.save()
    else:
        (settings.VAR_DIR / "demo-token").unlink()

    call_command("demo")
    out = capsys.readouterr().out

    (second,) = tokens_printed(out)
    assert second != first and "the same token as last time" not in out
    assert (settings.VAR_DIR / "demo-token").read_text().strip() == second
    call_command("demo")
    assert tokens_printed(capsys.readouterr().out) == [second]


def test_it_says_which_sandbox_script_nodes_run_in(capsys, settings):
    from runs import sandbox

    call_command("demo")
    assert f"  Script nodes: bwrap. {sandbox.mode().reason}\n" in capsys.readouterr().out

    settings.ATRIUM_SCRIPT_SANDBOX = "subprocess"
    call_command("demo")
    line = next(line for line in capsys.readouterr().out.splitlines() if "Script nodes:" in line)
    assert line.startswith("  Script nodes: unavailable. Script nodes cannot run: ATRIUM_SCRIPT_SANDBOX=subprocess")
