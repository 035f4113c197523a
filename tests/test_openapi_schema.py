"""The OpenAPI schema says what the server does: the store a workflow or run call needs, the
shapes /api/me and /api/scopes answer, what tokens and elements take, and no more than REST."""

import runpy
from pathlib import Path

import pytest
from django.test import Client

from accounts.scopes import ALL_SCOPES
from elements.fields import TYPE_FIELDS
from elements.selectors import CURSOR_PATTERN
from tests.conftest import Api

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        response = Client().get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()


def resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


@pytest.mark.parametrize(("method", "path"), [
    ("get", "/api/workflows/"), ("get", "/api/workflows/{workflow_id}/"), ("delete", "/api/workflows/{workflow_id}/"),
    ("get", "/api/workflows/{workflow_id}/references/"), ("get", "/api/runs/"), ("get", "/api/runs/{run_id}/"),
    ("get", "/api/runs/{run_id}/history/"),
])
def test_a_query_names_exactly_one_of_cwd_or_global(schema, method, path):
    parameters = {p["name"]: p for p in schema["paths"][path][method]["parameters"]}

    scope = parameters["scope"]

    assert "cwd" not in parameters and "global" not in parameters
    assert (scope["in"], scope["required"], scope["style"], scope["explode"]) == ("query", True, "form", True)
    assert [option["required"] for option in scope["schema"]["oneOf"]] == [["cwd"], ["global"]]


@pytest.mark.parametrize(("path", "component"), [
    ("/api/workflows/", "WorkflowCreateInput"), ("/api/workflows/validate/", "WorkflowSubject"),
    ("/api/runs/", "RunStartInput"), ("/api/runs/{run_id}/cancel/", "WorkflowScope"),
    ("/api/runs/{run_id}/advance/", "RunAdvanceInput"),
])
def test_a_body_names_exactly_one_of_cwd_or_global(schema, path, component):
    body = schema["paths"][path]["post"]["requestBody"]

    assert body["required"] is True
    assert list(body["content"]) == ["application/json"]
    found = resolve(schema, body["content"]["application/json"]["schema"])
    assert schema["components"]["schemas"][component] is found
    scope = found["oneOf"] if "oneOf" in found else found["allOf"][0]["oneOf"]
    assert [option["required"] for option in scope] == [["cwd"], ["global"]]


def test_scopes_and_me_have_their_own_shapes(schema):
    scopes = schema["paths"]["/api/scopes"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    me = schema["paths"]["/api/me"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]

    assert set(resolve(schema, scopes["items"])["properties"]) == {"name", "description"}
    assert {"authenticated", "user", "token", "scopes", "mcp_url"} <= set(resolve(schema, me)["properties"])


def test_every_workflow_and_run_operation_documents_its_auth_errors(schema):
    for path, operations in schema["paths"].items():
        if not path.startswith(("/api/workflows/", "/api/runs/")):
            continue
        for method, operation in operations.items():
            assert {"401", "403"} <= operation["responses"].keys(), (method, path)


def test_the_mcp_endpoint_is_not_a_rest_operation(schema):
    assert not [path for path in schema["paths"] if not path.startswith("/api/")]


@pytest.mark.parametrize(("method", "path", "statuses"), [
    ("get", "/api/tokens", {"200", "401"}), ("post", "/api/tokens", {"201", "400", "401", "403"}),
    ("get", "/api/tokens/{token_id}", {"200", "401", "404"}),
    ("delete", "/api/tokens/{token_id}", {"204", "401", "404"}),
])
def test_token_operations_document_every_answer(schema, method, path, statuses):
    operation = schema["paths"][path][method]

    assert set(operation["responses"]) == statuses
    for status in statuses - {"200", "201", "204"}:
        answer = operation["responses"][status]["content"]["application/json"]["schema"]
        assert set(resolve(schema, answer)["required"]) == {"error", "code"}


def test_a_token_is_made_from_json_naming_known_scopes(schema, alice):
    body = schema["paths"]["/api/tokens"]["post"]["requestBody"]
    (token_id,) = schema["paths"]["/api/tokens/{token_id}"]["get"]["parameters"]

    assert list(body["content"]) == ["application/json"]
    scopes = resolve(schema, body["content"]["application/json"]["schema"])["properties"]["scopes"]
    assert set(resolve(schema, scopes["items"])["enum"]) == ALL_SCOPES
    assert token_id["schema"] == {"type": "string", "pattern": "^[0-9]{1,18}$"}


@pytest.mark.parametrize(("component", "required"), [("ElementCreateInput", ["element_name", "description"]),
                                                     ("PatchedElementEditInput", None)])
def test_an_element_body_takes_only_its_fields_and_names_every_types_own(schema, component, required):
    body = schema["components"]["schemas"][component]

    assert body["additionalProperties"] is False
    assert sorted(body.get("required", [])) == sorted(required or [])
    assert body.get("minProperties") == (None if required else 1)
    for fields in TYPE_FIELDS.values():
        assert all(field in body["description"] for field in fields)


def test_element_text_rules_are_the_validators(schema, alice):
    body = schema["components"]["schemas"]["ElementCreateInput"]["properties"]
    assert body["category"]["pattern"] == "^([A-Za-z][A-Za-z0-9_-]{0,20})?$"
    assert body["triggers"]["items"]["pattern"] == "^[A-Za-z0-9_@.-]+$"
    assert body["gatekeeper"]["additionalProperties"] is False
    created = Api(alice).post("/api/elements/personas/", {
        "element_name": "Rules", "description": "d", "instructions": "You help.", "category": "a" + "b" * 20,
        "version": "2.0.0-beta.1", "triggers": ["a@b.c"], "gatekeeper": {"deny": ["delete_*"]}})
    refused = Api(alice).post("/api/elements/personas/", {
        "element_name": "Rules too", "description": "d", "instructions": "You help.", "category": "a" + "b" * 21})
    assert created.status_code == 201, created.content
    assert refused.json()["code"] == "invalid_category"


def test_a_spending_cap_is_a_number(schema):
    cap = schema["components"]["schemas"]["RunStartInput"]["properties"]["spending_cap_usd"]

    assert (cap["type"], cap["minimum"], cap["maximum"], cap["nullable"]) == ("number", 0, 999_999, True)


def _worst_case_bytes(schema: dict, parameter: dict) -> int:
    """The most bytes one query or path parameter the schema allows takes in a request line: every
    character outside the BMP, percent-encoded in 12 bytes."""
    node = resolve(schema, parameter["schema"])
    name = len(parameter["name"]) + 2 if parameter["in"] == "query" else 0  # name=, and & or ?
    if node.get("type") == "array":
        return node["maxItems"] * _worst_case_bytes(schema, {**parameter, "schema": node["items"]})
    if "enum" in node:
        return name + max(len(str(value)) for value in node["enum"])
    if node.get("type") == "integer":
        return name + max(len(str(node["minimum"])), len(str(node["maximum"])))
    if node.get("format") == "date-time":
        return name + 3 * len("2000-01-01T00:00:00.000000+23:59")
    if node.get("pattern") == CURSOR_PATTERN:
        return name + node["maxLength"]  # characters a URL holds as they are
    return name + 12 * node["maxLength"]


@pytest.mark.parametrize("path", ["/api/elements/{element_type}/", "/api/elements/search/"])
def test_an_element_listing_the_schema_allows_fits_in_a_request_line(schema, path):
    limit = runpy.run_path(str(Path(__file__).parents[1] / "config" / "gunicorn.conf.py"))["limit_request_line"]
    parameters = schema["paths"][path]["get"]["parameters"]

    line = len(f"GET {path}? HTTP/1.1") + sum(_worst_case_bytes(schema, p) for p in parameters)

    assert line <= limit
