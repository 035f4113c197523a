"""Every tool argument and REST input is checked in one place before any service sees it: a NUL
character (which PostgreSQL cannot store), a lone surrogate (which neither database can encode) or
text past its stated maxLength gets a clear invalid-argument error naming the field, in each
product's own error shape, and nothing is stored. JSON nested thousands deep and bodies past the
size limit get JSON errors, never an HTML page."""

import json
from typing import Any

import pytest

from elements.models import Element
from runs.models import Run
from tests.conftest import Api, McpClient
from tests.test_workflow_tools import Roscoe
from workflows.models import Workflow

pytestmark = pytest.mark.django_db

FLOW = "name: Flow\nstart: done\nnodes:\n  done: {type: end}\n"
NUL = "a\x00b"
SURROGATE = "a\ud800b"
NUL_PROBLEM = "contains a NUL character (\\u0000), which text may not hold."
SURROGATE_PROBLEM = "contains a lone surrogate (\\ud800) at character 1, which is not text."


def deep_json(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(("text", "problem"), [(NUL, NUL_PROBLEM), (SURROGATE, SURROGATE_PROBLEM)])
def test_a_roscoe_writer_tool_refuses_it_as_is_error_with_error_and_code(alice, text, problem):
    error = Roscoe(alice).err("create_workflow", id="flow", config=text + FLOW, **{"global": True})

    assert error == {"error": f"Invalid arguments for create_workflow: config {problem}", "code": "invalid_arguments"}
    assert not Workflow.objects.exists()


@pytest.mark.parametrize(("text", "problem"), [(NUL, NUL_PROBLEM), (SURROGATE, SURROGATE_PROBLEM)])
def test_an_mcp_aql_tool_refuses_it_with_success_false_naming_the_nested_field(alice, portfolio, text, problem):
    aql = portfolio(alice)

    error = aql.fails("mcp_aql_create", "create_element", "persona", element_name="helper", description=text,
                      instructions="You help.")

    assert error == f"Invalid arguments for mcp_aql_create: params.description {problem}"
    assert not Element.objects.exists()


def test_a_mapping_key_is_checked_too(alice, portfolio):
    error = portfolio(alice).fails("mcp_aql_create", "create_element", "persona", element_name="helper",
                                   description="Helps.", instructions="You help.", metadata={NUL: 1})

    assert error == f"Invalid arguments for mcp_aql_create: params.metadata key 'a\\x00b' {NUL_PROBLEM}"
    assert not Element.objects.exists()


@pytest.mark.parametrize(("text", "problem"), [(NUL, NUL_PROBLEM), (SURROGATE, SURROGATE_PROBLEM)])
def test_a_run_tool_refuses_it_in_the_run_tools_shape(alice, text, problem):
    roscoe = Roscoe(alice)
    roscoe.ok("create_workflow", id="flow", config=FLOW, **{"global": True})

    is_error, error = roscoe.call("start_workflow", workflow_id="flow", context={"topic": text}, **{"global": True})

    assert is_error is False  # run tools answer user errors in-band, without isError
    assert error == {"error": f"Invalid arguments for start_workflow: context.topic {problem}",
                     "code": "invalid_arguments"}
    assert not Run.objects.exists()


def test_a_docs_tool_refuses_it(alice, kb):
    client = McpClient(alice.token)
    client.initialize()

    error = client.call_expecting_error("search_docs", {"query": SURROGATE})

    assert error == {"error": f"Invalid arguments for search_docs: query {SURROGATE_PROBLEM}",
                     "code": "invalid_arguments"}


def test_every_text_argument_states_its_max_length(alice):
    client = McpClient(alice.token)
    client.initialize()
    tools = client.post("tools/list").json()["result"]["tools"]

    unbounded = [
        f"{tool['name']}.{name}"
        for tool in tools for name, schema in tool["inputSchema"].get("properties", {}).items()
        for branch in (schema, *schema.get("anyOf", ()))
        if branch.get("type") == "string" and "enum" not in branch and "maxLength" not in branch
    ]
    create = next(tool for tool in tools if tool["name"] == "create_workflow")["inputSchema"]["properties"]
    assert unbounded == []
    assert create["cwd"]["anyOf"][0]["maxLength"] == 4096
    assert create["config"]["anyOf"][1]["maxLength"] == 5_000_000


def test_text_past_its_max_length_is_refused_naming_it(alice):
    error = Roscoe(alice).err("create_workflow", id="flow", config=FLOW, cwd="/" + "x" * 4096)

    assert error == {"error": "Invalid arguments for create_workflow: cwd is 4,097 characters long; the limit is "
                              "4,096.", "code": "invalid_arguments"}
    assert not Workflow.objects.exists()


def test_a_rest_body_with_a_nul_is_refused_naming_the_field(alice):
    response = Api(alice).post("/api/workflows/", {"id": "flow", "global": True, "config": {"name": NUL}})

    assert response.status_code == 400
    assert response.json() == {"error": "Invalid input.", "code": "invalid_input",
                               "fields": {"config.name": [f"config.name {NUL_PROBLEM}"]}}
    assert not Workflow.objects.exists()


def test_a_rest_body_with_a_lone_surrogate_is_refused(alice):
    response = Api(alice).post("/api/workflows/", {"id": SURROGATE, "global": True, "config": FLOW})

    assert response.status_code == 400
    assert response.json()["fields"] == {"id": [f"id {SURROGATE_PROBLEM}"]}
    assert not Workflow.objects.exists()


def test_a_rest_query_parameter_with_a_nul_is_refused(alice):
    response = Api(alice).get("/api/workflows/", {"global": "true", "project": NUL})

    assert response.status_code == 400
    assert response.json()["fields"] == {"project": [f"project {NUL_PROBLEM}"]}


def test_rest_json_nested_thousands_deep_is_a_json_parse_error(alice):
    response = Api(alice).http.post("/api/workflows/validate/", deep_json(5_000), content_type="application/json",
                                    **Api(alice).extra)

    assert response.status_code == 400
    assert response.json() == {"error": "JSON nested more than 64 levels deep.", "code": "parse_error"}


def raw_mcp(client: McpClient, body: str | bytes):
    return client.http.post("/mcp", data=body, content_type="application/json", **client.headers())


@pytest.mark.parametrize("body", [
    deep_json(5_000),
    '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": ' + deep_json(100) + "}}",
    "{not json",
])
def test_mcp_answers_a_json_rpc_parse_error_for_json_it_will_not_walk(alice, body):
    client = McpClient(alice.token)
    client.initialize()

    response = raw_mcp(client, body)

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == -32700
    assert response.json()["error"]["message"].startswith("Parse error: ")


def test_mcp_refuses_an_argument_sent_as_json_text_nested_too_deeply(alice):
    roscoe = Roscoe(alice)

    is_error, error = roscoe.call("start_workflow", workflow_id="flow", context=deep_json(5_000), **{"global": True})

    assert is_error is False
    assert error == {"error": "Invalid arguments for start_workflow: JSON nested more than 64 levels deep.",
                     "code": "invalid_arguments"}


def test_mcp_refuses_a_body_past_the_size_limit(alice, settings):
    client = McpClient(alice.token)
    client.initialize()
    settings.ATRIUM_MAX_REQUEST_BYTES = settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                            "params": {"name": "validate_workflow", "arguments": {"config": "x" * 20_000}}}

    text = json.dumps(body)

    response = raw_mcp(client, text)

    assert response.status_code == 413
    assert response.json()["error"] == {"code": -32600, "message": f"Request body too large: {len(text):,} bytes; "
                                                                   "the limit is 10,000."}


def test_an_argument_nested_past_the_bound_in_a_message_within_it_is_refused_by_the_tool_naming_it(alice):
    roscoe = Roscoe(alice)
    context: dict = {}
    inner = context
    for _ in range(66):  # the arguments' own depth passes 64; the message stays within its bound
        inner["a"] = {}
        inner = inner["a"]

    is_error, error = roscoe.call("start_workflow", workflow_id="flow", context=context, **{"global": True})

    assert is_error is False
    assert error == {"error": "Invalid arguments for start_workflow: JSON nested more than 64 levels deep.",
                     "code": "invalid_arguments"}
    assert not Run.objects.exists()
