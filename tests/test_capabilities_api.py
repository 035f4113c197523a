"""The capability, vault and skill endpoints under /api/: the tools' operations over HTTP, with the
same scopes and shapes."""

import pytest

from integrations import search
from integrations.executors import EXECUTORS, ActionCall, ActionFailed, executor
from integrations.models import Action, Connection, Execution, Integration, Skill
from tests.conftest import Api, make_member


def _upper(call: ActionCall) -> dict:
    if call.input.get("text") == "boom":
        raise ActionFailed("Upstream refused.", code="http_error", status=500)
    return {"upper": call.input["text"].upper()}


if "test.upper" not in EXECUTORS:
    executor("test.upper")(_upper)


@pytest.fixture
def catalogue(db):
    tools = Integration.objects.create(id="text_tools", name="Text", description="Change text.",
                                       connection_required=False)
    keyed = Integration.objects.create(id="keyed_tools", name="Keyed", auth_scheme="api_key")
    Action.objects.create(integration=tools, name="upper", executor="test.upper", description="Upper-case text.",
                          input_schema={"type": "object", "required": ["text"],
                                        "properties": {"text": {"type": "string"}}})
    Action.objects.create(integration=keyed, name="upper", executor="test.upper")
    search.index_refresh(integrations=[tools, keyed])
    return tools


def test_search_details_and_execute(catalogue, alice):
    api = Api(alice)
    found = api.get("/api/capabilities/search/", {"q": "upper case", "mode": "keyword"})
    assert found.status_code == 200 and found.json()["results"][0]["name"] == "text_tools.upper"
    details = api.get("/api/capabilities/details/", {"name": "text_tools.upper", "parts": ["inputSchema"]})
    assert details.status_code == 200 and details.json()["inputSchema"]["required"] == ["text"]
    ran = api.post("/api/capabilities/execute/", {"name": "text_tools.upper", "input": {"text": "hi"}})
    assert (ran.status_code, ran.json()) == (200, {"upper": "HI"})
    failed = api.post("/api/capabilities/execute/", {"name": "text_tools.upper", "input": {"text": "boom"}})
    assert failed.status_code == 502 and failed.json() == {"error": "Upstream refused.", "code": "http_error",
                                                            "status": 500}
    invalid = api.post("/api/capabilities/execute/", {"name": "text_tools.upper", "input": {}})
    assert invalid.status_code == 400 and invalid.json()["code"] == "invalid_input"
    missing = api.post("/api/capabilities/execute/", {"name": "keyed_tools.upper", "input": {"text": "x"}})
    assert missing.status_code == 200 and missing.json()["status"] == "connection_required"
    assert missing.json()["missingIntegrations"][0]["integrationId"] == "keyed_tools"
    unknown = api.get("/api/capabilities/details/", {"name": "nope_tools"})
    assert unknown.status_code == 404 and unknown.json()["code"] == "capability_not_found"


def test_executions_are_listed_for_their_owner_only(catalogue, alice, charlie):
    Api(alice).post("/api/capabilities/execute/", {"name": "text_tools.upper", "input": {"text": "hi"}})
    rows = Api(alice).get("/api/capabilities/executions/").json()
    assert [(r["name"], r["status"], r["inputKeys"]) for r in rows] == [("text_tools.upper", "succeeded", ["text"])]
    one = Api(alice).get(f"/api/capabilities/executions/{rows[0]['id']}/")
    assert one.status_code == 200 and one.json()["durationMs"] is not None
    assert Api(charlie).get("/api/capabilities/executions/").json() == []
    assert Api(charlie).get(f"/api/capabilities/executions/{rows[0]['id']}/").status_code == 404


def test_vault_endpoints(catalogue, alice, charlie):
    api = Api(alice)
    connected = api.post("/api/vault/connect/", {"integrationId": "keyed_tools", "credentials": {"apiKey": "sek-1"}})
    assert connected.status_code == 200 and connected.json()["status"] == "connected"
    status = api.get("/api/vault/", {"integration_id": "keyed_tools"}).json()
    assert status["integrations"][0]["connected"] is True and "sek-1" not in str(status)
    assert Api(charlie).get("/api/vault/", {"integration_id": "keyed_tools"}).json()["integrations"][0][
        "connected"] is False
    listed = api.get("/api/integrations/").json()
    assert {r["integrationId"] for r in listed["integrations"]} >= {"text_tools", "keyed_tools"}
    gone = api.post("/api/vault/disconnect/", {"integrationId": "keyed_tools"})
    assert gone.status_code == 200 and not Connection.objects.exists()


def test_skills_are_written_by_their_owner_with_a_version_check(catalogue, alice, charlie):
    api = Api(alice)
    created = api.post("/api/capabilities/skills/", {
        "name": "shout", "description": "Shout text.", "source_code": "def run(input, atrium):\n    return 1\n",
        "integrations": ["text_tools"], "input_schema": {"type": "object"}})
    assert created.status_code == 201, created.content
    skill_id, etag = created.json()["id"], created["ETag"]
    assert Skill.objects.get(pk=skill_id).owner == alice.user
    assert Api(charlie).get(f"/api/capabilities/skills/{skill_id}/").status_code == 404
    assert Api(charlie).patch(f"/api/capabilities/skills/{skill_id}/", {"description": "mine"}).status_code == 404
    changed = api.http.patch(f"/api/capabilities/skills/{skill_id}/", '{"description": "Shout it."}',
                             content_type="application/json", HTTP_IF_MATCH=etag, **api.extra)
    assert changed.status_code == 200 and changed.json()["description"] == "Shout it."
    stale = api.http.patch(f"/api/capabilities/skills/{skill_id}/", '{"description": "Lost"}',
                           content_type="application/json", HTTP_IF_MATCH=etag, **api.extra)
    assert stale.status_code == 412 and Skill.objects.get(pk=skill_id).description == "Shout it."
    bad = api.post("/api/capabilities/skills/", {"name": "broken", "source_code": "def run(:\n"})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_source"
    blank = api.post("/api/capabilities/skills/", {"name": "broken", "source_code": " \n\t"})
    assert blank.status_code == 400 and blank.json()["code"] == "invalid_source"
    bad_schema = api.post("/api/capabilities/skills/", {"name": "badschema", "source_code": "x = 1\n",
                                                        "input_schema": {"type": "object",
                                                                         "properties": {"a": {"pattern": "(?<=x)"}}}})
    assert bad_schema.status_code == 400 and bad_schema.json()["code"] == "invalid_schema"
    assert not Skill.objects.filter(name__in=["broken", "badschema"]).exists()
    again = api.post("/api/capabilities/skills/", {"name": "shout", "source_code": "x = 1\n"})
    assert again.status_code == 409 and again.json()["code"] == "skill_exists"
    whisper = api.post("/api/capabilities/skills/", {"name": "whisper", "source_code": "x = 1\n"}).json()
    renamed = api.patch(f"/api/capabilities/skills/{whisper['id']}/", {"name": "shout"})
    assert renamed.status_code == 409 and renamed.json()["code"] == "skill_exists"
    assert Skill.objects.filter(name="shout").count() == 1 and Skill.objects.get(pk=whisper["id"]).name == "whisper"
    assert api.delete(f"/api/capabilities/skills/{skill_id}/").status_code == 204
    assert not Skill.objects.filter(pk=skill_id).exists()


@pytest.mark.parametrize("item_id", ["abc", "-1", "1.5", "9" * 19])
@pytest.mark.parametrize(("path", "code"), [("skills", "skill_not_found"), ("executions", "execution_not_found")])
def test_an_id_that_is_not_a_row_id_is_not_found_in_json(catalogue, alice, path, code, item_id):
    answer = Api(alice).get(f"/api/capabilities/{path}/{item_id}/")
    assert (answer.status_code, answer["Content-Type"], answer.json()["code"]) == (404, "application/json", code)


def test_scopes_are_enforced(catalogue):
    searcher = Api(make_member("searcher", scopes=["capabilities:search"]))
    assert searcher.get("/api/capabilities/search/", {"q": "upper"}).status_code == 200
    assert searcher.post("/api/capabilities/execute/", {"name": "text_tools.upper",
                                                        "input": {"text": "x"}}).status_code == 403
    assert searcher.post("/api/capabilities/skills/", {"name": "s1", "source_code": "x=1"}).status_code == 403
    assert searcher.post("/api/vault/connect/", {"integrationId": "keyed_tools"}).status_code == 403
    assert searcher.get("/api/vault/").status_code == 403
    assert not Execution.objects.exists() and not Skill.objects.exists()
