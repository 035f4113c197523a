"""Every MCP-AQL failure answers {success: false, error}, and a bad parameter is named, never an
internal error."""

import json

import pytest

from elements.models import Element, MemoryEntry

pytestmark = pytest.mark.django_db

PERSONA = {"element_name": "reviewer", "description": "Reviews.", "instructions": "You ARE a reviewer."}


def envelope(aql, tool: str, arguments: dict) -> dict:
    result = aql.client.call(tool, arguments)
    body = json.loads(result["content"][0]["text"])
    assert result["isError"] is (not body["success"]), result
    return body


@pytest.mark.parametrize(("arguments", "says"), [
    ({"operation": "list_elements", "element_type": "persona", "params": "x"}, '"params" must be an object'),
    ({"operation": 5}, 'expected OperationInput with "operation"'),
    ({"operations": "x"}, '"operations" must be a list'),
    ({"operation": "list_elements", "element_type": 7}, "Invalid element_type 7"),
    ({"operation": "list_elements", "elementType": ["persona"]}, "Invalid element_type ['persona']"),
])
def test_arguments_of_the_wrong_type_keep_the_envelope(alice, portfolio, arguments, says):
    aql = portfolio(alice)

    body = envelope(aql, "mcp_aql_read", arguments)

    assert body["success"] is False and says in body["error"], body
    assert set(body) == {"success", "error"}


def test_a_batch_of_things_that_are_not_operations_answers_each_in_the_envelope(alice, portfolio):
    aql = portfolio(alice)

    body = envelope(aql, "mcp_aql_read", {"operations": [1, {"operation": "introspect"}]})

    assert body["summary"] == {"total": 2, "succeeded": 1, "failed": 1}
    assert body["results"][0]["result"]["success"] is False


def test_the_schema_still_documents_the_argument_types(alice, portfolio):
    aql = portfolio(alice)
    tools = {t["name"]: t for t in aql.client.post("tools/list").json()["result"]["tools"]}

    properties = tools["mcp_aql_read"]["inputSchema"]["properties"]

    assert properties["params"]["anyOf"][0]["type"] == "object"
    assert properties["operations"]["anyOf"][0]["type"] == "array"
    assert properties["operation"]["anyOf"][0]["type"] == "string"


@pytest.mark.parametrize(("params", "field"), [
    ({"limit": None}, "limit"), ({"offset": None}, "offset"), ({"page": None}, "page"),
    ({"page": 10**30}, "page"), ({"pagination": {"page": 10**30}}, "page"), ({"offset": 10**30}, "offset"),
    ({"pageSize": 1.5}, "pageSize"),
    ({"nameContains": "a" * 1_000_000}, "nameContains"),
    ({"filters": {"nameContains": "a" * 1_000_000}}, "nameContains"),
    ({"descriptionContains": "a" * 1_000_000}, "descriptionContains"), ({"author": {"x": 1}}, "author"),
])
def test_a_bad_listing_parameter_is_named(alice, portfolio, params, field):
    aql = portfolio(alice)
    aql.ok("mcp_aql_create", "create_element", "persona", **PERSONA)

    error = aql.fails("mcp_aql_read", "list_elements", "persona", **params)

    assert f"'{field}'" in error and len(error) < 300, error


@pytest.mark.parametrize("operation", ["search_elements", "search"])
def test_a_huge_search_page_is_named(alice, portfolio, operation):
    aql = portfolio(alice)

    assert "'page'" in aql.fails("mcp_aql_read", operation, query="review", page=10**30)


def test_a_huge_element_name_is_named_and_not_echoed(alice, portfolio):
    aql = portfolio(alice)

    error = aql.fails("mcp_aql_read", "get_element", "persona", element_name="a" * 1_000_000)

    assert "'element_name' is at most 100 characters" in error and len(error) < 200


def test_create_with_metadata_that_is_not_an_object_is_named_and_writes_nothing(alice, portfolio):
    aql = portfolio(alice)
    aql.ok("mcp_aql_execute", "confirm_operation", operation="create_element")

    error = aql.fails("mcp_aql_create", "create_element", "persona", metadata="notobj", **PERSONA)

    assert error == "metadata must be an object."
    assert not Element.objects.exists()


def test_edit_with_metadata_that_is_not_an_object_is_named_and_changes_nothing(alice, portfolio):
    aql = portfolio(alice)
    aql.ok("mcp_aql_create", "create_element", "persona", metadata={"team": "core"}, **PERSONA)
    aql.ok("mcp_aql_execute", "confirm_operation", operation="edit_element")

    error = aql.fails("mcp_aql_update", "edit_element", "persona", element_name="reviewer",
                      input={"metadata": "notobj"})

    assert error == "metadata must be an object."
    assert Element.objects.get(name="reviewer").metadata == {"team": "core"}


def test_an_entry_with_metadata_that_is_not_an_object_is_named(alice, portfolio):
    aql = portfolio(alice)
    aql.ok("mcp_aql_create", "create_element", "memory", element_name="notes", description="Notes.")
    aql.ok("mcp_aql_execute", "confirm_operation", operation="addEntry")

    error = aql.fails("mcp_aql_create", "addEntry", element_name="notes", content="x", metadata="no")

    assert "metadata must be an object" in error
    assert not MemoryEntry.objects.exists()


@pytest.mark.parametrize(("operation", "element_type", "params", "field"), [
    ("list_elements", "persona", {"createdAfter": "2026-13-45T00:00:00"}, "createdAfter"),
    ("search", None, {"query": "*", "filters": {"createdBefore": "2026-02-30T00:00:00"}}, "createdBefore"),
    ("query_logs", None, {"since": "2026-13-45T00:00:00"}, "since"),
])
def test_an_impossible_date_is_named(alice, portfolio, operation, element_type, params, field):
    aql = portfolio(alice)

    error = aql.fails("mcp_aql_read", operation, element_type, **params)

    assert error.startswith(f"{field} must be an ISO 8601 date-time"), error


def test_an_import_with_an_impossible_created_date_is_named_and_writes_nothing(alice, portfolio):
    aql = portfolio(alice)
    aql.ok("mcp_aql_execute", "confirm_operation", operation="import_element")
    package = {"element_type": "persona", "element_name": "reviewer", "description": "Reviews.",
               "instructions": "You ARE a reviewer.", "created": "2026-13-45T00:00:00"}

    error = aql.fails("mcp_aql_create", "import_element", data=package)

    assert error.startswith("created must be an ISO 8601 date-time"), error
    assert not Element.objects.exists()


def test_a_huge_verb_is_named(alice, portfolio):
    aql = portfolio(alice)

    assert "'verb' must be under 1000 characters" in aql.fails("mcp_aql_read", "search_by_verb", verb="a" * 1_000_000)


@pytest.mark.parametrize(("fields", "error"), [
    ({"goal": 5}, "An agent needs content, instructions or goal.template."),
    ({"goal": 5, "content": "Steps."}, "goal must be an object {template, parameters?, successCriteria?}."),
])
def test_an_agent_goal_that_is_not_an_object_is_refused_by_name(alice, portfolio, fields, error):
    aql = portfolio(alice)
    aql.ok("mcp_aql_execute", "confirm_operation", operation="create_element")

    assert aql.fails("mcp_aql_create", "create_element", "agent", element_name="helper", description="Helps.",
                     **fields) == error
    assert not Element.objects.exists()
