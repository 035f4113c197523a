"""DollhouseMCP's discrete mode at /mcp/discrete: one tool per MCP-AQL operation, made from the route table."""

import json

import pytest
from django.test import Client
from jsonschema import Draft202012Validator

from accounts.scopes import ALL_SCOPES
from core.tools import registered_tools, tools_of
from elements.discrete import discrete_mcp_server
from elements.mcp import OPERATION_OUTPUT
from elements.mcpaql import ROUTES, Endpoint
from elements.models import Element
from tests.conftest import make_member
from tests.test_oauth import oauth_tokens

pytestmark = pytest.mark.django_db

DISCRETE = "/mcp/discrete"
SCOPES = {Endpoint.CREATE: "elements:write", Endpoint.READ: "elements:read", Endpoint.UPDATE: "elements:write",
          Endpoint.DELETE: "elements:delete", Endpoint.EXECUTE: "elements:execute"}


@pytest.fixture
def discrete(mcp_client):
    def connect(member_or_token):
        client = mcp_client(member_or_token, path=DISCRETE)
        client.initialize()
        return client

    return connect


@pytest.fixture
def listed(alice, discrete):
    response = discrete(alice).post("tools/list")
    assert response.status_code == 200, response.content
    return {tool["name"]: tool for tool in response.json()["result"]["tools"]}


def envelope(result: dict) -> dict:
    body = json.loads(result["content"][0]["text"])
    assert result["isError"] is (not body["success"]), result
    if body["success"]:
        assert result["structuredContent"] == body
    return body


def test_every_discrete_tool_is_registered_on_its_own_server_only():
    registered = set(registered_tools(discrete_mcp_server))

    assert registered == set(tools_of(discrete_mcp_server)) == set(ROUTES)
    assert {spec.scope for spec in tools_of(discrete_mcp_server).values()} == set(SCOPES.values())


def test_it_is_hardened_as_mcp_is(alice, settings):
    http = Client()
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {alice.token}", "HTTP_ACCEPT": "application/json"}
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})

    assert http.post(DISCRETE, ping, content_type="application/json").status_code == 401
    assert http.get(DISCRETE, **bearer).status_code == 405
    assert http.post(DISCRETE, ping, content_type="application/json", HTTP_ORIGIN="https://evil.example",
                     **bearer).status_code == 403
    assert http.post(DISCRETE, "{" * 10_000, content_type="application/json", **bearer).status_code == 400
    assert http.post(DISCRETE, ping, content_type="application/json", **bearer).status_code == 400  # no session
    settings.ATRIUM_MAX_REQUEST_BYTES = 100
    assert http.post(DISCRETE, json.dumps({"x": "y" * 200}), content_type="application/json",
                     **bearer).status_code == 413


def test_it_lists_one_tool_per_operation_with_its_params(listed):
    assert set(listed) == set(ROUTES)
    for name, route in ROUTES.items():
        schema = listed[name]["inputSchema"]
        assert list(schema.get("properties", {})) == [p.name for p in route.params], name
        assert set(schema.get("required", [])) == {p.name for p in route.params if p.required}, name
        assert listed[name]["description"].startswith(route.description), name
        assert route.endpoint.tool in listed[name]["description"], name


def test_every_schema_is_valid_json_schema_and_closed(listed):
    for name, tool in listed.items():
        schema = tool["inputSchema"]
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False, name
        for argument, prop in schema.get("properties", {}).items():
            assert prop["description"], f"{name}.{argument}"
            assert "anyOf" in prop or prop["type"] in {"string", "number", "boolean", "object", "array"}
        assert tool["outputSchema"] == OPERATION_OUTPUT, name


def test_a_param_keeps_its_kind_and_default(listed):
    data = listed["import_element"]["inputSchema"]["properties"]
    assert [branch["type"] for branch in data["data"]["anyOf"]] == ["string", "object"]
    assert data["overwrite"] == {"type": "boolean", "default": False, "title": "Overwrite",
                                 "description": "Replace an element of the same name (default false)"}
    assert listed["list_elements"]["inputSchema"]["properties"]["tags"]["items"] == {"type": "string"}
    assert "default" not in listed["get_element"]["inputSchema"]["properties"]["fields"]


def test_the_hints_are_those_of_the_operations_endpoint_and_a_read_that_writes_is_not_read_only(listed):
    for name, tool in listed.items():
        hints = tool["annotations"]
        endpoint = ROUTES[name].endpoint
        assert tool["title"] == hints["title"], name
        assert {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"} <= hints.keys(), name
        assert hints["readOnlyHint"] is (endpoint is Endpoint.READ and not ROUTES[name].writes), name
        assert hints["destructiveHint"] is (endpoint not in (Endpoint.READ, Endpoint.CREATE)), name
        assert hints["openWorldHint"] is False, name
    assert listed["list_elements"]["title"] == "List elements"
    assert listed["addEntry"]["title"] == "Add entry"
    assert listed["list_elements"]["annotations"]["readOnlyHint"] is True
    for writer in ("activate_element", "dollhouse_config", "permission_prompt", "portfolio_config"):
        assert listed[writer]["annotations"]["readOnlyHint"] is False, writer


def test_initialize_declares_tools_only(alice, mcp_client):
    client = mcp_client(alice, path=DISCRETE)

    result = client.initialize().json()["result"]

    assert set(result["capabilities"]) - {"experimental"} == {"tools"}
    assert "DollhouseMCP" in result["serverInfo"]["name"]
    assert "confirm_operation" in result["instructions"]
    assert client.post("resources/list").json()["error"]["code"] == -32601


def test_it_lists_only_dollhouse_operations_and_main_server_keeps_its_tools(alice, discrete, mcp_client):
    main = mcp_client(alice)
    main.initialize()

    assert "auth_status" not in discrete(alice).tool_names()
    assert {"mcp_aql_read", "auth_status", "permission_prompt"} <= main.tool_names()
    assert not main.tool_names() & (set(ROUTES) - {"permission_prompt"})


def test_a_token_sees_the_operations_of_its_scopes(discrete):
    reader = discrete(make_member("reader", scopes=["elements:read"]))

    names = reader.tool_names()

    assert names == {name for name, route in ROUTES.items() if route.endpoint is Endpoint.READ}
    assert {SCOPES[route.endpoint] for route in ROUTES.values()} <= ALL_SCOPES


def test_a_call_outside_the_scopes_is_refused_in_the_mcp_aql_envelope(discrete):
    reader = discrete(make_member("reader", scopes=["elements:read"]))

    body = envelope(reader.call("create_element", {"element_name": "x", "element_type": "skill",
                                                   "description": "d"}))

    assert set(body) == {"success", "error"}
    assert "'elements:write'" in body["error"]
    assert not Element.objects.exists()


def test_an_oauth_token_missing_the_scope_gets_the_403_challenge(alice):
    from tests.conftest import McpClient

    _, tokens = oauth_tokens(alice.user, scope="elements:read")
    client = McpClient(tokens["access_token"], path=DISCRETE)
    client.initialize()

    response = client.post("tools/call", {"name": "delete_element", "arguments": {"element_name": "x",
                                                                                  "element_type": "skill"}})

    assert response.status_code == 403
    assert 'error="insufficient_scope", scope="elements:delete"' in response["WWW-Authenticate"]
    assert response.json()["error"]["data"] == {"requiredScopes": ["elements:delete"]}
    listed = client.post("tools/call", {"name": "list_elements", "arguments": {"element_type": "skill"}})
    assert envelope(listed.json()["result"])["success"] is True


def test_a_call_answers_exactly_what_mcp_aql_answers(alice, discrete, portfolio):
    aql = portfolio(alice)
    aql.ok("mcp_aql_create", "create_element", "skill", element_name="review", description="Reviews",
           content="Check it")
    client = discrete(alice)

    for name, arguments in [("get_element", {"element_name": "review", "element_type": "skill"}),
                            ("list_elements", {"element_type": "skills", "pageSize": 5}),
                            ("list_elements", {"element_type": "skill", "page": "two"}),
                            ("get_element", {"element_name": "nope", "element_type": "skill"})]:
        expected = aql.call(ROUTES[name].endpoint.tool, name, None, **arguments)
        assert envelope(client.call(name, arguments)) == expected, name


def test_text_arguments_stay_text(alice, discrete):
    client = discrete(alice)
    arguments = {"element_name": "odd", "element_type": "persona", "description": "[1, 2]", "instructions": "null"}

    asked = envelope(client.call("create_element", arguments))
    assert asked["confirmation"] == {"operation": "create_element", "level": "session", "element_type": "persona"}
    assert envelope(client.call("confirm_operation", {"operation": "create_element"}))["success"]
    assert envelope(client.call("create_element", arguments))["success"]

    element = Element.objects.get(name="odd")
    assert (element.description, element.instructions) == ("[1, 2]", "null")


def test_an_unknown_or_missing_argument_is_refused_in_the_envelope(alice, discrete):
    client = discrete(alice)

    unknown = envelope(client.call("list_elements", {"element_type": "skill", "colour": "red"}))
    missing = envelope(client.call("get_element", {"element_type": "skill"}))

    assert set(unknown) == set(missing) == {"success", "error"}
    assert "Unknown argument(s) for list_elements: colour" in unknown["error"]
    assert "element_name" in missing["error"]
