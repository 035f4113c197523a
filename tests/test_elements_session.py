"""Activation per MCP session, ensembles, and the discovery operations."""

import pytest

from elements.models import Activation
from elements.types import ElementType

pytestmark = pytest.mark.django_db


def skill(aql, name, **extra):
    fields = {"description": f"{name} skill", "content": f"How to {name}."} | extra
    aql.ok("mcp_aql_create", "create_element", "skill", element_name=name, **fields)


def test_activation_belongs_to_the_session(alice, portfolio):
    first, second = portfolio(alice), portfolio(alice)
    skill(first, "debugging")

    first.ok("mcp_aql_read", "activate_element", "skill", element_name="debugging")

    assert first.ok("mcp_aql_read", "get_active_elements")["active"] == {"skills": [
        {"element_name": "debugging", "description": "debugging skill", "instructions": "",
         "content": "How to debugging."}]}
    assert second.ok("mcp_aql_read", "get_active_elements") == {"active": {}, "count": 0}
    assert first.ok("mcp_aql_read", "list_elements", "skill", status="active")["pagination"]["totalItems"] == 1
    assert second.ok("mcp_aql_read", "list_elements", "skill", status="active")["pagination"]["totalItems"] == 0


def test_deactivation_removes_it(alice, portfolio):
    aql = portfolio(alice)
    skill(aql, "debugging")
    aql.ok("mcp_aql_read", "activate_element", "skill", element_name="debugging")

    result = aql.ok("mcp_aql_read", "deactivate_element", "skill", element_name="debugging")

    assert result["was_active"] is True
    assert not Activation.objects.exists()
    assert "not found" in aql.fails("mcp_aql_read", "activate_element", "skill", element_name="nope")


def test_an_ensemble_activates_members_in_dependency_order(alice, portfolio):
    aql = portfolio(alice)
    for name in ("lint", "test", "deploy"):
        skill(aql, name)
    aql.ok("mcp_aql_create", "create_element", "ensemble", element_name="pipeline", description="CI",
           elements=[{"element_name": "deploy", "element_type": "skill", "dependencies": ["test"]},
                     {"element_name": "test", "element_type": "skill", "dependencies": ["lint"]},
                     {"element_name": "lint", "element_type": "skill"},
                     {"element_name": "later", "element_type": "skill", "activation": "on-demand"}])

    result = aql.ok("mcp_aql_read", "activate_element", "ensemble", element_name="pipeline")

    assert [m["element_name"] for m in result["members"]] == ["lint", "test", "deploy"]
    assert Activation.objects.count() == 4
    aql.ok("mcp_aql_read", "deactivate_element", "ensemble", element_name="pipeline")
    assert not Activation.objects.exists()


def test_an_ensemble_with_a_dependency_cycle_is_refused(alice, portfolio):
    aql = portfolio(alice)
    skill(aql, "a")
    skill(aql, "b")
    aql.ok("mcp_aql_create", "create_element", "ensemble", element_name="loop", description="Loop",
           activationStrategy="sequential",
           elements=[{"element_name": "a", "element_type": "skill", "dependencies": ["b"]},
                     {"element_name": "b", "element_type": "skill", "dependencies": ["a"]}])

    error = aql.fails("mcp_aql_read", "activate_element", "ensemble", element_name="loop")

    assert "dependency cycle" in error
    assert not Activation.objects.exists()


def test_an_ensemble_by_priority_and_nested(alice, portfolio):
    aql = portfolio(alice)
    for name in ("low", "high", "inner-skill"):
        skill(aql, name)
    aql.ok("mcp_aql_create", "create_element", "ensemble", element_name="inner", description="Inner",
           elements=[{"element_name": "inner-skill", "element_type": "skill"}])
    aql.ok("mcp_aql_create", "create_element", "ensemble", element_name="outer", description="Outer",
           activationStrategy="priority",
           elements=[{"element_name": "low", "element_type": "skill", "priority": 10},
                     {"element_name": "high", "element_type": "skill", "priority": 90},
                     {"element_name": "inner", "element_type": "ensemble", "priority": 50}])

    members = aql.ok("mcp_aql_read", "activate_element", "ensemble", element_name="outer")["members"]

    assert [m["element_name"] for m in members] == ["high", "inner", "inner-skill", "low"]


def test_an_ensemble_needs_members(alice, portfolio):
    aql = portfolio(alice)
    aql.ok("mcp_aql_execute", "confirm_operation", operation="create_element")

    error = aql.fails("mcp_aql_create", "create_element", "ensemble", element_name="empty", description="x")

    assert "metadata.elements" in error


def test_validate_and_upgrade(alice, portfolio):
    from core.caller import Caller
    from elements.models import Element
    from elements.services import element_import

    element_import(caller=Caller.trusted(alice.user, via="command"), package={
        "element_type": "skill", "element_name": "legacy", "description": "Old", "content": "Do the thing.",
        "format_version": "v1"})
    aql = portfolio(alice)

    checked = aql.ok("mcp_aql_read", "validate_element", "skill", element_name="legacy")
    preview = aql.ok("mcp_aql_update", "upgrade_element", "skill", element_name="legacy", dry_run=True)
    upgraded = aql.ok("mcp_aql_update", "upgrade_element", "skill", element_name="legacy")

    assert checked["valid"] is True and "v1" in checked["warnings"][0]
    assert preview["after"] == {"format_version": "v2", "instructions": "Do the thing.", "content": ""}
    assert Element.objects.get().format_version == "v2" and upgraded["upgraded"] is True
    assert Element.objects.get().instructions == "Do the thing."


def test_find_similar_search_by_verb_and_relationships(alice, portfolio):
    aql = portfolio(alice)
    skill(aql, "python-debugging", description="Debug python programs and tracebacks",
          content="Read the traceback, reproduce, bisect, fix python bugs.", triggers=["debug"])
    skill(aql, "python-tracing", description="Debug python programs with tracing",
          content="Read the traceback, reproduce, trace, fix python bugs.")
    skill(aql, "baking", description="Bake bread", content="Flour water salt yeast.")
    aql.ok("mcp_aql_create", "create_element", "ensemble", element_name="py", description="Python",
           elements=[{"element_name": "python-debugging", "element_type": "skill"}])

    similar = aql.ok("mcp_aql_read", "find_similar_elements", "skill", element_name="python-debugging",
                     threshold=0.1)
    verbs = aql.ok("mcp_aql_read", "search_by_verb", verb="debugging")
    links = aql.ok("mcp_aql_read", "get_element_relationships", element_name="python-debugging")
    stats = aql.ok("mcp_aql_read", "get_relationship_stats")

    assert similar["similar"][0]["element_name"] == "python-tracing"
    assert "baking" not in [s["element_name"] for s in similar["similar"]]
    assert verbs["results"][0]["element_name"] == "python-debugging"
    assert {"element_name": "py", "element_type": "ensemble"} in links["relationships"]["contained_by"]
    assert stats["elements"] == 4


def test_convert_skill_format_through_mcp(alice, portfolio):
    aql = portfolio(alice)

    converted = aql.ok("mcp_aql_read", "convert_skill_format", direction="agent_to_dollhouse",
                       agent_skill={"name": "pdf-tools", "description": "Work with PDFs.", "body": "Use pypdf."})
    back = aql.ok("mcp_aql_read", "convert_skill_format", direction="dollhouse_to_agent",
                  dollhouse=converted["dollhouse"], roundtrip_state=converted["roundtrip_state"])

    assert converted["dollhouse"]["instructions"] == "Use pypdf."
    assert back["agent_skill"]["name"] == "pdf-tools"
    assert "direction" in aql.fails("mcp_aql_read", "convert_skill_format", direction="sideways")


def test_settings_logs_and_build_info(alice, portfolio):
    aql = portfolio(alice)
    skill(aql, "logged")

    assert aql.ok("mcp_aql_read", "get_build_info")["name"] == "Atrium"
    logs = aql.ok("mcp_aql_read", "query_logs", message="logged")
    assert logs["total"] >= 1 and logs["entries"][0]["message"] == "element.create skill 'logged'"
    assert "Unknown setting" in aql.fails("mcp_aql_read", "dollhouse_config", action="get", setting="nope")
    wizard = aql.ok("mcp_aql_read", "dollhouse_config", action="wizard")
    assert {s["setting"] for s in wizard["settings"]} == {"gatekeeper.auto_confirm", "elements.default_author"}


def test_unified_search_scopes(alice, portfolio):
    aql = portfolio(alice)
    skill(aql, "debugging", tags=["py"])

    local = aql.ok("mcp_aql_read", "search", query="debugging")
    star = aql.ok("mcp_aql_read", "search", query="*", type="skill", filters={"tags": ["py"]})
    portfolio_hits = aql.ok("mcp_aql_read", "search_portfolio", query="debugging")
    legacy = aql.ok("mcp_aql_read", "search_all", query="debugging", sources=["local"])

    assert [r["element_name"] for r in local["results"]] == ["debugging"]
    assert [r["element_name"] for r in star["results"]] == ["debugging"]
    assert portfolio_hits["total"] == 1 and legacy["results"][0]["source"] == "local"
    assert "not configured" in aql.fails("mcp_aql_read", "search", query="x", scope="github")


def test_import_persona_from_json(alice, portfolio):
    aql = portfolio(alice)

    result = aql.ok("mcp_aql_create", "import_persona",
                    source='{"element_name": "helper", "description": "Helps", "instructions": "You ARE helpful."}')

    assert result["created"] is True and result["element"]["element_type"] == "persona"


def test_the_default_author_setting_applies_to_new_elements(alice, portfolio):
    aql = portfolio(alice)
    aql.ok("mcp_aql_read", "dollhouse_config", action="set", setting="elements.default_author", value="Team A")

    skill(aql, "authored")

    assert aql.ok("mcp_aql_read", "get_element", "skill", element_name="authored")["author"] == "Team A"


def test_yaml_exports_keep_strings_that_look_like_numbers(alice, bob, portfolio):
    aql = portfolio(alice)
    skill(aql, "numbers", description="0o17", version="1.0.0")
    package = aql.ok("mcp_aql_read", "export_element", "skill", element_name="numbers", format="yaml")

    imported = portfolio(bob).ok("mcp_aql_create", "import_element", data=package)

    assert imported["element"]["description"] == "0o17"


def test_the_collection_scope_finds_what_curators_published(alice, bob, portfolio):
    from core.caller import Caller
    from elements.models import Element
    from elements.services import element_publish

    skill(portfolio(bob), "shared-debugging", description="Debug like the team does")
    skill(portfolio(bob), "private-debugging", description="Bob's own way to debug")
    curator = Caller.trusted(bob.user.__class__.objects.create_superuser("curator", "c@example.com", "pw"),
                             via="admin")
    element_publish(caller=curator, element=Element.objects.get(name="shared-debugging"), published=True)
    aql = portfolio(alice)
    skill(aql, "my-debugging")

    collection = aql.ok("mcp_aql_read", "search", query="debug", scope="collection")
    everything = aql.ok("mcp_aql_read", "search", query="debug", scope="all")
    listed = aql.ok("mcp_aql_read", "search", query="*", scope="collection")

    assert [(r["element_name"], r["source"], r["author"]) for r in collection["results"]] == [
        ("shared-debugging", "collection", "bob")]
    assert {(r["element_name"], r["source"]) for r in everything["results"]} == {
        ("my-debugging", "local"), ("shared-debugging", "collection")}
    # "*" lists the whole collection: what curators published, then the community collection's items.
    assert [(r["element_name"], r["origin"]) for r in listed["results"]][:1] == [("shared-debugging", "published")]
    assert {r["origin"] for r in listed["results"][1:]} == {"community"}
    assert "private-debugging" not in {r["element_name"] for r in listed["results"]}
    assert "not configured" in aql.fails("mcp_aql_read", "search", query="x", scope="github")


def test_only_curators_publish(alice):
    from core.caller import Caller
    from core.errors import Forbidden
    from elements.models import Element
    from elements.services import element_create, element_publish

    caller = Caller.trusted(alice.user, via="mcp")
    element = element_create(caller=caller, element_type=ElementType.SKILL, name="mine",
                             params={"description": "d", "content": "c"})

    with pytest.raises(Forbidden):
        element_publish(caller=caller, element=element, published=True)
    assert not Element.objects.get(pk=element.pk).published
