"""Autonomy: each rule of the evaluation in the original's order, as pure functions, and the
settings as agents write them; then the same rules answered through record_execution_step."""

import time

import pytest

from core.errors import InvalidInput
from elements.autonomy import Autonomy, Step, autonomy_from, danger_patterns_in, evaluate, safety_tier
from tests.agent_helpers import execute, make_agent, step

MODERATE = Autonomy()


def directive(*, count: int = 1, outcome: str = "success", hint: str = "", risk: int | None = None,
              settings: Autonomy = MODERATE, max_steps: int = 10):
    return evaluate(Step(step_count=count, outcome=outcome, next_action_hint=hint, risk_score=risk), settings,
                    max_steps)


# --- 1. the step limit -------------------------------------------------------------------------

def test_the_step_limit_pauses_once_the_steps_reach_it():
    paused = directive(count=10)

    assert (paused.proceed, paused.rule, paused.reason, paused.steps_remaining) == (
        False, "step_limit", "Maximum autonomous steps reached (10)", 0)
    assert paused.notifications == ({"type": "autonomy_pause", "message": paused.reason},)


def test_a_step_limit_of_zero_is_unlimited():
    going = directive(count=10_000, max_steps=0)

    assert going.proceed is True and going.steps_remaining is None


def test_the_step_limit_comes_before_a_failed_outcome():
    assert directive(count=10, outcome="failure").rule == "step_limit"


# --- 2. a failed step --------------------------------------------------------------------------

def test_a_failed_step_pauses_for_review():
    paused = directive(outcome="failure")

    assert (paused.proceed, paused.reason) == (False, "Previous step failed - human review recommended")


def test_a_failed_step_comes_before_the_approval_patterns():
    settings = Autonomy(requires_approval=("deploy*",))

    assert directive(outcome="failure", hint="deploy now", settings=settings).rule == "failure"


# --- 3. approval patterns on the hint -----------------------------------------------------------

def test_a_hint_matching_requires_approval_pauses_naming_the_pattern():
    paused = directive(hint="Deploy to production", settings=Autonomy(requires_approval=("deploy*",)))

    assert (paused.rule, paused.reason) == ("approval", 'Action requires approval: matches pattern "deploy*"')


def test_requires_approval_wins_over_auto_approve():
    settings = Autonomy(requires_approval=("*prod*",), auto_approve=("deploy*",))

    assert directive(hint="deploy to prod", settings=settings).rule == "approval"


def test_auto_approve_waives_the_confirm_tier_and_the_risk_tolerance():
    settings = Autonomy(risk_tolerance="conservative", auto_approve=("label *",))

    going = directive(hint="label the issue", risk=45, settings=settings)

    assert going.proceed is True
    assert 'Action auto-approved: matches pattern "label *"' in going.factors


def test_auto_approve_does_not_waive_the_verify_tier_or_the_danger_zone():
    settings = Autonomy(auto_approve=("*",))

    assert directive(hint="tidy up", risk=70, settings=settings).rule == "verify"
    assert directive(hint="rm -rf build", settings=settings).rule == "danger_zone"


# --- 4. the safety tier --------------------------------------------------------------------------

@pytest.mark.parametrize(("score", "tier"), [(0, "advisory"), (30, "advisory"), (31, "confirm"), (60, "confirm"),
                                             (61, "verify"), (85, "verify"), (86, "danger_zone"),
                                             (100, "danger_zone")])
def test_the_tier_follows_the_risk_score_thresholds(score, tier):
    assert safety_tier(score, "").tier == tier


@pytest.mark.parametrize("hint", ["rm  -rf /", "please DROP   TABLE users", "delete from users where 1 = 1",
                                  "eval(input)", "exec (code)", "require('child_process')", "process.exit(1)"])
def test_a_dangerous_command_in_the_hint_is_the_danger_zone_whatever_the_score(hint):
    tier = safety_tier(0, hint)

    assert tier.tier == "danger_zone" and tier.danger_patterns


def test_only_the_first_five_hundred_characters_of_a_hint_are_matched():
    assert danger_patterns_in("x" * 500 + "rm -rf /") == ()
    assert danger_patterns_in("x" * 490 + "rm -rf /") == ("rm -rf",)


def test_the_danger_patterns_stay_fast_on_hostile_hints():
    hostile = ["delete from " + "a" * 5000 + " where 1=", "rm " + " " * 10_000 + "-r", "drop" + "\t" * 10_000]
    started = time.perf_counter()
    for hint in hostile:
        danger_patterns_in(hint)
    assert time.perf_counter() - started < 0.5


def test_the_danger_zone_stops_the_agent():
    stopped = directive(hint="DROP TABLE users")

    assert (stopped.proceed, stopped.stopped, stopped.rule) == (False, True, "danger_zone")
    assert stopped.notifications[0]["type"] == "danger_zone"


def test_the_verify_tier_pauses_for_a_verification():
    paused = directive(risk=61)

    assert (paused.rule, paused.stopped) == ("verify", False)
    assert paused.notifications[0]["type"] == "permission_pending"


def test_the_confirm_tier_pauses_unless_the_agent_is_aggressive():
    assert directive(risk=40).rule == "confirm"
    assert directive(risk=40, settings=Autonomy(risk_tolerance="aggressive")).proceed is True


# --- 5. the risk tolerance -----------------------------------------------------------------------

def test_a_risk_score_over_the_tolerance_pauses_and_one_at_it_does_not():
    conservative = Autonomy(risk_tolerance="conservative")

    over, at = directive(risk=26, settings=conservative), directive(risk=25, settings=conservative)

    assert (over.rule, over.reason) == ("risk_threshold", "Risk score 26 exceeds conservative threshold (25)")
    assert at.proceed is True


def test_an_aggressive_agent_goes_on_through_the_confirm_tier_up_to_its_threshold():
    # Above 60 the verify tier pauses first, so an aggressive agent's 75 is never the rule that decides.
    assert directive(risk=60, settings=Autonomy(risk_tolerance="aggressive")).proceed is True


# --- 6. go on ----------------------------------------------------------------------------------

def test_otherwise_the_agent_continues_with_the_steps_it_has_left():
    going = directive(count=3, risk=10)

    assert (going.proceed, going.rule, going.steps_remaining) == (True, "continue", 6)
    assert going.to_json()["continue"] is True and "reason" not in going.to_json()


# --- settings ----------------------------------------------------------------------------------

def test_snake_case_and_max_steps_are_normalised():
    settings = autonomy_from({"risk_tolerance": "conservative", "maxSteps": 3, "requires_approval": ["Deploy*"],
                              "auto_approve": "label*", "verification_timeout_minutes": 10})

    assert settings == Autonomy(risk_tolerance="conservative", max_autonomous_steps=3,
                                requires_approval=("deploy*",), auto_approve=("label*",),
                                verification_timeout_minutes=10)


def test_a_legacy_top_level_risk_tolerance_counts_when_autonomy_names_none():
    assert autonomy_from(None, legacy_risk_tolerance="aggressive").risk_tolerance == "aggressive"
    assert autonomy_from({"riskTolerance": "moderate"}, legacy_risk_tolerance="aggressive").risk_tolerance == \
        "moderate"


@pytest.mark.parametrize("raw", [{"riskTolerance": "reckless"}, {"maxAutonomousSteps": -1},
                                 {"maxAutonomousSteps": 2.5}, {"requiresApproval": [""]},
                                 {"autoApprove": ["x" * 101]}, "fast"])
def test_invalid_autonomy_settings_are_refused_by_name(raw):
    with pytest.raises(InvalidInput):
        autonomy_from(raw)


# --- through MCP-AQL -----------------------------------------------------------------------------

@pytest.mark.django_db
def test_record_execution_step_answers_each_rule_in_order(alice, portfolio):
    make_agent(alice, autonomy={"riskTolerance": "conservative", "maxAutonomousSteps": 6,
                                "requiresApproval": ["deploy*"]})
    aql = portfolio(alice)
    execute(aql)

    answers = [step(aql, nextActionHint="read logs", riskScore=5)["autonomy"],
               step(aql, outcome="failure")["autonomy"],
               step(aql, nextActionHint="Deploy the fix")["autonomy"],
               step(aql, riskScore=40)["autonomy"],
               step(aql, riskScore=28)["autonomy"],
               step(aql)["autonomy"]]

    assert [a["continue"] for a in answers] == [True, False, False, False, False, False]
    assert [a.get("reason") for a in answers] == [
        None, "Previous step failed - human review recommended",
        'Action requires approval: matches pattern "deploy*"',
        "Confirmation required: Risk score 40 needs confirmation (>= 31)",
        "Risk score 28 exceeds conservative threshold (25)", "Maximum autonomous steps reached (6)"]
    assert answers[0]["stepsRemaining"] == 4 and answers[5]["stepsRemaining"] == 0
    assert answers[0]["nextStepRisk"] == {"tier": "advisory", "riskScore": 5,
                                          "reason": "Risk score 5 is advisory only (< 31)"}
