"""GitHub portfolio sync through the official SDK client against a live server pointed at a fake
GitHub whose repository is a local bare git repository: init, push, a change made on GitHub pulled
back, a conflict forced, one element at a time, status, config with auto-sync, and search."""

import asyncio
import json

import pytest

from elements.models import Element, PortfolioRemote
from tests.conftest import make_member
from tests.fakes import GITHUB_LOGIN, GITHUB_TOKEN, FakeGitHub
from tests.live.conftest import sdk_session, serve
from tests.live.test_live_elements import CREATE, READ, UPDATE, Session
from tests.test_portfolio_sync import SKILL_FROM_GITHUB, bare_repository, commit_directly, files, history, sign_in

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

PORTFOLIO_OPERATIONS = ("init_portfolio", "sync_portfolio", "portfolio_element_manager", "portfolio_status",
                        "portfolio_config")


async def walk(mcp_url: str, token: str, fake: FakeGitHub) -> dict:
    async with sdk_session(mcp_url, token) as client:
        s = Session(client)
        await s.ok(CREATE, "create_element", "persona", element_name="reviewer", description="Reviews code",
                   instructions="You ARE a careful reviewer.")
        await s.ok(CREATE, "create_element", "memory", element_name="notes", description="Notes")
        await s.ok(CREATE, "addEntry", element_name="notes", content="Small PRs")
        answers = {"init": await s.ok(CREATE, "init_portfolio", private=True)}
        answers["preview"] = await s.ok(CREATE, "sync_portfolio", dry_run=True)
        answers["push"] = await s.ok(CREATE, "sync_portfolio", direction="push")
        reviewer = files(fake.bare)["personas/reviewer.md"]
        commit_directly(fake.bare, {"skills/git-bisect.md": SKILL_FROM_GITHUB,
                                    "personas/reviewer.md": reviewer.replace("Reviews code", "GitHub's words")})
        await s.ok(UPDATE, "edit_element", "persona", element_name="reviewer", input={"description": "Alice's"})
        answers["pull"] = await s.ok(CREATE, "sync_portfolio", direction="pull")
        answers["forced"] = await s.ok(CREATE, "sync_portfolio", direction="push", force=True)
        answers["listed"] = await s.ok(CREATE, "portfolio_element_manager", operation="list-remote")
        answers["compare"] = await s.ok(CREATE, "portfolio_element_manager", operation="compare",
                                        element_name="Git Bisect", element_type="skill")
        answers["upload"] = await s.ok(CREATE, "portfolio_element_manager", operation="upload",
                                       element_name="notes", element_type="memory")
        answers["download"] = await s.ok(CREATE, "portfolio_element_manager", operation="download",
                                         element_name="Git Bisect", element_type="skill")
        answers["config"] = await s.ok(READ, "portfolio_config")
        answers["auto_sync"] = await s.ok(READ, "portfolio_config", auto_sync=True)
        await s.ok(CREATE, "create_element", "skill", element_name="auto", description="Pushed by itself",
                   content="Auto.")
        answers["status"] = await s.ok(READ, "portfolio_status")
        answers["search"] = await s.ok(READ, "search", query="bisect", scope="github")
        answers["seen"] = s.seen
        return answers


def test_the_sdk_client_syncs_a_portfolio_with_a_fake_github(tmp_path, fake_server):
    fake = FakeGitHub(fake_server)
    fake.bare = bare_repository(tmp_path / "dollhouse-portfolio.git")
    fake.serve("dollhouse-portfolio", str(fake.bare))
    alice = make_member("alice")
    sign_in(alice)

    with serve(tmp_path, CELERY_BROKER_URL="", ATRIUM_GITHUB_URL=fake.url, ATRIUM_GITHUB_API_URL=fake.url,
               ATRIUM_PORTFOLIO_LOCAL_REMOTES="1") as server:
        answers = asyncio.run(walk(server.mcp_url, alice.token, fake))
        log = server.log.read_text()

    assert set(answers["seen"]) >= set(PORTFOLIO_OPERATIONS)
    assert answers["init"]["created"] is True and answers["init"]["repository"] == f"{GITHUB_LOGIN}/dollhouse-portfolio"
    assert [i["element_name"] for i in answers["preview"]["added"]] == ["notes", "reviewer"]
    assert answers["preview"]["added"] == answers["push"]["added"]
    assert [i["element_name"] for i in answers["pull"]["added"]] == ["Git Bisect"]
    assert [i["element_name"] for i in answers["pull"]["conflicts"]] == ["reviewer"]
    assert [i["element_name"] for i in answers["forced"]["updated"]] == ["reviewer"]
    assert {e["element_name"] for e in answers["listed"]["elements"]} == {"reviewer", "notes", "Git Bisect"}
    assert answers["compare"]["state"] == "in_sync"
    assert answers["upload"]["added"] == answers["upload"]["updated"] == []
    assert answers["config"]["auto_sync"] is False and answers["auto_sync"]["auto_sync"] is True
    # auto_sync pushed the skill made after it was turned on, without a sync_portfolio.
    assert "skills/auto.md" in files(fake.bare)
    assert answers["status"]["pending_local_changes"] == [] and answers["status"]["remote"]["skills"] == 2
    assert [r["path"] for r in answers["search"]["results"]] == ["skills/git-bisect.md"]
    assert "description: Alice's" in files(fake.bare)["personas/reviewer.md"]
    assert history(fake.bare)[0].startswith("Atrium: add skill 'auto'")
    assert Element.objects.get(owner=alice.user, name="Git Bisect").tags == ["git"]
    assert PortfolioRemote.objects.get(user=alice.user).push_queued_at is None
    assert GITHUB_TOKEN not in json.dumps(answers) + log
