"""Elements through the REST API: /api/elements/..., scoped to the caller and guarded by token scopes."""

import json
from urllib.parse import quote

import pytest
from django.test import Client

from accounts.services import token_create
from core.caller import Caller
from elements.models import Element, ElementRevision, MemoryEntry
from elements.validation import safe_yaml_load
from tests.conftest import Api, Member, make_member

pytestmark = pytest.mark.django_db

PERSONA = {"element_name": "Code Reviewer v1.2", "description": "Reviews code for bugs.",
           "instructions": "You ARE a meticulous code reviewer. ALWAYS explain why."}
PERSONA_URL = f"/api/elements/persona/{quote(PERSONA['element_name'])}/"
TEMPLATE = {"element_name": "greeting", "description": "Says hello.",
            "content": "Hello {{name}}, welcome to {{place}}!",
            "variables": [{"name": "name", "type": "string", "required": True}]}


def persona(api: Api, name: str, **fields) -> dict:
    response = api.post("/api/elements/personas/", {**PERSONA, "element_name": name, **fields})
    assert response.status_code == 201, response.content
    return response.json()


def memory(api: Api, name: str = "project notes") -> None:
    response = api.post("/api/elements/memory/", {"element_name": name, "description": "Notes."})
    assert response.status_code == 201, response.content


def make_member_with(member: Member, scopes: list[str]) -> str:
    """Another token for the same user, carrying only `scopes`."""
    _, raw = token_create(caller=Caller.trusted(member.user, via="command"), user=member.user, label="limited",
                          scopes=scopes)
    return raw


# --- create and get ------------------------------------------------------------------------

def test_it_creates_a_persona_and_gets_it_back_by_a_name_with_spaces_and_dots(alice):
    api = Api(alice)

    response = api.post("/api/elements/persona/", {**PERSONA, "tags": ["review"]})
    got = api.get(PERSONA_URL)

    assert response.status_code == 201
    assert got.status_code == 200
    assert response.json() == got.json()
    data = got.json()
    assert {k: data[k] for k in ("element_name", "element_type", "description", "instructions", "tags", "author",
                                 "version", "format_version")} == {
        "element_name": "Code Reviewer v1.2", "element_type": "persona", "description": "Reviews code for bugs.",
        "instructions": PERSONA["instructions"], "tags": ["review"], "author": "alice", "version": "1.0.0",
        "format_version": "v2"}
    assert data["metadata"]["unique_id"].startswith("persona_code-reviewer-v1-2_")
    assert data["created"].endswith("+00:00")
    row = Element.objects.get(owner=alice.user, name="Code Reviewer v1.2")
    assert ElementRevision.objects.filter(element=row, action="create").count() == 1


def test_plural_and_singular_types_name_the_same_collection(alice):
    api = Api(alice)
    persona(api, "Plural Test")

    assert api.get("/api/elements/personas/Plural%20Test/").json()["element_name"] == "Plural Test"
    assert api.get("/api/elements/persona/Plural%20Test/").json()["element_name"] == "Plural Test"


def test_type_fields_may_be_sent_top_level(alice):
    api = Api(alice)

    response = api.post("/api/elements/templates/", TEMPLATE)

    assert response.status_code == 201, response.content
    variables = response.json()["metadata"]["variables"]
    assert variables[0] == {"name": "name", "type": "string", "required": True}
    assert {v["name"] for v in variables} == {"name", "place"}


def test_a_memory_answers_with_its_entries(alice):
    api = Api(alice)
    memory(api)
    api.post("/api/elements/memory/project%20notes/entries/", {"content": "We chose SQLite."})

    data = api.get("/api/elements/memories/project%20notes/").json()

    assert [e["content"] for e in data["entries"]] == ["We chose SQLite."]
    assert data["metadata"]["entryCount"] == 1


def test_a_duplicate_name_is_a_conflict(alice):
    api = Api(alice)
    persona(api, PERSONA["element_name"])

    response = api.post("/api/elements/persona/", PERSONA)

    assert response.status_code == 409
    assert response.json()["code"] == "element_exists"
    assert Element.objects.count() == 1


@pytest.mark.parametrize(("body", "code"), [
    ({**PERSONA, "tags": "not-a-list"}, "invalid_input"),
    ({"element_name": "no description", "instructions": "You ARE terse."}, "invalid_input"),
    ({**PERSONA, "instructions": ""}, "instructions_required"),
    ({**PERSONA, "element_name": "bad/name!"}, "invalid_name"),
    ({**PERSONA, "colour": "blue"}, "unknown_field"),
    ({**PERSONA, "variables": []}, "unknown_field"),  # a template's field, not a persona's
])
def test_bad_input_is_refused_and_nothing_is_written(alice, body, code):
    response = Api(alice).post("/api/elements/persona/", body)

    assert response.status_code == 400
    assert response.json()["code"] == code
    assert not Element.objects.exists()
    assert not ElementRevision.objects.exists()


def test_an_unknown_type_is_not_found(alice):
    response = Api(alice).get("/api/elements/widgets/")

    assert response.status_code == 404
    assert response.json()["code"] == "unknown_element_type"


def test_credentials_are_required(db):
    response = Api().get("/api/elements/personas/")

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_a_signed_in_browser_session_has_every_scope(alice):
    client = Client()
    client.force_login(alice.user)

    created = client.post("/api/elements/persona/", json.dumps(PERSONA), content_type="application/json")
    deleted = client.delete(PERSONA_URL)

    assert created.status_code == 201
    assert deleted.status_code == 204


# --- another user's elements ---------------------------------------------------------------

def test_another_users_element_is_not_found_for_any_method(alice, charlie):
    owner = Api(alice)
    persona(owner, PERSONA["element_name"])
    memory(owner)
    owner.post("/api/elements/templates/", TEMPLATE)
    other = Api(charlie)

    answers = [
        other.get(PERSONA_URL),
        other.patch(PERSONA_URL, {"description": "Mine now."}),
        other.delete(PERSONA_URL),
        other.get(PERSONA_URL + "export/"),
        other.get("/api/elements/memory/project%20notes/entries/"),
        other.post("/api/elements/memory/project%20notes/entries/", {"content": "sneaky"}),
        other.delete("/api/elements/memory/project%20notes/entries/"),
        other.post("/api/elements/template/greeting/render/", {"variables": {"name": "x"}}),
    ]

    assert [r.status_code for r in answers] == [404] * len(answers)
    assert {r.json()["code"] for r in answers} == {"element_not_found"}
    row = Element.objects.get(owner=alice.user, name=PERSONA["element_name"])
    assert row.description == PERSONA["description"]
    assert not MemoryEntry.objects.exists()


def test_lists_and_searches_show_only_the_callers_elements(alice, charlie):
    persona(Api(alice), "Alice Reviewer")
    persona(Api(charlie), "Charlie Reviewer")

    listed = Api(charlie).get("/api/elements/personas/").json()
    found = Api(charlie).get("/api/elements/search/", {"q": "reviewer"}).json()

    assert [i["element_name"] for i in listed["items"]] == ["Charlie Reviewer"]
    assert [i["element_name"] for i in found["items"]] == ["Charlie Reviewer"]


# --- list ----------------------------------------------------------------------------------

def test_list_paginates_with_page_and_page_size(alice):
    api = Api(alice)
    for name in ("Alpha", "Bravo", "Charlie"):
        persona(api, name)

    first = api.get("/api/elements/personas/", {"pageSize": 2}).json()
    second = api.get("/api/elements/personas/", {"pageSize": 2, "page": 2}).json()

    cursor = first["pagination"].pop("nextCursor")
    assert [i["element_name"] for i in first["items"]] == ["Alpha", "Bravo"]
    assert first["pagination"] == {"page": 1, "pageSize": 2, "totalItems": 3, "totalPages": 2,
                                   "hasNextPage": True, "hasPrevPage": False}
    assert api.get("/api/elements/personas/", {"pageSize": 2, "cursor": cursor}).json() == second
    assert [i["element_name"] for i in second["items"]] == ["Charlie"]
    assert second["pagination"]["hasPrevPage"] is True and second["pagination"]["hasNextPage"] is False
    assert set(first["items"][0]) == {"element_name", "description", "type", "version", "tags", "created",
                                      "author"}


def test_list_paginates_with_limit_and_offset(alice):
    api = Api(alice)
    for name in ("Alpha", "Bravo", "Charlie"):
        persona(api, name)

    data = api.get("/api/elements/personas/", {"limit": 2, "offset": 2}).json()

    assert [i["element_name"] for i in data["items"]] == ["Charlie"]
    assert data["pagination"]["page"] == 2


@pytest.mark.parametrize(("params", "code"), [
    ({"page": 1, "offset": 0}, "invalid_pagination"),
    ({"limit": 2, "offset": 1}, "invalid_pagination"),
    ({"pageSize": 101}, "invalid_input"),
    ({"page": 0}, "invalid_input"),
    ({"sortBy": "colour"}, "invalid_input"),
    ({"createdAfter": "yesterday"}, "invalid_input"),
    ({"nameContains": "x" * 61}, "invalid_input"),
    ({"tags": ["a", "b", "c", "d"]}, "invalid_input"),
    ({"tagsAny": ["x" * 51]}, "invalid_input"),
])
def test_bad_list_parameters_are_refused(alice, params, code):
    response = Api(alice).get("/api/elements/personas/", params)

    assert response.status_code == 400
    assert response.json()["code"] == code


def test_list_filters_and_sorts(alice):
    api = Api(alice)
    persona(api, "Alpha", tags=["review", "python"], category="coding")
    persona(api, "Bravo", tags=["review"])
    persona(api, "Charlie", tags=["python"])

    def names(query: str) -> list[str]:
        response = api.get(f"/api/elements/personas/?{query}")
        assert response.status_code == 200, response.content
        return [i["element_name"] for i in response.json()["items"]]

    assert names("tags=review&tags=python") == ["Alpha"]
    assert names("tagsAny=review&tagsAny=python&sortOrder=desc") == ["Charlie", "Bravo", "Alpha"]
    assert names("nameContains=RAV") == ["Bravo"]
    assert names("category=coding") == ["Alpha"]
    assert names("author=alice&sortBy=created&sortOrder=desc") == ["Charlie", "Bravo", "Alpha"]
    assert names("createdAfter=2999-01-01T00:00:00Z") == []
    assert names("createdBefore=2999-01-01T00:00:00Z") == ["Alpha", "Bravo", "Charlie"]
    applied = api.get("/api/elements/personas/?tags=review").json()["filters"]["applied"]
    assert applied == {"tags": ["review"], "count": 2}


def test_list_aggregates_counts(alice):
    api = Api(alice)
    persona(api, "Alpha", tags=["review", "python"])
    persona(api, "Bravo", tags=["review"])

    counted = api.get("/api/elements/personas/", {"aggregate": "count"}).json()
    grouped = api.get("/api/elements/personas/", {"aggregate": "count", "group_by": "tags"}).json()

    assert counted == {"count": 2, "element_type": "persona"}
    assert grouped["groups"] == {"python": 1, "review": 2}


def test_group_by_alone_counts_per_value(alice):
    api = Api(alice)
    persona(api, "Alpha", tags=["review", "python"])

    response = api.get("/api/elements/personas/", {"group_by": "tags"})

    assert response.status_code == 200
    assert response.json() == {"count": 1, "element_type": "persona", "groups": {"python": 1, "review": 1}}


# --- edit and delete -----------------------------------------------------------------------

def test_edit_deep_merges_and_keeps_a_revision(alice):
    api = Api(alice)
    persona(api, PERSONA["element_name"], metadata={"team": {"name": "core", "size": 3}}, tags=["a"])

    response = api.patch(PERSONA_URL, {"description": "Reviews carefully.", "tags": ["b"],
                                       "metadata": {"team": {"size": 4}}})

    assert response.status_code == 200, response.content
    data = api.get(PERSONA_URL).json()
    assert data["description"] == "Reviews carefully."
    assert data["tags"] == ["b"]
    assert data["metadata"]["team"] == {"name": "core", "size": 4}
    assert data["instructions"] == PERSONA["instructions"]
    assert response.json() == data
    assert ElementRevision.objects.filter(name=PERSONA["element_name"], action="update").count() == 1


def test_an_edit_with_the_etag_of_what_was_read_goes_through_and_answers_the_new_etag(alice):
    api = Api(alice)
    persona(api, PERSONA["element_name"])
    etag = api.get(PERSONA_URL)["ETag"]

    response = api.http.patch(PERSONA_URL, json.dumps({"tags": ["b"]}), content_type="application/json",
                              HTTP_IF_MATCH=etag, **api.extra)

    assert response.status_code == 200, response.content
    assert response["ETag"] not in ("", etag)
    assert api.get(PERSONA_URL)["ETag"] == response["ETag"]
    assert Element.objects.get(name=PERSONA["element_name"]).tags == ["b"]


def test_an_edit_with_a_stale_if_match_answers_412_and_changes_nothing(alice):
    api = Api(alice)
    persona(api, PERSONA["element_name"])
    stale = api.get(PERSONA_URL)["ETag"]
    assert api.patch(PERSONA_URL, {"tags": ["first"]}).status_code == 200

    response = api.http.patch(PERSONA_URL, json.dumps({"tags": ["second"]}), content_type="application/json",
                              HTTP_IF_MATCH=stale, **api.extra)

    assert response.status_code == 412
    body = response.json()
    assert body["code"] == "version_conflict"
    assert "changed since you read it" in body["error"]
    assert Element.objects.get(name=PERSONA["element_name"]).tags == ["first"]
    assert ElementRevision.objects.filter(name=PERSONA["element_name"], action="update").count() == 1


@pytest.mark.parametrize(("body", "code"), [
    ({}, "invalid_input"),
    ({"element_name": "Renamed"}, "rename_unsupported"),
    ({"tags": "nope"}, "invalid_input"),
    ({"instructions": ""}, "instructions_required"),
    ({"colour": "blue"}, "unknown_field"),
])
def test_a_bad_edit_changes_nothing(alice, body, code):
    api = Api(alice)
    before = persona(api, PERSONA["element_name"])

    response = api.patch(PERSONA_URL, body)

    assert response.status_code == 400
    assert response.json()["code"] == code
    assert api.get(PERSONA_URL).json() == before
    assert not ElementRevision.objects.filter(action="update").exists()


def test_memory_content_is_append_only(alice):
    api = Api(alice)
    memory(api)

    response = api.patch("/api/elements/memory/project%20notes/", {"content": "rewrite"})

    assert response.status_code == 400
    assert response.json()["code"] == "memory_append_only"


def test_delete_keeps_a_backup_revision(alice):
    api = Api(alice)
    persona(api, PERSONA["element_name"])

    response = api.delete(PERSONA_URL)

    assert response.status_code == 204
    assert api.get(PERSONA_URL).status_code == 404
    backup = ElementRevision.objects.get(action="delete")
    assert backup.name == PERSONA["element_name"] and backup.snapshot["instructions"] == PERSONA["instructions"]


def test_deleting_a_missing_element_is_not_found(alice):
    response = Api(alice).delete("/api/elements/persona/ghost/")

    assert response.status_code == 404
    assert not ElementRevision.objects.exists()


# --- search --------------------------------------------------------------------------------

def test_search_reports_where_it_matched(alice):
    api = Api(alice)
    persona(api, "Security Auditor", description="Finds security holes.")
    persona(api, "Poet", description="Writes verse.")
    memory(api)
    api.post("/api/elements/memory/project%20notes/entries/", {"content": "security review on Friday"})

    everything = api.get("/api/elements/search/", {"q": "security"}).json()
    personas = api.get("/api/elements/search/", {"q": "security", "type": "personas"}).json()

    assert {(i["element_name"], tuple(i["matchedIn"])) for i in everything["items"]} == {
        ("Security Auditor", ("name", "description")), ("project notes", ("entries",))}
    assert everything["pagination"]["totalItems"] == 2
    assert [i["element_name"] for i in personas["items"]] == ["Security Auditor"]
    assert personas["items"][0]["type"] == "persona"


@pytest.mark.parametrize(("params", "code"), [
    ({}, "invalid_input"),
    ({"q": "   "}, "invalid_input"),
    ({"q": "x" * 201}, "invalid_input"),
    ({"q": "x", "type": "widgets"}, "unknown_element_type"),
])
def test_bad_searches_are_refused(alice, params, code):
    response = Api(alice).get("/api/elements/search/", params)

    assert response.status_code == 400
    assert response.json()["code"] == code


# --- memory entries ------------------------------------------------------------------------

def test_entries_are_added_listed_and_cleared(alice):
    api = Api(alice)
    memory(api)
    url = "/api/elements/memory/project%20notes/entries/"

    added = api.post(url, {"content": "First.", "tags": ["decision"], "metadata": {"ticket": 7},
                           "privacyLevel": "public"})
    api.post(url, {"content": "Second."})
    listed = api.get(url).json()
    cleared = api.delete(url)

    assert added.status_code == 201
    assert {k: added.json()[k] for k in ("content", "tags", "metadata", "privacyLevel")} == {
        "content": "First.", "tags": ["decision"], "metadata": {"ticket": 7}, "privacyLevel": "public"}
    assert added.json()["id"].startswith("mem_")
    assert listed["count"] == 2
    assert [e["content"] for e in listed["entries"]] == ["First.", "Second."]
    assert cleared.status_code == 200
    assert cleared.json() == {"cleared": 2, "element_name": "project notes"}
    assert not MemoryEntry.objects.exists()
    assert ElementRevision.objects.filter(action="clear").count() == 1


@pytest.mark.parametrize(("body", "code"), [
    ({}, "invalid_input"),
    ({"content": "   "}, "content_required"),
    ({"content": "x", "privacyLevel": "secret"}, "invalid_input"),
    ({"content": "x", "metadata": {"nested": {"a": 1}}}, "invalid_metadata"),
])
def test_a_bad_entry_is_refused_and_nothing_is_written(alice, body, code):
    api = Api(alice)
    memory(api)

    response = api.post("/api/elements/memory/project%20notes/entries/", body)

    assert response.status_code == 400
    assert response.json()["code"] == code
    assert not MemoryEntry.objects.exists()


def test_entries_need_a_memory(alice):
    api = Api(alice)
    persona(api, "not a memory")

    response = api.post("/api/elements/memory/not%20a%20memory/entries/", {"content": "x"})

    assert response.status_code == 404


# --- templates -----------------------------------------------------------------------------

def test_a_template_renders_with_variables(alice):
    api = Api(alice)
    api.post("/api/elements/template/", TEMPLATE)

    response = api.post("/api/elements/template/greeting/render/", {"variables": {"name": "Ada", "place": "Atrium"}})

    assert response.status_code == 200, response.content
    assert response.json() == {"element_name": "greeting", "content": "Hello Ada, welcome to Atrium!",
                               "warnings": []}


def test_a_section_template_renders_all_sections(alice):
    api = Api(alice)
    api.post("/api/elements/template/", {"element_name": "card", "description": "A card.",
                                         "content": "<template><p>{{title}}</p></template><style>p{}</style>"})

    data = api.post("/api/elements/template/card/render/", {"variables": {"title": "Hi"},
                                                            "all_sections": True}).json()

    assert data["sections"] == {"template": "<p>Hi</p>", "style": "p{}", "script": ""}


@pytest.mark.parametrize("body", [{"variables": ["not", "an", "object"]}, {"section": "header"}])
def test_bad_render_input_is_refused(alice, body):
    api = Api(alice)
    api.post("/api/elements/template/", TEMPLATE)

    response = api.post("/api/elements/template/greeting/render/", body)

    assert response.status_code == 400


def test_rendering_a_missing_template_is_not_found(alice):
    response = Api(alice).post("/api/elements/template/nothing/render/", {})

    assert response.status_code == 404


# --- export and import ---------------------------------------------------------------------

def test_export_and_import_round_trip(alice):
    api = Api(alice)
    persona(api, PERSONA["element_name"], tags=["review"])
    package = api.get(PERSONA_URL + "export/").json()
    api.delete(PERSONA_URL)

    response = api.post("/api/elements/import/", {"data": package})

    assert package["exportVersion"] == "1.0" and package["element_name"] == PERSONA["element_name"]
    assert response.status_code == 201, response.content
    assert response.json()["created"] is True
    assert response.json()["element"]["tags"] == ["review"]
    assert response.json()["element"]["metadata"]["unique_id"] == package["unique_id"]


def test_yaml_export_is_text_that_imports(alice, bob):
    persona(Api(alice), PERSONA["element_name"])

    response = Api(alice).get(PERSONA_URL + "export/", {"format": "yaml"})
    imported = Api(bob).post("/api/elements/import/", {"data": response.content.decode()})

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/yaml")
    assert safe_yaml_load(response.content.decode())["element_name"] == PERSONA["element_name"]
    assert imported.status_code == 201
    assert Element.objects.filter(owner=bob.user, name=PERSONA["element_name"]).exists()


def test_export_refuses_an_unknown_format(alice):
    persona(Api(alice), PERSONA["element_name"])

    response = Api(alice).get(PERSONA_URL + "export/", {"format": "xml"})

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"


def test_a_memory_exports_and_imports_its_entries(alice, bob):
    api = Api(alice)
    memory(api)
    api.post("/api/elements/memory/project%20notes/entries/", {"content": "Keep this."})
    package = api.get("/api/elements/memories/project%20notes/export/").json()

    Api(bob).post("/api/elements/import/", {"data": package})

    assert [e["content"] for e in Api(bob).get("/api/elements/memory/project%20notes/entries/").json()[
        "entries"]] == ["Keep this."]


def test_import_over_an_existing_element_needs_overwrite(alice):
    api = Api(alice)
    persona(api, PERSONA["element_name"])
    package = api.get(PERSONA_URL + "export/").json()
    package["description"] = "Imported."

    refused = api.post("/api/elements/import/", {"data": package})
    unchanged = api.get(PERSONA_URL).json()["description"]
    replaced = api.post("/api/elements/import/", {"data": package, "overwrite": True})

    assert refused.status_code == 409
    assert refused.json()["code"] == "element_exists"
    assert unchanged == PERSONA["description"]
    assert replaced.status_code == 201
    assert replaced.json()["created"] is False
    assert api.get(PERSONA_URL).json()["description"] == "Imported."


@pytest.mark.parametrize(("body", "code"), [
    ({}, "invalid_input"),
    ({"data": ""}, "invalid_package"),
    ({"data": {"element_name": "x"}}, "invalid_package"),
    ({"data": {"element_type": "widget", "element_name": "x"}}, "unknown_element_type"),
    ({"data": {"element_type": "persona", "element_name": "xy", "description": "d"}}, "instructions_required"),
])
def test_a_bad_import_is_refused_and_nothing_is_written(alice, body, code):
    response = Api(alice).post("/api/elements/import/", body)

    assert response.status_code == 400
    assert response.json()["code"] == code
    assert not Element.objects.exists()


# --- scopes --------------------------------------------------------------------------------

def _refusal(response, scope: str) -> None:
    assert response.status_code == 403, response.content
    assert response.json()["code"] == "insufficient_scope"
    assert f"'{scope}'" in response.json()["error"]
    assert f'scope="{scope}"' in response["WWW-Authenticate"]


def test_a_read_only_token_reads_but_cannot_write_or_delete(alice):
    owner = Api(alice)
    persona(owner, PERSONA["element_name"])
    memory(owner)
    reader = Api(token=make_member_with(alice, ["elements:read"]))

    assert reader.get("/api/elements/personas/").status_code == 200
    assert reader.get(PERSONA_URL).status_code == 200
    assert reader.get("/api/elements/search/", {"q": "code"}).status_code == 200
    assert reader.get(PERSONA_URL + "export/").status_code == 200
    _refusal(reader.post("/api/elements/persona/", {**PERSONA, "element_name": "Another"}), "elements:write")
    _refusal(reader.patch(PERSONA_URL, {"description": "x"}), "elements:write")
    _refusal(reader.post("/api/elements/import/", {"data": {}}), "elements:write")
    _refusal(reader.post("/api/elements/memory/project%20notes/entries/", {"content": "x"}), "elements:write")
    _refusal(reader.delete(PERSONA_URL), "elements:delete")
    _refusal(reader.delete("/api/elements/memory/project%20notes/entries/"), "elements:delete")
    assert Element.objects.count() == 2
    assert Element.objects.get(name=PERSONA["element_name"]).description == PERSONA["description"]
    assert not MemoryEntry.objects.exists()


def test_a_write_token_cannot_delete_or_read(db):
    writer = make_member("writer", scopes=["elements:write"])
    api = Api(writer)

    created = api.post("/api/elements/persona/", PERSONA)

    assert created.status_code == 201
    _refusal(api.delete(PERSONA_URL), "elements:delete")
    _refusal(api.get(PERSONA_URL), "elements:read")
    _refusal(api.get("/api/elements/personas/"), "elements:read")
    _refusal(api.post("/api/elements/template/greeting/render/", {}), "elements:read")
    assert Element.objects.filter(name=PERSONA["element_name"]).exists()


def test_a_token_without_element_scopes_gets_nothing(db):
    api = Api(make_member("docs-only", scopes=["docs:read"]))

    _refusal(api.get("/api/elements/search/", {"q": "x"}), "elements:read")
    _refusal(api.get("/api/elements/memory/x/entries/"), "elements:read")


# --- schema --------------------------------------------------------------------------------

def test_the_openapi_schema_lists_the_element_paths(db, client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    paths = schema["paths"]
    assert {"/api/elements/{element_type}/", "/api/elements/{element_type}/{name}/",
            "/api/elements/{element_type}/{name}/export/", "/api/elements/search/", "/api/elements/import/",
            "/api/elements/memory/{name}/entries/", "/api/elements/template/{name}/render/"} <= paths.keys()
    assert set(paths["/api/elements/{element_type}/{name}/"]) >= {"get", "patch", "delete"}
    assert set(paths["/api/elements/memory/{name}/entries/"]) >= {"get", "post", "delete"}
    list_params = {p["name"] for p in paths["/api/elements/{element_type}/"]["get"]["parameters"]}
    assert {"page", "pageSize", "limit", "offset", "sortBy", "tags", "tagsAny", "aggregate"} <= list_params
