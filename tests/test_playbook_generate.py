"""playbooks_generate: the operator's model drafts the plan when there is one (a bad plan is sent back
once with its problems, a failing backend falls back); without one, the best-matching template or the
best-matching capabilities. Every answer is a saved playbook whose workflow validates."""

import json

import pytest
from django.core.management import call_command

from integrations.services import catalogue_sync
from workflows.models import Playbook
from workflows.scoping import Scope
from workflows.selectors import definition_validate

PROMPT = "Write down each note I send into my log memory"
MODEL_PLAN = {"input": {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
              "steps": [{"id": "keep", "title": "Keep the note", "kind": "capability",
                         "capability": "atrium_tools.add_memory_entry",
                         "input": {"memory": "log", "content": "{{ context.note }}"}}],
              "output": {"value": "{{ keep.entryId }}"}}


@pytest.fixture
def client(db, alice, mcp_client):
    catalogue_sync(documents=[])
    connected = mcp_client(alice)
    connected.initialize()
    return connected


def assert_saved_and_valid(alice, generated):
    playbook = Playbook.objects.get(pk=generated["playbookId"], owner=alice.user)
    definition_validate(scope=Scope(owner=alice.user, project=None), config=playbook.workflow.config,
                        workflow_id=playbook.workflow.workflow_id)
    assert generated["refinePrompt"].startswith(f"Atrium drafted the playbook {playbook.pk}")
    return playbook


def test_the_model_drafts_the_plan_from_the_prompt_and_the_catalogue(client, alice, model_backend):
    model_backend.says("```json\n" + json.dumps(MODEL_PLAN) + "\n```")
    generated = client.call_expecting_success("playbooks_generate", {"prompt": PROMPT})
    assert generated["draft"] == {"source": "model", "templateId": None,
                                  "capabilities": ["atrium_tools.add_memory_entry"]}
    playbook = assert_saved_and_valid(alice, generated)
    assert playbook.plan["steps"][0]["capability"] == "atrium_tools.add_memory_entry" and playbook.goal == PROMPT
    request = model_backend.bodies()[0]
    assert request["model"] == "fake-model"
    assert "atrium_tools.add_memory_entry" in request["messages"][1]["content"]


def test_an_invalid_plan_goes_back_to_the_model_once_with_its_problems(client, alice, model_backend):
    model_backend.says(json.dumps({"steps": [{"id": "done", "title": "x", "kind": "ai", "prompt": "p"}]}))
    model_backend.says(json.dumps(MODEL_PLAN))
    generated = client.call_expecting_success("playbooks_generate", {"prompt": PROMPT})
    assert generated["draft"]["source"] == "model"
    retry = model_backend.bodies()[1]["messages"]
    assert retry[-1]["role"] == "user" and "reserved" in retry[-1]["content"]
    assert_saved_and_valid(alice, generated)


def test_a_failing_backend_falls_back_to_a_draft_of_atriums_own(client, alice, model_backend):
    model_backend.fails(401, body="bad key")
    generated = client.call_expecting_success("playbooks_generate", {"prompt": PROMPT})
    assert generated["draft"]["source"] in ("template", "capabilities")
    assert "HTTP 401" in generated["draft"]["modelError"]
    assert "sk-test-backend-key" not in json.dumps(generated)
    assert_saved_and_valid(alice, generated)


def test_without_a_backend_or_a_template_the_best_matching_capabilities_make_the_draft(client, alice):
    generated = client.call_expecting_success("playbooks_generate", {"prompt": "add an entry to a memory element"})
    assert generated["draft"]["source"] == "capabilities"
    assert "atrium_tools.add_memory_entry" in generated["draft"]["capabilities"]
    playbook = assert_saved_and_valid(alice, generated)
    step = next(s for s in playbook.plan["steps"] if s.get("capability") == "atrium_tools.add_memory_entry")
    assert step["input"] == {"memory": "{{ context.memory }}", "content": "{{ context.content }}"}
    assert {"memory", "content"} <= set(playbook.plan["input"]["required"])


def test_a_short_prompt_is_refused_and_nothing_is_made(client):
    error = client.call_expecting_error("playbooks_generate", {"prompt": "too short"})
    assert error["code"] == "invalid_arguments"
    assert not Playbook.objects.exists()


def test_without_a_backend_the_best_matching_template_makes_the_draft(client, alice):
    call_command("sync_catalogue", verbosity=0)
    call_command("sync_templates", verbosity=0)
    generated = client.call_expecting_success("playbooks_generate", {
        "prompt": "Post a daily digest of the open GitHub issues to our Slack channel"})
    assert generated["draft"]["source"] == "template"
    assert generated["draft"]["templateId"] == "github-issues-daily-digest"
    playbook = assert_saved_and_valid(alice, generated)
    assert playbook.template_id == "github-issues-daily-digest"
    assert [t["type"] for t in generated["triggers"]] == ["schedule"] and not generated["triggers"][0]["enabled"]


def test_a_model_answer_nested_past_any_plan_falls_back_to_atriums_draft(client, alice, model_backend):
    model_backend.says("[" * 100_000 + "]" * 100_000)  # deeper than the JSON parser's stack
    deep: list = []
    for _ in range(80):
        deep = [deep]
    model_backend.says(json.dumps({"steps": deep}))  # parses, but deeper than any plan
    generated = client.call_expecting_success("playbooks_generate", {"prompt": PROMPT})
    assert generated["draft"]["source"] == "capabilities"
    assert "nested more than 64 levels" in generated["draft"]["modelError"]
    assert_saved_and_valid(alice, generated)
