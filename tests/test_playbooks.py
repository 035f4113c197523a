"""Playbooks: a plan compiles to a workflow that validates; executing it runs a capability step as the
owner, then hands its AI step to the host; edits to the workflow keep the playbook in step or detach it;
one user's playbooks and executions are invisible to another."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import Client

from core.caller import Caller
from core.errors import InvalidInput, NotFound
from elements.models import MemoryEntry
from elements.services import element_create
from elements.types import ElementType
from integrations.models import Action, Connection, Integration
from integrations.services import catalogue_sync
from runs.models import Run
from runs.views import run_page_url
from workflows import plans
from workflows.models import Playbook, PlaybookTemplate, Trigger, Workflow
from workflows.playbook_selectors import HEALTHY, NOT_READY, playbook_status
from workflows.playbooks import execution_start, playbook_create, playbook_instantiate, playbook_update
from workflows.scoping import Scope
from workflows.selectors import definition_validate
from workflows.services import workflow_update
from workflows.yamltext import yaml_load

PLAN = {
    "input": {"type": "object", "properties": {"note": {"type": "string", "minLength": 1}}, "required": ["note"]},
    "steps": [
        {"id": "remember", "title": "Remember the note", "kind": "capability",
         "capability": "atrium_tools.add_memory_entry", "input": {"memory": "log", "content": "{{ context.note }}"}},
        {"id": "reply", "title": "Reply", "kind": "ai", "prompt": "Say that {{ remember.entryId }} was saved."},
    ],
    "output": {"description": "The reply", "value": "{{ reply.output }}"},
}


@pytest.fixture
def atrium(db):
    catalogue_sync(documents=[])


def trusted(member):
    return Caller.trusted(member.user, via="command")


@pytest.fixture
def logbook(atrium, alice):
    element_create(caller=trusted(alice), element_type=ElementType.MEMORY, name="log", params={"description": "Log"})
    return playbook_create(caller=trusted(alice), name="Logger", goal="Log notes", plan=PLAN)


@pytest.fixture
def client(alice, mcp_client):
    connected = mcp_client(alice)
    connected.initialize()
    return connected


def test_a_plan_compiles_to_a_workflow_that_validates(logbook, alice):
    workflow = logbook.workflow
    assert workflow.workflow_id == f"playbook-{logbook.pk}" and workflow.owner == alice.user
    assert workflow.project is None
    definition_validate(scope=Scope(owner=alice.user, project=None), config=workflow.config,
                        workflow_id=workflow.workflow_id)
    nodes = workflow.config["nodes"]
    assert nodes["remember"]["type"] == "script" and nodes["remember"]["capability"] == "atrium_tools.add_memory_entry"
    assert nodes["reply"]["type"] == "ai_agent"
    assert workflow.config["context"] == PLAN["input"]
    assert logbook.integrations == ["atrium_tools"]
    assert plans.plan_from_definition(workflow.config) == logbook.plan


def test_executing_runs_the_capability_step_then_hands_the_ai_step_to_the_host(logbook, client):
    started = client.call_expecting_success("playbooks_execute", {"playbookId": logbook.pk,
                                                                    "input": {"note": "Ship on Friday"}})
    run = Run.objects.get(pk=started["executionId"])
    assert run.playbook == logbook and run.trigger is None
    assert MemoryEntry.objects.get(memory__name="log").content == "Ship on Friday"

    status = client.call_expecting_success("get_run_status", {"run_id": run.pk, "global": True})
    assert status["status"] == "paused" and status["pendingStep"]["nodeId"] == "reply"
    entry_id = MemoryEntry.objects.get(memory__name="log").entry_id
    assert entry_id in status["pendingStep"]["prompt"]
    done = client.call_expecting_success("advance_run", {"run_id": run.pk, "response": "Saved.",
                                                          "step_id": status["pendingStep"]["stepId"], "global": True})
    assert done["status"] == "completed" and done["output"] == "Saved."

    execution = client.call_expecting_success("executions_get", {"executionId": run.pk})
    assert execution["status"] == "completed" and execution["result"] == "Saved."
    assert [m["role"] for m in execution["messages"]] == ["system", "tool", "user", "assistant", "system"]
    history = client.call_expecting_success("playbooks_history", {"playbookId": logbook.pk})
    assert [e["executionId"] for e in history["executions"]] == [run.pk]


def test_an_input_that_breaks_the_input_card_starts_nothing(logbook, client):
    error = client.call_expecting_error("playbooks_execute", {"playbookId": logbook.pk, "input": {"note": ""}})
    assert error["code"] == "invalid_input" and error["problems"]
    assert not Run.objects.exists()


def test_a_failing_capability_step_fails_the_execution_saying_why(atrium, alice):
    # No memory called "log": the action refuses, and the step's failure ends the execution failed.
    playbook = playbook_create(caller=trusted(alice), name="Logger", plan=PLAN)
    run = execution_start(caller=trusted(alice), playbook=playbook, input={"note": "x"})
    run.refresh_from_db()
    assert run.status == "failed" and run.current_node == "failed"
    step = run.nodes.get(node_id="remember")
    assert step.status == "failed" and "atrium_tools.add_memory_entry" in step.error


def test_a_step_whose_integration_is_not_connected_fails_without_running(atrium, alice):
    Integration.objects.create(id="mail_tools", name="Mail", auth_scheme="api_key")
    Action.objects.create(integration_id="mail_tools", name="send", executor="email.send",
                          input_schema={"type": "object"})
    plan = {"steps": [{"id": "mail", "title": "Mail", "kind": "capability", "capability": "mail_tools.send"}]}
    playbook = playbook_create(caller=trusted(alice), name="Mailer", plan=plan)
    run = execution_start(caller=trusted(alice), playbook=playbook, input={})
    run.refresh_from_db()
    assert run.status == "failed"
    assert "needs mail_tools connected" in run.nodes.get(node_id="mail").error


def test_an_unknown_capability_or_a_bad_plan_is_refused_and_nothing_is_written(atrium, alice):
    bad_step = {"steps": [{"id": "x", "title": "X", "kind": "capability", "capability": "nope.nothing"}]}
    with pytest.raises(NotFound):
        playbook_create(caller=trusted(alice), name="Bad", plan=bad_step)
    with pytest.raises(InvalidInput) as refused:
        playbook_create(caller=trusted(alice), name="Bad", plan={"steps": [{"id": "done", "kind": "ai"}]})
    assert refused.value.code == "invalid_plan"
    assert not Playbook.objects.exists() and not Workflow.objects.exists()


def test_editing_the_workflow_keeps_the_plan_in_step_or_detaches_it(logbook, alice):
    scope = Scope(owner=alice.user, project=None)
    config = {**logbook.workflow.config}
    config["nodes"] = {**config["nodes"], "reply": {**config["nodes"]["reply"], "prompt": "Say done."}}
    workflow_update(caller=trusted(alice), scope=scope, workflow_id=logbook.workflow.workflow_id, source="global",
                    config=config)
    logbook.refresh_from_db()
    assert logbook.plan["steps"][1]["prompt"] == "Say done." and logbook.detached_reason == ""

    config["nodes"] = {**config["nodes"], "check": {"type": "condition", "if": "true", "transitions": {
        "true": "done", "false": "failed"}}}
    config["nodes"]["reply"] = {**config["nodes"]["reply"], "transitions": {"done": "check"}}
    workflow_update(caller=trusted(alice), scope=scope, workflow_id=logbook.workflow.workflow_id, source="global",
                    config=config)
    logbook.refresh_from_db()
    assert "cannot describe" in logbook.detached_reason
    assert logbook.plan["steps"][1]["prompt"] == "Say done."

    # Saving a plan again overwrites the workflow and re-attaches the playbook.
    playbook_update(caller=trusted(alice), playbook_id=logbook.pk, changes={"plan": PLAN})
    logbook.refresh_from_db()
    assert logbook.detached_reason == "" and "check" not in logbook.workflow.config["nodes"]


def test_healthy_needs_an_active_trigger_and_every_integration_connected(atrium, alice):
    mail = Integration.objects.create(id="mail_tools", name="Mail", auth_scheme="api_key")
    Action.objects.create(integration=mail, name="send", executor="email.send", input_schema={"type": "object"})
    plan = {"steps": [{"id": "mail", "title": "Mail", "kind": "capability", "capability": "mail_tools.send"}]}
    playbook = playbook_create(caller=trusted(alice), name="Mailer", plan=plan)
    status = playbook_status(caller=trusted(alice), playbook=playbook)
    assert status["status"] == NOT_READY
    assert any("mail_tools" in r for r in status["reasons"]) and any("no trigger" in r for r in status["reasons"])

    trigger = Trigger.objects.create(playbook=playbook, owner=alice.user, kind="webhook", enabled=False)
    reasons = playbook_status(caller=trusted(alice), playbook=playbook)["reasons"]
    assert any("No trigger is active" in r for r in reasons)
    trigger.enabled = True
    trigger.save()
    Connection.objects.create(user=alice.user, integration=mail, state="connected", sealed_credentials="")
    assert playbook_status(caller=trusted(alice), playbook=playbook) == {"status": HEALTHY, "reasons": []}


def test_another_users_playbooks_and_executions_are_not_found(logbook, alice, bob, mcp_client):
    run = execution_start(caller=trusted(alice), playbook=logbook, input={"note": "mine"})
    other = mcp_client(bob)
    other.initialize()
    for tool, arguments, code in (
        ("playbooks_get", {"playbookId": logbook.pk}, "playbook_not_found"),
        ("playbooks_history", {"playbookId": logbook.pk}, "playbook_not_found"),
        ("playbooks_execute", {"playbookId": logbook.pk, "input": {"note": "x"}}, "playbook_not_found"),
        ("playbooks_trigger_activate", {"playbookId": logbook.pk, "enabled": True}, "playbook_not_found"),
        ("executions_get", {"executionId": run.pk}, "execution_not_found"),
        ("executions_messages", {"sessionId": run.pk}, "execution_not_found"),
    ):
        assert other.call_expecting_error(tool, arguments)["code"] == code, tool
    assert other.call_expecting_success("playbooks_list")["playbooks"] == []
    assert other.call_expecting_success("executions_list")["executions"] == []
    assert other.call_expecting_success("dashboard_overview")["playbooks"] == []
    assert Run.objects.filter(owner=bob.user).count() == 0


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_twenty_concurrent_updates_each_land(atrium, alice):
    playbook = playbook_create(caller=trusted(alice), name="Counter", plan=PLAN)

    def rename(i):
        try:
            playbook_update(caller=trusted(alice), playbook_id=playbook.pk, changes={"goal": f"goal {i}"})
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=20) as pool:
        list(pool.map(rename, range(20)))
    playbook.refresh_from_db()
    # Each update read the row under its lock: none was lost to another's stale copy.
    assert playbook.version == 21
    # And each one wrote the goal through to the workflow, in the same order.
    assert playbook.workflow.revisions.count() == 21
    assert playbook.workflow.config["description"] == playbook.goal


def test_the_run_page_shows_an_execution_as_its_playbooks(logbook, alice, client):
    run = execution_start(caller=trusted(alice), playbook=logbook, input={"note": "hello"})
    browser = Client()
    browser.force_login(alice.user)
    html = browser.get(run_page_url(run)).content.decode()
    assert "Playbook execution" in html and logbook.name in html and logbook.pk in html


def test_the_plan_in_the_docs_is_a_plan_that_compiles_to_a_valid_workflow(alice):
    text = (Path(__file__).resolve().parents[1] / "docs" / "playbooks.md").read_text()
    plan = yaml_load(text.split("```yaml\n", 1)[1].split("```", 1)[0])
    assert plans.plan_problems(plan) == []
    definition = plans.plan_compile(name="Digest", goal="", plan=plan)
    definition_validate(scope=Scope(owner=alice.user, project=None), config=definition, workflow_id="digest")


def test_every_shipped_template_instantiates_with_its_triggers_off(alice):
    call_command("sync_catalogue", verbosity=0)
    call_command("sync_templates", verbosity=0)
    templates = list(PlaybookTemplate.objects.filter(shipped=True))
    assert len(templates) >= 10
    for template in templates:
        playbook = playbook_instantiate(caller=trusted(alice), template_id=template.pk)
        assert playbook.template == template and playbook.workflow is not None, template.pk
        kinds = sorted(t.kind for t in playbook.triggers.all())
        assert kinds == sorted(spec["type"] for spec in template.triggers), template.pk
        assert not playbook.triggers.filter(enabled=True).exists()


def test_each_playbook_shows_its_own_last_execution_however_busy_another_is(atrium, alice, client):
    quiet = playbook_create(caller=trusted(alice), name="Quiet", plan=PLAN)
    busy = playbook_create(caller=trusted(alice), name="Busy", plan=PLAN)
    first = Run.objects.create(owner=alice.user, playbook=quiet, workflow_key="q", workflow_name="Quiet",
                               workflow_source="global", definition={}, status="completed")
    Run.objects.bulk_create(Run(owner=alice.user, playbook=busy, workflow_key="b", workflow_name="Busy",
                                workflow_source="global", definition={}, status="completed") for _ in range(150))
    rows = {p["playbookId"]: p for p in client.call_expecting_success("playbooks_list")["playbooks"]}
    assert rows[quiet.pk]["lastExecution"]["executionId"] == first.pk
    assert rows[busy.pk]["lastExecution"]["playbookId"] == busy.pk
