"""The OpenAPI schema says what the server does: the store a workflow or run call needs, and the
shapes /api/me and /api/scopes answer."""

import pytest
from django.test import Client

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
