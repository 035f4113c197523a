"""DollhouseMCP's discrete tools (/mcp/discrete) answer what the MCP-AQL tools (/mcp) answer, through the
official SDK client against a live server.

Alice works through the discrete tools and Bob, in step with her, through MCP-AQL; each of their answers
must equal the other's field by field, once what is their own (the username, ids, clocks) is set aside."""

import asyncio
import re
from typing import Any

import pytest

from elements.mcpaql import ROUTES
from elements.models import Element
from tests.conftest import make_member
from tests.live.conftest import Tools, sdk_session

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
STAMP = re.compile(r"_\d{8}-\d{6}_[0-9a-f]{6}")
# Row ids, numbered across users.
IDS = {"id", "backup_revision"}


def own_parts_masked(value: Any, username: str, tool: str) -> Any:
    """The answer with the caller's own values in it masked: their name, the tool they called (a refusal
    names it), times and the stamp of unique ids."""
    if isinstance(value, dict):
        return {key: "<id>" if key in IDS and isinstance(item, int) else own_parts_masked(item, username, tool)
                for key, item in value.items()}
    if isinstance(value, list):
        return [own_parts_masked(item, username, tool) for item in value]
    if isinstance(value, str):
        value = STAMP.sub("_<stamp>", TIME.sub("<time>", value))
        return value.replace(username, "<user>").replace(f"'{tool}'", "'<tool>'")
    return value


class Twins:
    """Alice's discrete session and Bob's MCP-AQL session, called in step."""

    def __init__(self, discrete: Tools, aql: Tools) -> None:
        self.discrete = discrete
        self.aql = aql
        self.compared: list[str] = []

    async def same(self, operation: str, /, **arguments: Any) -> dict[str, Any]:
        """Both answers to one operation, which must agree; Alice's answer."""
        error, answer = await self.discrete(operation, **arguments)
        payload: dict[str, Any] = {"operation": operation, "params": arguments}
        if "element_type" in arguments:
            payload["element_type"] = arguments["element_type"]
        aql_error, aql_answer = await self.aql(ROUTES[operation].endpoint.tool, **payload)
        assert (error, own_parts_masked(answer, "alice", operation)) == \
            (aql_error, own_parts_masked(aql_answer, "bob", ROUTES[operation].endpoint.tool)), operation
        assert error is (not answer["success"])
        self.compared.append(operation)
        return answer

    async def confirmed(self, operation: str, /, **arguments: Any) -> dict[str, Any]:
        """The gatekeeper's question, the confirmation and the retry, each the same on both."""
        asked = await self.same(operation, **arguments)
        assert asked["confirmation"]["operation"] == operation, asked
        assert (await self.same("confirm_operation", operation=operation))["success"]
        done = await self.same(operation, **arguments)
        assert done["success"], done
        return done["data"]


async def walk_in_step(url: str, alice: str, bob: str, reader: str) -> list[str]:
    async with sdk_session(f"{url}/mcp/discrete", alice) as discrete, sdk_session(f"{url}/mcp", bob) as aql, \
            sdk_session(f"{url}/mcp/discrete", reader) as reading, sdk_session(f"{url}/mcp", reader) as reading_aql:
        listed = {t.name for t in (await discrete.list_tools()).tools}
        assert listed == set(ROUTES)
        twins = Twins(Tools(discrete), Tools(aql))
        assert (await twins.same("list_elements", element_type="persona"))["data"]["items"] == []
        created = await twins.confirmed("create_element", element_name="reviewer", element_type="persona",
                                        description="Reviews code", instructions="You review code.", tags=["code"])
        assert created["element_name"] == "reviewer"
        assert (await twins.same("get_element", element_name="reviewer", element_type="persona"))["success"]
        found = await twins.same("search", query="review")
        assert [item["element_name"] for item in found["data"]["results"]] == ["reviewer"]
        assert (await twins.same("list_elements", element_type="personas", pageSize=5))["data"]["items"]
        edited = await twins.confirmed("edit_element", element_name="reviewer", element_type="persona",
                                       input={"description": "Reviews pull requests"})
        assert edited["description"] == "Reviews pull requests"
        assert (await twins.same("introspect", query="operations", name="edit_element"))["success"]
        await twins.confirmed("delete_element", element_name="reviewer", element_type="persona")
        # Refusals: what is gone, a wrong type, an operation outside the token's scopes.
        assert not (await twins.same("get_element", element_name="reviewer", element_type="persona"))["success"]
        assert not (await twins.same("list_elements", element_type="persona", page="two"))["success"]
        readers = Twins(Tools(reading), Tools(reading_aql))
        refused = await readers.same("create_element", element_name="x", element_type="skill", description="d")
        assert "'elements:write'" in refused["error"]
        assert "create_element" not in {t.name for t in (await reading.list_tools()).tools}
        return twins.compared + readers.compared


def test_discrete_tools_answer_as_mcp_aql_does(live_atrium):
    alice, bob = make_member("alice"), make_member("bob")
    reader = make_member("reader", scopes=["elements:read"])

    compared = asyncio.run(walk_in_step(live_atrium.url, alice.token, bob.token, reader.token))

    assert {"list_elements", "create_element", "confirm_operation", "get_element", "search", "edit_element",
            "introspect", "delete_element"} <= set(compared)
    assert not Element.objects.filter(name="reviewer").exists()
    assert not Element.objects.filter(name="x").exists()
