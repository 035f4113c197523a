"""The community collection: browsing, searching, reading and installing from the shipped starter
collection, from a git repository and from an HTTP index; a source out of reach answers from the cache."""

import json
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command

from core.caller import Caller
from elements import collection
from elements.management.commands.collection_index import index_text
from elements.models import CollectionCache, CollectionItem, Element, ElementRevision
from elements.services import element_import
from elements.types import ElementType
from tests.actions import Reply, json_reply

pytestmark = pytest.mark.django_db

READ, CREATE = "mcp_aql_read", "mcp_aql_create"
SHIPPED = Path(django_settings.BASE_DIR) / "collection"
SHIPPED_FILES = sorted(p for p in (SHIPPED / "library").rglob("*") if p.is_file())
PERSONA = """---
name: Git Helper
description: Helps with git commands, rebases and recovering lost work.
unique_id: git-helper
author: tester
version: 1.0.0
tags: [git]
instructions: You help with git.
---

# Git Helper

Ask which branch you are on first.
"""


def library(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        target = root / "library" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


def test_the_shipped_collection_has_thirty_elements_of_all_six_types():
    index = json.loads((SHIPPED / collection.INDEX_FILE).read_text())

    assert index["total_elements"] >= 30
    assert index["skipped"] == []
    assert all(len(index["index"][t.plural]) >= 1 for t in ElementType)


def test_the_committed_index_matches_the_files():
    assert (SHIPPED / collection.INDEX_FILE).read_text() == index_text(SHIPPED)
    call_command("collection_index", "--check")


@pytest.mark.parametrize("path", SHIPPED_FILES, ids=lambda p: p.name)
def test_every_shipped_file_imports_like_a_portfolio_file(alice, path):
    relative = path.relative_to(SHIPPED).as_posix()
    package = collection.package_from_text(path.read_text(), path=relative)

    element, created = element_import(caller=Caller.trusted(alice.user, via="api"), package=package)

    assert created and element.unique_id == package["unique_id"] == path.stem
    assert 10 <= len(element.description) <= 500 and len(element.tags) <= 10
    assert element.version == "1.0.0" and element.category


def test_browsing_lists_the_types_with_counts_and_then_their_items(portfolio, alice):
    p = portfolio(alice)

    sections = p.ok(READ, "browse_collection")
    types = p.ok(READ, "browse_collection", section="library")
    personas = p.ok(READ, "browse_collection", section="library", type="personas")

    assert sections["sections"] == [{"name": "library", "count": sections["total"]}]
    counts = {t["type"]: t["count"] for t in types["types"]}
    assert set(counts) == {t.plural for t in ElementType} and sum(counts.values()) == types["total"]
    assert personas["total"] == counts["personas"]
    assert "library/personas/code-reviewer.md" in [i["path"] for i in personas["items"]]
    assert CollectionCache.objects.get().item_count == types["total"] == CollectionItem.objects.count()


def test_searching_matches_name_description_and_tags_case_insensitively(portfolio, alice):
    p = portfolio(alice)

    by_name = p.ok(READ, "search_collection", query="CODE reviewer")
    by_tag = p.ok(READ, "search_collection", query="postmortem")

    assert by_name["results"][0]["name"] == "Code Reviewer"
    assert {"Postmortem", "Root Cause Analysis"} <= {r["name"] for r in by_tag["results"]}
    assert "must be under 1000 characters" in json.dumps(p.call(READ, "search_collection", query="x" * 1000))


def test_enhanced_search_pages_filters_and_sorts(portfolio, alice):
    p = portfolio(alice)

    first = p.ok(READ, "search_collection_enhanced", query="*", page=1, pageSize=5, sortBy="name")
    skills = p.ok(READ, "search_collection_enhanced", query="*", elementType="skill", pageSize=50)
    operations = p.ok(READ, "search_collection_enhanced", query="incident", category="operations")

    assert [i["name"] for i in first["items"]] == sorted((i["name"] for i in first["items"]), key=str.lower)
    assert first["pagination"]["page"] == 1 and first["pagination"]["pageSize"] == 5
    assert first["pagination"]["totalItems"] == CollectionItem.objects.count()
    assert first["pagination"]["hasNextPage"] is True
    assert {i["type"] for i in skills["items"]} == {"skill"}
    assert operations["items"] and all(i["category"] == "operations" for i in operations["items"])
    assert operations["items"][0]["name"] == "Incident Commander"  # a name match outranks the rest


def test_getting_content_returns_the_metadata_and_the_file(portfolio, alice):
    data = portfolio(alice).ok(READ, "get_collection_content", path="personas/sql-tutor.md")

    assert data["path"] == "library/personas/sql-tutor.md" and data["name"] == "SQL Tutor"
    assert data["content"] == (SHIPPED / "library/personas/sql-tutor.md").read_text()


def test_installing_creates_the_element_and_refuses_it_twice_without_overwrite(portfolio, alice):
    p = portfolio(alice)

    installed = p.ok(CREATE, "install_collection_content", path="library/agents/issue-triager.md")
    again = p.fails(CREATE, "install_collection_content", path="library/agents/issue-triager.md")
    replaced = p.ok(CREATE, "install_collection_content", path="agents/issue-triager.md", overwrite=True)

    assert installed["installed"] and installed["created"] and installed["element_name"] == "Issue Triager"
    assert "already exists" in again and replaced["created"] is False
    agent = Element.objects.get(owner=alice.user, name="Issue Triager")
    assert agent.metadata["autonomy"]["riskTolerance"] == "conservative"
    assert ElementRevision.objects.filter(element=agent).count() >= 1


def test_installing_is_a_create_operation_the_gatekeeper_confirms(portfolio, alice):
    envelope = portfolio(alice).call(CREATE, "install_collection_content", path="skills/test-plan.md")

    assert envelope["success"] is False and envelope["confirmation"]["operation"] == "install_collection_content"
    assert not Element.objects.filter(owner=alice.user).exists()


def test_charlie_installing_leaves_alices_portfolio_alone(portfolio, alice, charlie):
    portfolio(alice).ok(CREATE, "install_collection_content", path="templates/adr.md")
    revisions = Element.objects.get(owner=alice.user).revisions.count()

    portfolio(charlie).ok(CREATE, "install_collection_content", path="templates/adr.md")

    assert Element.objects.filter(name="Architecture Decision Record").count() == 2
    assert Element.objects.get(owner=alice.user).revisions.count() == revisions
    assert Element.objects.get(owner=charlie.user).owner == charlie.user


@pytest.mark.parametrize("path", ["../secrets.md", "/etc/passwd", "library/personas/../../x.md",
                                  "library/other/x.md", "personas/x.txt", "library/personas/a/b.md"])
def test_paths_outside_the_library_are_refused(portfolio, alice, path):
    assert "path" in portfolio(alice).fails(READ, "get_collection_content", path=path)


def test_unified_search_reads_published_elements_and_the_community_collection(portfolio, alice, bob):
    published = Element.objects.create(owner=bob.user, element_type="persona", name="Code Helper",
                                       description="Bob's published code helper.", published=True)

    results = portfolio(alice).ok(READ, "search", query="code", scope="collection")["results"]

    origins = {(r["element_name"], r["origin"]) for r in results}
    assert ("Code Reviewer", "community") in origins and (published.name, "published") in origins
    assert all(r["source"] == "collection" for r in results)


def test_cache_health_reports_the_source_and_counts(portfolio, alice):
    p = portfolio(alice)
    p.ok(READ, "browse_collection")

    health = p.ok(READ, "get_collection_cache_health")

    assert health["source"] == str(SHIPPED) and health["cached"] and health["stale"] is False
    assert health["ttlSeconds"] == 3600 and health["itemCount"] == CollectionItem.objects.count()
    assert health["countsByType"]["persona"] >= 1 and health["lastError"] is None


def test_an_unreachable_source_answers_from_the_cache_with_a_warning(portfolio, alice, settings, tmp_path):
    settings.ATRIUM_COLLECTION_SOURCE = str(library(tmp_path / "c", {"personas/git-helper.md": PERSONA}))
    p = portfolio(alice)
    p.ok(READ, "browse_collection")
    (tmp_path / "c" / "library" / "personas" / "git-helper.md").unlink()
    (tmp_path / "c" / "library" / "personas").rmdir()
    (tmp_path / "c" / "library").rmdir()
    CollectionCache.objects.update(fetched_at=CollectionCache.objects.get().fetched_at.replace(year=2000))

    envelope = p.call(READ, "search_collection", query="git")

    assert envelope["success"] and envelope["data"]["results"][0]["name"] == "Git Helper"
    assert "answering from the copy cached" in json.dumps(envelope["data"]["warnings"])
    assert "no library/ folder" in CollectionCache.objects.get().last_error


def test_with_no_cache_an_unreachable_source_is_a_clear_error(portfolio, alice, settings, tmp_path):
    settings.ATRIUM_COLLECTION_SOURCE = str(tmp_path / "missing")

    error = portfolio(alice).fails(READ, "browse_collection")

    assert "could not be read" in error and "missing is not a directory" in error


def test_a_file_over_two_megabytes_and_a_yaml_bomb_are_left_out(portfolio, alice, settings, tmp_path):
    levels = zip("abcdefgh", "bcdefghi", strict=True)
    bomb = "---\n" + "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in levels
    ) + "name: Bomb\n---\nbody\n"
    settings.ATRIUM_COLLECTION_SOURCE = str(library(tmp_path, {
        "personas/git-helper.md": PERSONA, "personas/huge.md": PERSONA + "x" * (3 * 1024 * 1024),
        "skills/bomb.md": bomb,
    }))

    listed = portfolio(alice).ok(READ, "search_collection_enhanced", query="*")
    health = portfolio(alice).ok(READ, "get_collection_cache_health")

    assert [i["name"] for i in listed["items"]] == ["Git Helper"]
    skipped = {e["path"]: e["error"] for e in CollectionCache.objects.get().index["skipped"]}
    assert "too large" in skipped["library/personas/huge.md"] and skipped["library/skills/bomb.md"]
    assert health["skipped"] == 2


def test_a_git_repository_is_read_from_its_newest_commit(portfolio, alice, settings, tmp_path):
    from dulwich import porcelain

    work = library(tmp_path / "work", {"personas/git-helper.md": PERSONA,
                                       "skills/bad.md": "no front matter", "notes/readme.md": PERSONA})
    repo = porcelain.init(str(work))
    porcelain.add(repo, [str(p) for p in work.rglob("*") if p.is_file() and ".git" not in p.parts])
    porcelain.commit(repo, message=b"collection", author=b"T <t@example.com>", committer=b"T <t@example.com>")
    bare = tmp_path / "collection.git"
    porcelain.clone(str(work), str(bare), bare=True, errstream=porcelain.NoneStream())
    settings.ATRIUM_COLLECTION_SOURCE = str(bare)
    p = portfolio(alice)

    browsed = p.ok(READ, "browse_collection", section="library", type="personas")
    installed = p.ok(CREATE, "install_collection_content", path="personas/git-helper.md")

    assert [i["name"] for i in browsed["items"]] == ["Git Helper"]
    assert installed["element_name"] == "Git Helper"
    assert Element.objects.get(owner=alice.user).instructions == "You help with git."
    assert [e["path"] for e in CollectionCache.objects.get().index["skipped"]] == ["library/skills/bad.md"]


def test_an_http_index_is_read_with_the_files_beside_it(portfolio, alice, settings, fake_server):
    index = {"index": {"personas": [{"path": "library/personas/git-helper.md"},
                                    {"path": "../../etc/passwd.md"}]}}
    fake_server.routes[("GET", "/c/collection-index.json")] = lambda _: json_reply(index)
    fake_server.routes[("GET", "/c/library/personas/git-helper.md")] = lambda _: Reply(body=PERSONA.encode())
    settings.ATRIUM_COLLECTION_SOURCE = f"{fake_server.url}/c/collection-index.json"

    data = portfolio(alice).ok(READ, "get_collection_content", path="personas/git-helper.md")

    assert data["name"] == "Git Helper" and data["content"] == PERSONA
    assert [r.path for r in fake_server.received] == ["/c/collection-index.json", "/c/library/personas/git-helper.md"]
    assert CollectionCache.objects.get().index["skipped"][0]["path"] == "../../etc/passwd.md"


def test_the_refresh_task_rereads_the_source(settings, tmp_path):
    from elements.tasks import collection_refresh

    settings.ATRIUM_COLLECTION_SOURCE = str(library(tmp_path, {"personas/git-helper.md": PERSONA}))

    assert collection_refresh.delay().get() == {"source": str(tmp_path), "items": 1, "error": ""}
    assert "elements.tasks.collection_refresh" in {
        entry["task"] for entry in django_settings.CELERY_BEAT_SCHEDULE.values()}
