"""The gatekeeper's decisions, as a pure function and through MCP sessions."""

import pytest

from elements.gatekeeper import POLICY_CHANGE, Held, Level, Policy, decide
from elements.models import Confirmation, Element

PERSONA = {"element_name": "reviewer", "description": "Reviews.", "instructions": "You ARE a reviewer."}


def decide_edit(**kwargs):
    base = {"operation": "edit_element", "element_type": "persona", "default": Level.CONFIRM_SINGLE_USE,
            "can_be_elevated": True, "policies": [], "held": []}
    return decide(**{**base, **kwargs})


def test_deny_beats_confirm_and_allow_and_names_the_element():
    policies = [Policy("skill", "careful", allow=("*_element",)), Policy("persona", "locked", deny=("edit_*",))]

    decision = decide_edit(policies=policies)

    assert decision.level is Level.DENY
    assert decision.source == 'persona "locked"'
    assert 'blocked by active persona "locked"' in decision.reason


def test_allow_globs_auto_approve_what_can_be_elevated():
    decision = decide_edit(policies=[Policy("skill", "trusting", allow=("*_element",))])

    assert decision.allowed and decision.level is Level.AUTO_APPROVE


def test_allow_cannot_waive_what_cannot_be_elevated():
    decision = decide_edit(operation="delete_element", can_be_elevated=False,
                           policies=[Policy("skill", "trusting", allow=("*",))])

    assert not decision.allowed and decision.level is Level.CONFIRM_SINGLE_USE


def test_confirm_wins_over_allow_from_another_element():
    decision = decide_edit(default=Level.AUTO_APPROVE, operation="get_element",
                           policies=[Policy("skill", "a", allow=("get_*",)), Policy("skill", "b", confirm=("get_*",))])

    assert decision.level is Level.CONFIRM_SESSION and decision.source == 'skill "b"'


def test_scope_restrictions_block_other_types():
    decision = decide_edit(policies=[Policy("persona", "skills-only", allowed_types=("skill",))])

    assert decision.level is Level.DENY and "outside the scope" in decision.reason


def test_an_unscoped_confirmation_covers_every_type_and_a_scoped_one_only_its_own():
    unscoped = decide_edit(default=Level.CONFIRM_SESSION, held=[Held("edit_element", "", "session")])
    other_type = decide_edit(default=Level.CONFIRM_SESSION, held=[Held("edit_element", "skill", "session")])

    assert unscoped.allowed
    assert not other_type.allowed


def test_single_use_levels_are_not_met_by_session_confirmations():
    assert not decide_edit(held=[Held("edit_element", "", "session")]).allowed
    assert decide_edit(held=[Held("edit_element", "", "single_use")]).allowed


def test_gatekeeper_changes_need_an_explicit_single_use_confirmation():
    covered = decide_edit(default=Level.CONFIRM_SESSION, explicit=POLICY_CHANGE,
                          policies=[Policy("skill", "trusting", allow=("*",))],
                          held=[Held("edit_element", "", "session")])

    assert not covered.allowed and covered.level is Level.CONFIRM_SINGLE_USE
    assert decide_edit(explicit=POLICY_CHANGE, held=[Held("edit_element", "", "single_use")]).allowed


def test_auto_confirm_never_covers_deletes_or_policy_changes():
    assert decide_edit(auto_confirm=True).allowed
    assert not decide_edit(operation="delete_element", can_be_elevated=False, auto_confirm=True).allowed
    assert not decide_edit(explicit=POLICY_CHANGE, auto_confirm=True).allowed


@pytest.mark.django_db
class TestThroughMcp:
    def test_create_is_confirmed_once_per_session(self, alice, portfolio):
        aql = portfolio(alice)

        refused = aql.call("mcp_aql_create", "create_element", "persona", **PERSONA)
        confirmed = aql.ok("mcp_aql_execute", "confirm_operation", operation="create_element")
        first = aql.call("mcp_aql_create", "create_element", "persona", **PERSONA)
        second = aql.call("mcp_aql_create", "create_element", "persona", **{**PERSONA, "element_name": "two"})

        assert refused["success"] is False
        assert refused["confirmation"] == {"operation": "create_element", "level": "session",
                                           "element_type": "persona"}
        assert "confirm_operation" in refused["error"]
        assert confirmed["confirmed"] is True and confirmed["level"] == "session"
        assert first["success"] and second["success"]
        assert Element.objects.count() == 2

    def test_sessions_do_not_share_confirmations(self, alice, portfolio):
        first, second = portfolio(alice), portfolio(alice)
        first.ok("mcp_aql_execute", "confirm_operation", operation="create_element")

        refused = second.call("mcp_aql_create", "create_element", "persona", **PERSONA)

        assert refused["success"] is False and "confirmation" in refused
        assert not Element.objects.exists()

    def test_updates_are_confirmed_each_time(self, alice, portfolio):
        aql = portfolio(alice)
        aql.ok("mcp_aql_create", "create_element", "persona", **PERSONA)
        aql.ok("mcp_aql_execute", "confirm_operation", operation="edit_element")

        once = aql.call("mcp_aql_update", "edit_element", "persona", element_name="reviewer",
                        input={"description": "One"})
        twice = aql.call("mcp_aql_update", "edit_element", "persona", element_name="reviewer",
                         input={"description": "Two"})

        assert once["success"] is True
        assert twice["success"] is False and twice["confirmation"]["level"] == "single_use"
        assert Element.objects.get().description == "One"

    def test_a_refused_call_consumes_no_confirmation(self, alice, portfolio):
        aql = portfolio(alice)
        aql.ok("mcp_aql_create", "create_element", "persona", **PERSONA)
        aql.ok("mcp_aql_execute", "confirm_operation", operation="edit_element")

        invalid = aql.call("mcp_aql_update", "edit_element", "persona", element_name="reviewer",
                           input={"description": "x" * 600})
        valid = aql.call("mcp_aql_update", "edit_element", "persona", element_name="reviewer",
                         input={"description": "Fine"})

        assert invalid["success"] is False and "confirmation" not in invalid
        assert valid["success"] is True

    def test_an_active_deny_policy_blocks_and_deactivation_lifts_it(self, alice, portfolio):
        aql = portfolio(alice)
        aql.ok("mcp_aql_create", "create_element", "persona",
               **{**PERSONA, "element_name": "read-only", "gatekeeper": {"deny": ["*_element"]}})
        aql.ok("mcp_aql_read", "activate_element", "persona", element_name="read-only")

        blocked = aql.fails("mcp_aql_read", "get_element", "persona", element_name="read-only")
        aql.ok("mcp_aql_read", "deactivate_element", "persona", element_name="read-only")

        assert blocked == 'Operation "get_element" is blocked by active persona "read-only"\'s deny policy.'
        assert aql.ok("mcp_aql_read", "get_element", "persona", element_name="read-only")["element_name"] == \
            "read-only"

    def test_an_active_allow_policy_waives_update_confirmations(self, alice, portfolio):
        aql = portfolio(alice)
        aql.ok("mcp_aql_create", "create_element", "skill", element_name="trusting", description="d",
               content="c", gatekeeper={"allow": ["edit_*"]})
        aql.ok("mcp_aql_read", "activate_element", "skill", element_name="trusting")

        edited = aql.call("mcp_aql_update", "edit_element", "skill", element_name="trusting",
                          input={"description": "changed"})
        deleting = aql.call("mcp_aql_delete", "delete_element", "skill", element_name="trusting")

        assert edited["success"] is True
        assert deleting["success"] is False and deleting["confirmation"]["level"] == "single_use"

    def test_a_policy_change_needs_its_own_confirmation(self, alice, portfolio):
        aql = portfolio(alice)
        aql.ok("mcp_aql_execute", "confirm_operation", operation="create_element")

        refused = aql.call("mcp_aql_create", "create_element", "persona",
                           **{**PERSONA, "gatekeeper": {"deny": ["delete_element"]}})
        aql.ok("mcp_aql_execute", "confirm_operation", operation="create_element")
        created = aql.call("mcp_aql_create", "create_element", "persona",
                           **{**PERSONA, "gatekeeper": {"deny": ["delete_element"]}})
        again = aql.call("mcp_aql_create", "create_element", "persona",
                         **{**PERSONA, "element_name": "other", "gatekeeper": {"deny": ["x"]}})

        assert refused["success"] is False and refused["confirmation"]["level"] == "single_use"
        assert created["success"] is True
        assert again["success"] is False
        assert Element.objects.get().gatekeeper == {"deny": ["delete_element"]}

    def test_confirmations_can_be_scoped_to_a_type(self, alice, portfolio):
        aql = portfolio(alice)
        aql.ok("mcp_aql_execute", "confirm_operation", operation="create_element", element_type="skill")

        persona = aql.call("mcp_aql_create", "create_element", "persona", **PERSONA)
        skill = aql.call("mcp_aql_create", "create_element", "skill", element_name="s", description="d",
                         content="c")

        assert persona["success"] is False
        assert skill["success"] is True

    def test_a_sandboxing_element_stops_confirmations(self, alice, portfolio):
        aql = portfolio(alice)
        aql.ok("mcp_aql_create", "create_element", "persona",
               **{**PERSONA, "gatekeeper": {"deny": ["confirm_operation"]}})
        aql.ok("mcp_aql_read", "activate_element", "persona", element_name="reviewer")

        error = aql.fails("mcp_aql_execute", "confirm_operation", operation="delete_element")

        assert "sandboxed" in error
        assert not Confirmation.objects.filter(operation="delete_element", pending=False).exists()

    def test_auto_confirm_is_a_per_user_setting_off_by_default(self, alice, portfolio):
        aql = portfolio(alice)

        assert aql.ok("mcp_aql_read", "dollhouse_config", action="get",
                      setting="gatekeeper.auto_confirm") == {"settings": {"gatekeeper.auto_confirm": False}}
        refused = aql.call("mcp_aql_read", "dollhouse_config", action="set", setting="gatekeeper.auto_confirm",
                           value=True)
        aql.ok("mcp_aql_read", "dollhouse_config", action="set", setting="gatekeeper.auto_confirm", value=True)

        assert refused["success"] is False and refused["confirmation"]["level"] == "single_use"
        assert aql.call("mcp_aql_create", "create_element", "persona", **PERSONA)["success"] is True

    def test_importing_a_policy_needs_an_explicit_confirmation(self, alice, portfolio):
        aql = portfolio(alice)
        aql.ok("mcp_aql_execute", "confirm_operation", operation="import_persona")
        source = '{"element_name": "pp", "description": "d", "instructions": "You ARE x.", ' \
                 '"gatekeeper": {"allow": ["*"]}}'

        refused = aql.call("mcp_aql_create", "import_persona", source=source)
        plain = aql.call("mcp_aql_create", "import_persona",
                         source='{"element_name": "qq", "description": "d", "instructions": "You ARE y."}')

        assert refused["success"] is False and refused["confirmation"]["level"] == "single_use"
        assert plain["success"] is True, plain
        assert list(Element.objects.values_list("name", flat=True)) == ["qq"]

    def test_a_glob_can_sandbox_and_a_sandbox_outranks_auto_confirm(self, alice, portfolio):
        aql = portfolio(alice)
        aql.ok("mcp_aql_read", "dollhouse_config", action="set", setting="gatekeeper.auto_confirm", value=True)
        aql.ok("mcp_aql_create", "create_element", "persona",
               **{**PERSONA, "gatekeeper": {"deny": ["confirm_*"]}})
        aql.ok("mcp_aql_read", "activate_element", "persona", element_name="reviewer")

        confirming = aql.fails("mcp_aql_execute", "confirm_operation", operation="edit_element")
        creating = aql.call("mcp_aql_create", "create_element", "skill", element_name="s", description="d",
                            content="c")

        assert "sandboxed" in confirming
        assert creating["success"] is False and "sandboxed" in creating["error"]
        assert "confirmation" not in creating

    def test_a_type_restriction_needs_calls_to_name_a_type(self, alice, portfolio):
        aql = portfolio(alice)
        aql.ok("mcp_aql_create", "create_element", "skill", element_name="skills-only", description="d",
               content="c", gatekeeper={"scopeRestrictions": {"allowedTypes": ["skill"]}})
        aql.ok("mcp_aql_read", "activate_element", "skill", element_name="skills-only")

        untyped = aql.fails("mcp_aql_read", "search_elements", query="d")
        typed = aql.call("mcp_aql_read", "search_elements", "skill", query="d")
        other = aql.fails("mcp_aql_read", "list_elements", "persona")

        assert "pass element_type" in untyped
        assert typed["success"] is True
        assert "outside the scope" in other
