"""Playbook templates: the shipped ones are sound (their plans compile to valid workflows, their
capability steps name real actions and, with the example input, send each action input it accepts),
sync_templates loads them without touching a curator's own, and templates are searched, listed and
read with the caller's connection state."""

import json
import shutil
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from jsonschema import Draft202012Validator

import safeyaml
from core.caller import Caller
from core.errors import InvalidInput, NotFound
from integrations.models import Action, Connection, Integration
from integrations.vault import vault_connect
from runs.engine import render_data
from tests.conftest import Member
from workflows import selectors, templates
from workflows.models import PlaybookTemplate
from workflows.plans import plan_check, plan_compile
from workflows.scoping import Scope

pytestmark = pytest.mark.django_db

SHIPPED = sorted(templates.SHIPPED_TEMPLATES.glob("*.yaml"))
EXPECTED = {  # the ones the docs' table names, with what starts them
    "github-issues-daily-digest": "schedule", "webhook-to-memory": "webhook", "weekly-report-email": "schedule",
    "pr-review-summary": "schedule", "uptime-check": "schedule", "release-notes-drafter": None,
    "memory-digest-email": "schedule", "docs-question-answerer": "webhook", "run-failure-alert": "event",
    "element-change-notifier": "event", "approval-gated-slack-announcement": None, "incident-triage": "webhook",
}


def load(path: Path) -> dict[str, Any]:
    return safeyaml.load(path.read_text(), schema=safeyaml.WORKFLOW, bounds=templates.YAML_BOUNDS)


def caller_of(member: Member) -> Caller:
    return Caller.trusted(member.user, via="mcp")


@pytest.fixture
def catalogue(db) -> None:
    call_command("sync_catalogue", stdout=StringIO())


@pytest.fixture
def synced(db) -> dict[str, Any]:
    return templates.templates_sync()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of three shipped templates, to change and remove."""
    for name in ("uptime-check", "webhook-to-memory", "incident-triage"):
        shutil.copy(templates.SHIPPED_TEMPLATES / f"{name}.yaml", tmp_path)
    return tmp_path


# --- the shipped templates ------------------------------------------------------------------------

def test_at_least_twelve_ship_in_the_five_categories_each_named_for_its_file():
    assert len(SHIPPED) >= 12
    loaded = {path.stem: load(path) for path in SHIPPED}
    assert set(EXPECTED) <= set(loaded)
    for stem, data in loaded.items():
        assert data["id"] == stem
        assert data["category"] in templates.CATEGORIES, stem
        assert templates.template_problems(data) == {}, stem
        kinds = [t["type"] for t in data.get("triggers", [])]
        if stem in EXPECTED:
            assert kinds == ([EXPECTED[stem]] if EXPECTED[stem] else []), stem
    assert {data["category"] for data in loaded.values()} == set(templates.CATEGORIES)


def test_the_examples_the_docs_promise_have_their_shape():
    uptime = load(templates.SHIPPED_TEMPLATES / "uptime-check.yaml")
    assert [s["kind"] for s in uptime["plan"]["steps"]] == ["capability", "judge", "capability"]
    assert uptime["plan"]["steps"][1]["continueOn"] == ["down"]
    assert uptime["triggers"] == [{"type": "schedule", "preset": "hourly"}]
    release = load(templates.SHIPPED_TEMPLATES / "release-notes-drafter.yaml")
    kinds = [(s["kind"], s.get("capability")) for s in release["plan"]["steps"]]
    assert kinds.index(("approval", None)) < kinds.index(("capability", "github_tools.issues_create"))
    digest = load(templates.SHIPPED_TEMPLATES / "github-issues-daily-digest.yaml")
    assert digest["triggers"] == [{"type": "schedule", "preset": "every weekday at 9"}]
    assert load(templates.SHIPPED_TEMPLATES / "weekly-report-email.yaml")["triggers"] == [
        {"type": "schedule", "preset": "every monday at 8"}]
    assert load(templates.SHIPPED_TEMPLATES / "run-failure-alert.yaml")["triggers"][0]["event"] == "run.failed"
    assert load(templates.SHIPPED_TEMPLATES / "element-change-notifier.yaml")["triggers"][0]["event"] == \
        "element.changed"
    triage = load(templates.SHIPPED_TEMPLATES / "incident-triage.yaml")
    assert triage["plan"]["steps"][0]["kind"] == "judge"
    answerer = load(templates.SHIPPED_TEMPLATES / "docs-question-answerer.yaml")
    assert answerer["plan"]["steps"][-1]["capability"] == "webhook_tools.send_webhook"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_each_plan_compiles_to_a_workflow_that_validates(path, alice):
    data = load(path)
    plan = plan_check(data["plan"])
    definition = plan_compile(name=data["name"], goal=data["description"], plan=plan)
    _, parsed = selectors.definition_parse(definition, with_text=True)
    selectors.definition_validate(scope=Scope(owner=alice.user, project=None), config=parsed, workflow_id=None)


def sample(schema: dict[str, Any]) -> Any:
    """A value of the shape an action's output schema describes: what a later step's templates read."""
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            value = sample(part)
            merged.update(value if isinstance(value, dict) else {})
        return merged
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return sample(schema[key][0])
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "array":
        return [sample(schema.get("items", {}))]
    if kind == "object" or "properties" in schema:
        return {name: sample(sub) for name, sub in schema.get("properties", {}).items()}
    return {"integer": 7, "number": 7.5, "boolean": True, "null": None}.get(kind, "sample text")


def placeholder(step: dict[str, Any], action: Action | None) -> Any:
    if step["kind"] == "ai":
        return {"output": "A model's answer."}
    if step["kind"] == "judge":
        return {"verdict": (step.get("continueOn") or step["verdicts"])[0], "reasoning": "Because."}
    if step["kind"] == "approval":
        return {"choice": "approve"}
    return sample(action.output_schema or {})


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_each_capability_step_names_an_action_it_sends_valid_input(path, catalogue):
    data = load(path)
    assert set(data["integrations"]) <= set(Integration.objects.values_list("pk", flat=True))
    Draft202012Validator(data["plan"].get("input", {})).validate(data["example_input"])
    scope: dict[str, Any] = {"context": data["example_input"]}
    for step in data["plan"]["steps"]:
        action = None
        if step["kind"] == "capability":
            integration_id, name = step["capability"].split(".", 1)
            assert integration_id in data["integrations"]
            action = Action.objects.filter(integration_id=integration_id, name=name).first()
            assert action is not None, step["capability"]
            rendered = render_data(step.get("input", {}), scope)
            problems = [e.message for e in Draft202012Validator(action.input_schema).iter_errors(rendered)]
            assert problems == [], f"{step['id']}: {problems} in {rendered}"
        scope[step["id"]] = placeholder(step, action)
    render_data(data["plan"].get("output", {}).get("value"), scope)


def test_a_step_reading_an_output_no_earlier_step_has_is_a_problem():
    data = load(templates.SHIPPED_TEMPLATES / "run-failure-alert.yaml")
    data["plan"]["steps"][0]["prompt"] = "Explain {{ nowhere.output }}"
    problems = templates.template_problems(data)
    assert "nowhere" in " ".join(problems["plan"])


# --- the shape ------------------------------------------------------------------------------------

def test_template_problems_name_the_field_they_are_about():
    data = load(templates.SHIPPED_TEMPLATES / "uptime-check.yaml")
    data.update(category="fun", integrations=["email_tools"], example_input={"url": 5},
                triggers=[{"type": "schedule"}, {"type": "event", "event": "Run Failed"}, {"type": "cron"}],
                extra=1)
    problems = templates.template_problems(data)
    assert set(problems) == {"", "category", "integrations", "example_input", "triggers"}
    assert problems["integrations"] == ["must list every integration the plan's steps use; missing: http_tools."]
    assert any("'to' is a required property" in p for p in problems["example_input"])
    assert len(problems["triggers"]) == 3
    assert templates.trigger_spec_problems([{"type": "schedule", "cron": "0 9 * * 1-5", "input": {"a": 1}},
                                            {"type": "webhook"}, {"type": "event", "event": "run.failed",
                                                                  "filters": {"workflowId": "x"}}]) == []
    assert templates.trigger_spec_problems([{"type": "webhook", "secret": "x"}]) == [
        "[0]: a webhook trigger has no key secret; allowed: input, type."]


# --- syncing --------------------------------------------------------------------------------------

def test_sync_loads_every_shipped_template_and_a_second_sync_changes_nothing():
    first = templates.templates_sync()
    assert sorted(first["created"]) == [p.stem for p in SHIPPED]
    assert first["refused"] == [] and first["disabled"] == []
    row = PlaybookTemplate.objects.get(pk="uptime-check")
    assert row.shipped and row.enabled and row.category == "operations"
    assert row.integrations == ["http_tools", "email_tools"]
    assert row.example_input["url"] == "https://status.example.com/healthz"
    before = dict(PlaybookTemplate.objects.values_list("pk", "updated_at"))

    second = templates.templates_sync()

    assert second["created"] == second["updated"] == []
    assert sorted(second["unchanged"]) == [p.stem for p in SHIPPED]
    assert dict(PlaybookTemplate.objects.values_list("pk", "updated_at")) == before


def test_a_changed_file_is_rewritten_but_the_curators_enabled_flag_stays(folder):
    templates.templates_sync(directory=folder)
    PlaybookTemplate.objects.filter(pk="uptime-check").update(enabled=False)
    path = folder / "uptime-check.yaml"
    path.write_text(path.read_text().replace("name: Hourly uptime check with an email alert",
                                             "name: Uptime check"))

    report = templates.templates_sync(directory=folder)

    assert report["updated"] == ["uptime-check"]
    row = PlaybookTemplate.objects.get(pk="uptime-check")
    assert row.name == "Uptime check" and row.enabled is False


def test_a_removed_file_disables_its_template_and_never_deletes_it(folder):
    templates.templates_sync(directory=folder)
    (folder / "webhook-to-memory.yaml").unlink()

    report = templates.templates_sync(directory=folder)

    assert report["disabled"] == ["webhook-to-memory"]
    row = PlaybookTemplate.objects.get(pk="webhook-to-memory")
    assert row.enabled is False and row.shipped is True
    assert templates.templates_sync(directory=folder)["disabled"] == []  # already disabled: nothing to say


def test_a_curators_own_template_is_never_touched_even_when_a_file_has_its_id(folder):
    own = PlaybookTemplate.objects.create(id="uptime-check", name="Our uptime check", category="operations",
                                          plan={"steps": []}, shipped=False)
    mine = PlaybookTemplate.objects.create(id="team-standup", name="Standup", category="reporting",
                                           plan={"steps": []}, shipped=False)

    report = templates.templates_sync(directory=folder)

    assert report["refused"] == [{"file": "uptime-check.yaml", "problems": [
        "id: 'uptime-check' is a curator's own template, which a sync never changes."]}]
    assert report["disabled"] == []
    for row in (own, mine):
        fresh = PlaybookTemplate.objects.get(pk=row.pk)
        assert (fresh.name, fresh.enabled, fresh.shipped, fresh.updated_at) == (row.name, True, False,
                                                                               row.updated_at)


def test_a_bad_file_is_reported_and_skipped_and_nothing_of_it_is_written(folder):
    (folder / "broken.yaml").write_text("id: broken\nname: [unclosed\n")
    bad = load(folder / "incident-triage.yaml")
    bad["plan"]["steps"][0]["verdicts"] = ["only-one"]
    (folder / "incident-triage.yaml").write_text(json.dumps(bad))  # JSON is YAML
    named = load(folder / "webhook-to-memory.yaml")
    (folder / "webhook-to-memory.yaml").rename(folder / "webhook-logger.yaml")

    report = templates.templates_sync(directory=folder)

    assert report["created"] == ["uptime-check"]
    refused = {r["file"]: r["problems"] for r in report["refused"]}
    assert set(refused) == {"broken.yaml", "incident-triage.yaml", "webhook-logger.yaml"}
    assert refused["broken.yaml"][0].startswith("is not valid YAML")
    assert refused["incident-triage.yaml"] == [
        "plan: steps[0].verdicts: must be two or more distinct names matching [a-zA-Z0-9_-]+."]
    assert refused["webhook-logger.yaml"] == [
        f"id: must be the file's name without .yaml ('webhook-logger'), not {named['id']!r}."]
    assert list(PlaybookTemplate.objects.values_list("pk", flat=True)) == ["uptime-check"]


def test_the_command_is_quiet_at_verbosity_0_but_always_reports_a_refused_file(folder):
    out, err = StringIO(), StringIO()
    call_command("sync_templates", directory=folder, stdout=out, stderr=err)
    assert out.getvalue().strip() == "3 created, 0 updated, 0 unchanged, 0 disabled, 0 refused."
    assert err.getvalue() == ""

    (folder / "broken.yaml").write_text("id: broken\n")
    out, err = StringIO(), StringIO()
    call_command("sync_templates", directory=folder, verbosity=0, stdout=out, stderr=err)
    assert out.getvalue() == ""
    assert "broken.yaml: name: is required." in err.getvalue()


def test_the_command_loads_the_shipped_templates_by_default():
    call_command("sync_templates", verbosity=0, stdout=StringIO(), stderr=StringIO())
    assert PlaybookTemplate.objects.filter(shipped=True, enabled=True).count() == len(SHIPPED)


# --- reading --------------------------------------------------------------------------------------

def test_search_ranks_by_the_query_words_and_filters_by_category(synced, alice):
    found = templates.template_search(caller=caller_of(alice), query="github issues slack", category=None)
    assert found[0]["templateId"] == "github-issues-daily-digest"
    assert set(found[0]) == {"templateId", "name", "description", "category", "integrations", "stepCount",
                             "triggerTypes", "score"}
    assert found[0]["stepCount"] == 3 and found[0]["triggerTypes"] == ["schedule"]
    assert found[0]["score"] > found[1]["score"] > 0

    uptime = templates.template_search(caller=caller_of(alice), query="UPTIME", category=None)
    assert [t["templateId"] for t in uptime] == ["uptime-check"]
    by_step_title = templates.template_search(caller=caller_of(alice), query="severity", category=None)
    assert by_step_title[0]["templateId"] == "incident-triage"
    in_category = templates.template_search(caller=caller_of(alice), query="slack", category="notifications")
    assert in_category and {t["category"] for t in in_category} == {"notifications"}
    assert templates.template_search(caller=caller_of(alice), query="zebra", category=None) == []


def test_an_empty_query_lists_them_and_the_query_and_limit_are_bounded(synced, alice):
    every = templates.template_search(caller=caller_of(alice), query="  ", category=None, limit=100)
    assert len(every) == len(SHIPPED)
    assert [t["category"] for t in every] == sorted(t["category"] for t in every)
    assert len(templates.template_search(caller=caller_of(alice), query=None, category=None, limit=2)) == 2
    with pytest.raises(InvalidInput, match="at most 200"):
        templates.template_search(caller=caller_of(alice), query="x" * 201, category=None)
    with pytest.raises(InvalidInput, match="limit"):
        templates.template_search(caller=caller_of(alice), query="x", category=None, limit=0)


def test_list_pages_through_the_templates(synced, alice):
    first = templates.template_list(caller=caller_of(alice), category=None, limit=5, offset=0)
    rest = templates.template_list(caller=caller_of(alice), category=None, limit=100, offset=5)
    assert first["total"] == rest["total"] == len(SHIPPED)
    assert (first["limit"], first["offset"], len(first["templates"])) == (5, 0, 5)
    ids = [t["templateId"] for t in first["templates"] + rest["templates"]]
    assert sorted(ids) == [p.stem for p in SHIPPED]
    knowledge = templates.template_list(caller=caller_of(alice), category="knowledge", limit=20, offset=0)
    assert {t["category"] for t in knowledge["templates"]} == {"knowledge"}
    assert knowledge["total"] == len(knowledge["templates"]) == 3
    with pytest.raises(InvalidInput, match="offset"):
        templates.template_list(caller=caller_of(alice), category=None, limit=5, offset=-1)


def test_get_says_which_integrations_the_caller_has_connected(synced, catalogue, alice, bob):
    vault_connect(caller=caller_of(alice), integration_id="github_tools", credentials={"token": "ghp-alice-0001"})

    mine = templates.template_get(caller=caller_of(alice), template_id="issue-auto-triage")
    theirs = templates.template_get(caller=caller_of(bob), template_id="issue-auto-triage")

    assert mine["requiredIntegrations"] == [{"integrationId": "github_tools", "name": "GitHub", "connected": True,
                                             "connectionRequired": True, "available": True}]
    assert mine["ready"] is True
    assert theirs["requiredIntegrations"][0]["connected"] is False and theirs["ready"] is False
    assert mine["templateId"] == "issue-auto-triage" and mine["category"] == "engineering"
    assert mine["plan"]["steps"][0]["capability"] == "github_tools.issues_get"
    assert mine["exampleInput"] == {"owner": "octo-org", "repo": "octo-app", "issueNumber": 1347}
    assert mine["suggestedTriggers"] == [{"type": "webhook"}]
    assert mine["stepCount"] == 5

    digest = templates.template_get(caller=caller_of(alice), template_id="github-issues-daily-digest")
    assert [(r["integrationId"], r["connected"]) for r in digest["requiredIntegrations"]] == [
        ("github_tools", True), ("slack_tools", False)]
    assert digest["ready"] is False
    # An integration that needs no connection counts as connected.
    memory = templates.template_get(caller=caller_of(bob), template_id="webhook-to-memory")
    assert memory["requiredIntegrations"][0]["connectionRequired"] is False and memory["ready"] is True


def test_a_disconnected_connection_or_missing_integration_is_not_ready(synced, catalogue, alice):
    vault_connect(caller=caller_of(alice), integration_id="github_tools", credentials={"token": "ghp-alice-0001"})
    Connection.objects.filter(user=alice.user).update(state=Connection.State.EXPIRED)
    assert templates.template_get(caller=caller_of(alice), template_id="issue-auto-triage")["ready"] is False
    Integration.objects.filter(pk="github_tools").update(enabled=False)
    shown = templates.template_get(caller=caller_of(alice), template_id="issue-auto-triage")
    assert shown["requiredIntegrations"][0]["available"] is False and shown["ready"] is False


def test_an_unknown_or_disabled_template_is_not_found_and_disabled_ones_are_invisible(synced, alice):
    with pytest.raises(NotFound) as unknown:
        templates.template_get(caller=caller_of(alice), template_id="no-such-template")
    assert unknown.value.code == "template_not_found"
    PlaybookTemplate.objects.filter(pk="uptime-check").update(enabled=False)
    with pytest.raises(NotFound) as disabled:
        templates.template_get(caller=caller_of(alice), template_id="uptime-check")
    assert disabled.value.code == "template_not_found"
    assert templates.template_search(caller=caller_of(alice), query="uptime", category=None) == []
    listed = templates.template_list(caller=caller_of(alice), category=None, limit=100, offset=0)
    assert "uptime-check" not in {t["templateId"] for t in listed["templates"]}
    assert listed["total"] == len(SHIPPED) - 1


def test_a_curators_own_enabled_template_is_found_like_a_shipped_one(synced, alice):
    PlaybookTemplate.objects.create(id="team-standup", name="Team standup notes", category="reporting",
                                    description="Collects standup notes.", plan={"steps": [
                                        {"id": "w", "title": "Write", "kind": "ai", "prompt": "Hi"}]})
    found = templates.template_search(caller=caller_of(alice), query="standup", category=None)
    assert [t["templateId"] for t in found] == ["team-standup"]
    assert templates.template_get(caller=caller_of(alice), template_id="team-standup")["ready"] is True


def test_duplicating_a_template_makes_a_disabled_copy_of_the_curators_own(synced, alice):
    original = PlaybookTemplate.objects.get(pk="uptime-check")
    first = templates.template_duplicate(caller=caller_of(alice), template=original)
    second = templates.template_duplicate(caller=caller_of(alice), template=original)
    assert (first.pk, second.pk) == ("uptime-check-copy", "uptime-check-copy-2")
    assert first.shipped is False and first.enabled is False
    assert first.plan == original.plan and first.name == "Hourly uptime check with an email alert (copy)"
    templates.templates_sync()
    assert PlaybookTemplate.objects.get(pk="uptime-check-copy").shipped is False
