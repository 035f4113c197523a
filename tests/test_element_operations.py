"""query_logs, dollhouse_config, import_persona and unified search, as dollhouse-api.md describes them."""

import json

import pytest

import elements.operations  # noqa: F401  (fills the route table)
from accounts.models import AuditEvent
from accounts.services import mcp_session_open
from core.caller import Caller
from elements.mcpaql import Endpoint, run
from elements.models import Element, UserSettings
from elements.services import confirmation_grant, element_create
from elements.types import ElementType

pytestmark = pytest.mark.django_db

PERSONA_MD = """---
name: Helper
description: Helps out.
---
You ARE a helpful assistant.
"""


def logged_writes(alice) -> None:
    """Two writes with alice's account: one over MCP, one over the REST API."""
    for via in ("mcp", "api"):
        element_create(caller=Caller.trusted(alice.user, via=via), element_type=ElementType.SKILL, name=f"by-{via}",
                       params={"description": "A skill.", "content": "How to."})


# --- query_logs ------------------------------------------------------------------------------

def test_query_logs_filters_by_source(alice, portfolio):
    aql = portfolio(alice)
    logged_writes(alice)

    logs = aql.ok("mcp_aql_read", "query_logs", source="ap")

    assert [e["message"] for e in logs["entries"]] == ["element.create skill 'by-api'"]
    assert logs["total"] == 1 == AuditEvent.objects.filter(actor=alice.user, via="api").count()
    assert {e["source"] for e in logs["entries"]} == {"api"}


@pytest.mark.parametrize(("level", "listed"), [("debug", 2), ("info", 2), ("warn", 0), ("error", 0)])
def test_query_logs_level_is_a_minimum_and_audit_entries_are_info(alice, portfolio, level, listed):
    aql = portfolio(alice)
    logged_writes(alice)

    logs = aql.ok("mcp_aql_read", "query_logs", level=level, message="element.create")

    assert logs["total"] == len(logs["entries"]) == listed
    assert {e["level"] for e in logs["entries"]} <= {"info"}


@pytest.mark.parametrize("category", ["performance", "telemetry"])
def test_query_logs_categories_that_record_nothing_list_nothing(alice, portfolio, category):
    aql = portfolio(alice)
    logged_writes(alice)

    assert aql.ok("mcp_aql_read", "query_logs", category=category) == {"entries": [], "total": 0, "limit": 50,
                                                                       "offset": 0}


@pytest.mark.parametrize(("params", "field"), [({"level": "loud"}, "level"), ({"category": "perf"}, "category"),
                                               ({"source": 7}, "source"), ({"limit": None}, "limit"),
                                               ({"offset": 10**30}, "offset")])
def test_query_logs_refuses_a_bad_filter_by_name(alice, portfolio, params, field):
    aql = portfolio(alice)

    assert field in aql.fails("mcp_aql_read", "query_logs", **params)


# --- dollhouse_config ------------------------------------------------------------------------

CHANGES = [
    ({"action": "set", "setting": "elements.default_author", "value": "Team A"}, {"elements.default_author": "Team A"}),
    ({"action": "import", "data": {"elements.default_author": "Team B"}}, {"elements.default_author": "Team B"}),
    ({"action": "reset"}, {}),
]


@pytest.mark.parametrize(("params", "stored"), CHANGES)
def test_a_settings_change_confirmed_before_the_call_goes_through_once(alice, portfolio, params, stored):
    aql = portfolio(alice)
    UserSettings.objects.create(user=alice.user, values={"elements.default_author": "Before"})

    confirmed = aql.call("mcp_aql_execute", "confirm_operation", operation="dollhouse_config")
    changed = aql.call("mcp_aql_read", "dollhouse_config", **params)
    again = aql.call("mcp_aql_read", "dollhouse_config", **params)

    assert confirmed["success"] and confirmed["data"]["level"] == "single_use", confirmed
    assert changed["success"], changed
    assert UserSettings.objects.get(user=alice.user).values == stored
    assert not again["success"] and again["confirmation"]["level"] == "single_use"
    assert "Changing your settings" in again["error"]


@pytest.mark.parametrize(("params", "stored"), CHANGES)
def test_a_settings_change_confirmed_after_its_refusal_goes_through(alice, portfolio, params, stored):
    aql = portfolio(alice)
    UserSettings.objects.create(user=alice.user, values={"elements.default_author": "Before"})

    refused = aql.call("mcp_aql_read", "dollhouse_config", **params)
    assert not refused["success"]
    assert UserSettings.objects.get(user=alice.user).values == {"elements.default_author": "Before"}
    assert aql.call("mcp_aql_execute", "confirm_operation", operation="dollhouse_config")["success"]
    changed = aql.call("mcp_aql_read", "dollhouse_config", **params)

    assert changed["success"], changed
    assert UserSettings.objects.get(user=alice.user).values == stored


def test_a_settings_change_that_fails_gives_its_confirmation_back(alice, portfolio):
    aql = portfolio(alice)
    aql.ok("mcp_aql_execute", "confirm_operation", operation="dollhouse_config")

    failed = aql.call("mcp_aql_read", "dollhouse_config", action="set", setting="gatekeeper.auto_confirm",
                      value="sometimes")
    changed = aql.call("mcp_aql_read", "dollhouse_config", action="set", setting="elements.default_author",
                       value="Team A")

    assert failed == {"success": False, "error": "gatekeeper.auto_confirm takes a bool."}
    assert changed["success"], changed
    assert UserSettings.objects.get(user=alice.user).values == {"elements.default_author": "Team A"}


def test_reading_settings_needs_no_confirmation_and_keeps_one_given_for_a_change(alice, portfolio):
    aql = portfolio(alice)
    aql.ok("mcp_aql_execute", "confirm_operation", operation="dollhouse_config")

    assert aql.call("mcp_aql_read", "dollhouse_config", action="get")["success"]
    assert aql.call("mcp_aql_read", "dollhouse_config", action="set", setting="elements.default_author",
                    value="Team A")["success"]


# --- import_persona --------------------------------------------------------------------------

def test_import_persona_reads_a_markdown_file_where_the_server_may_read_the_disk(alice, portfolio, settings,
                                                                               tmp_path):
    settings.ATRIUM_SERVER_PATHS = True
    (tmp_path / "helper.md").write_text(PERSONA_MD)
    aql = portfolio(alice)

    result = aql.ok("mcp_aql_create", "import_persona", source=str(tmp_path / "helper.md"))

    assert result["created"] is True
    row = Element.objects.get(owner=alice.user, element_type="persona", name="Helper")
    assert (row.description, row.instructions) == ("Helps out.", "You ARE a helpful assistant.")


def test_import_persona_reads_a_json_file(alice, portfolio, settings, tmp_path):
    settings.ATRIUM_SERVER_PATHS = True
    (tmp_path / "helper.json").write_text(json.dumps({"name": "Helper", "description": "Helps out.",
                                                      "instructions": "You ARE helpful."}))
    aql = portfolio(alice)

    aql.ok("mcp_aql_create", "import_persona", source=str(tmp_path / "helper.json"))

    assert Element.objects.get(owner=alice.user, name="Helper").instructions == "You ARE helpful."


def test_a_shared_server_refuses_a_path_clearly_and_reads_nothing(alice, portfolio, settings, tmp_path):
    settings.ATRIUM_SERVER_PATHS = False
    (tmp_path / "helper.md").write_text(PERSONA_MD)
    aql = portfolio(alice)
    aql.ok("mcp_aql_execute", "confirm_operation", operation="import_persona")

    error = aql.fails("mcp_aql_create", "import_persona", source=str(tmp_path / "helper.md"))

    assert "this is a shared server" in error and "Pass the persona as JSON text" in error
    assert not Element.objects.exists()


def test_a_stdio_process_reads_the_path_on_the_users_own_disk_whatever_the_setting(alice, settings, tmp_path):
    settings.ATRIUM_SERVER_PATHS = False
    (tmp_path / "helper.md").write_text(PERSONA_MD)
    session = mcp_session_open(caller=Caller.trusted(alice.user, via="mcp"), transport="stdio")
    caller = Caller.trusted(alice.user, via="mcp", session=session)
    confirmation_grant(caller=caller, operation="import_persona", element_type="", level="session")

    answer = run(Endpoint.CREATE, {"operation": "import_persona", "params": {"source": str(tmp_path / "helper.md")}},
                 caller)

    assert answer["success"], answer
    assert Element.objects.get(owner=alice.user, name="Helper").instructions == "You ARE a helpful assistant."


@pytest.mark.parametrize(("source", "message"), [("helper.md", "not an absolute path"),
                                                 ("/nowhere/helper.md", "No persona file at /nowhere/helper.md")])
def test_a_path_that_cannot_be_read_is_refused_by_name(alice, portfolio, settings, source, message):
    settings.ATRIUM_SERVER_PATHS = True
    aql = portfolio(alice)
    aql.ok("mcp_aql_execute", "confirm_operation", operation="import_persona")

    assert message in aql.fails("mcp_aql_create", "import_persona", source=source)
    assert not Element.objects.exists()


# --- unified search --------------------------------------------------------------------------

@pytest.mark.parametrize("scope", ["github", ["local", "github"]])
def test_search_with_the_github_scope_says_that_source_is_not_configured(alice, portfolio, scope):
    aql = portfolio(alice)

    envelope = aql.call("mcp_aql_read", "search", query="review", scope=scope)

    assert envelope == {"success": False, "error": "The GitHub portfolio source is not configured on this server "
                                                   "yet, so scope github cannot be searched. Search with scope "
                                                   "local, collection or all."}


def test_search_all_says_it_left_github_out(alice, portfolio):
    aql = portfolio(alice)

    data = aql.ok("mcp_aql_read", "search", query="review", scope="all")

    assert data["scopes"] == ["local", "collection"]
    assert any("GitHub portfolio source is not configured" in w for w in data["warnings"])
