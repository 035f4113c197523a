"""Resilience: what onStepLimitReached and onExecutionFailure make of a pause, the retry backoff and
the circuit breaker, as pure functions; then both policies through record_execution_step."""

from datetime import UTC, datetime, timedelta

import pytest

from elements.autonomy import (
    CIRCUIT_COOLDOWN,
    Autonomy,
    Counters,
    Resilience,
    Step,
    evaluate,
    resilience_apply,
    resilience_from,
    retry_delay,
)
from elements.models import AgentExecution
from tests.agent_helpers import execute, make_agent, step

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
FRESH = Counters()


def apply(policy: Resilience, counters: Counters = FRESH, *, count: int = 1, outcome: str = "success",
          hint: str = "", risk: int | None = None, max_steps: int = 10, now: datetime = NOW):
    step_ = Step(step_count=count, outcome=outcome, next_action_hint=hint, risk_score=risk)
    return resilience_apply(evaluate(step_, Autonomy(), max_steps), step=step_, autonomy=Autonomy(),
                            max_steps=max_steps, policy=policy, counters=counters, now=now)


# --- onStepLimitReached ------------------------------------------------------------------------

def test_pause_leaves_the_step_limit_pause_as_it_is():
    directive, counters = apply(Resilience(), count=10)

    assert (directive.proceed, directive.resilience_action, counters.continuations) == (False, None, 0)


def test_continue_goes_on_past_the_step_limit_counting_continuations():
    directive, counters = apply(Resilience(on_step_limit_reached="continue"), Counters(continuations=2), count=10)

    assert directive.proceed is True
    assert directive.resilience_action == {"action": "continue", "continuationCount": 3}
    assert directive.steps_remaining == 9
    assert counters.continuations == 3


def test_continue_stops_at_max_continuations():
    policy = Resilience(on_step_limit_reached="continue", max_continuations=2)

    directive, counters = apply(policy, Counters(continuations=2), count=10)

    assert directive.proceed is False and directive.reason == "Maximum autonomous steps reached (10)"
    assert directive.resilience_action == {"action": "pause", "reason": "maxContinuations reached",
                                           "continuationCount": 2}
    assert counters.continuations == 2


def test_restart_starts_the_window_again_and_says_whether_state_is_kept():
    directive, _ = apply(Resilience(on_step_limit_reached="restart", preserve_state=False), count=10)

    assert directive.resilience_action == {"action": "restart", "continuationCount": 1, "preserveState": False}


def test_resilience_never_continues_past_a_dangerous_next_action():
    directive, counters = apply(Resilience(on_step_limit_reached="continue"), count=10, hint="rm -rf /")

    assert (directive.proceed, directive.rule) == (False, "danger_zone")
    assert counters.continuations == 0


def test_a_failed_step_at_the_step_limit_is_retried_only_under_a_retry_policy():
    paused, _ = apply(Resilience(on_step_limit_reached="continue"), count=10, outcome="failure")
    both, counters = apply(Resilience(on_step_limit_reached="continue", on_execution_failure="retry"), count=10,
                           outcome="failure")

    assert (paused.proceed, paused.rule) == (False, "failure")
    assert both.proceed is True and both.resilience_action["action"] == "retry"
    assert both.resilience_action["continuationCount"] == 1
    assert (counters.continuations, counters.retries) == (1, 1)


# --- onExecutionFailure ------------------------------------------------------------------------

def test_retry_goes_on_after_a_failure_and_reports_the_delay_without_waiting():
    directive, counters = apply(Resilience(on_execution_failure="retry"), outcome="failure")

    assert directive.proceed is True
    assert directive.resilience_action == {"action": "retry", "retryCount": 1, "maxRetries": 3,
                                           "retryAfterSeconds": 2, "backoff": "linear"}
    assert (counters.consecutive_failures, counters.retries) == (1, 1)


@pytest.mark.parametrize(("backoff", "delays"), [("linear", [2, 4, 6, 8]), ("exponential", [2, 4, 8, 16])])
def test_the_backoff_grows_linearly_or_exponentially(backoff, delays):
    assert [retry_delay(attempt, backoff) for attempt in (1, 2, 3, 4)] == delays
    assert retry_delay(30, "exponential") == 300


def test_restart_fresh_goes_on_at_once():
    directive, _ = apply(Resilience(on_execution_failure="restart-fresh"), outcome="failure")

    assert directive.resilience_action["action"] == "restart-fresh"
    assert directive.resilience_action["retryAfterSeconds"] == 0


def test_a_success_resets_the_consecutive_failures():
    _, counters = apply(Resilience(on_execution_failure="retry"), Counters(consecutive_failures=2))

    assert counters.consecutive_failures == 0


def test_the_circuit_opens_after_max_retries_consecutive_failures():
    policy = Resilience(on_execution_failure="retry", max_retries=3)
    counters = Counters()
    answers = []
    for _ in range(4):
        directive, counters = apply(policy, counters, outcome="failure")
        answers.append(directive)

    assert [a.proceed for a in answers] == [True, True, True, False]
    assert answers[3].resilience_action == {"action": "circuit_open", "consecutiveFailures": 4,
                                            "retryAfterSeconds": int(CIRCUIT_COOLDOWN.total_seconds())}
    assert counters.circuit_open_until == NOW + CIRCUIT_COOLDOWN
    assert counters.retries == 3


def test_retry_is_refused_while_the_circuit_is_open_and_allowed_once_it_closes():
    policy = Resilience(on_execution_failure="retry", max_retries=3)
    opened = Counters(retries=3, consecutive_failures=4, circuit_open_until=NOW + CIRCUIT_COOLDOWN)

    refused, still = apply(policy, opened, outcome="failure", now=NOW + timedelta(seconds=20))
    retried, closed = apply(policy, still, outcome="failure", now=NOW + CIRCUIT_COOLDOWN)

    assert refused.proceed is False
    assert refused.resilience_action == {"action": "pause", "reason": "circuit_open", "retryAfterSeconds": 40,
                                         "consecutiveFailures": 5}
    assert still.circuit_open_until == NOW + CIRCUIT_COOLDOWN
    assert retried.proceed is True and retried.resilience_action["retryCount"] == 1
    assert (closed.circuit_open_until, closed.consecutive_failures) == (None, 1)


def test_resilience_never_retries_past_a_pause_of_the_next_action():
    directive, counters = apply(Resilience(on_execution_failure="retry"), outcome="failure", risk=70)

    assert (directive.proceed, directive.rule) == (False, "verify")
    assert counters.retries == 0 and counters.consecutive_failures == 1


def test_resilience_settings_take_snake_case_and_refuse_unknown_policies():
    assert resilience_from({"on_execution_failure": "retry", "max_retries": 5, "retry_backoff": "exponential"}) \
        == Resilience(on_execution_failure="retry", max_retries=5, retry_backoff="exponential")
    with pytest.raises(Exception, match="onStepLimitReached must be one of pause, continue, restart"):
        resilience_from({"onStepLimitReached": "forever"})


# --- through MCP-AQL -----------------------------------------------------------------------------

@pytest.mark.django_db
def test_an_agent_that_continues_past_its_step_limit_does_so_max_continuations_times(alice, portfolio):
    make_agent(alice, autonomy={"maxAutonomousSteps": 2},
               resilience={"onStepLimitReached": "continue", "maxContinuations": 2})
    aql = portfolio(alice)
    execute(aql)

    answers = [step(aql)["autonomy"] for _ in range(6)]

    assert [a["continue"] for a in answers] == [True, True, True, True, True, False]
    assert [a.get("resilienceAction", {}).get("continuationCount") for a in answers] == [None, 1, None, 2, None, 2]
    assert answers[5]["resilienceAction"]["reason"] == "maxContinuations reached"
    assert AgentExecution.objects.get().continuations == 2


@pytest.mark.django_db
def test_an_agent_that_retries_failures_opens_its_circuit_after_max_retries(alice, portfolio):
    make_agent(alice, resilience={"onExecutionFailure": "retry", "maxRetries": 2, "retryBackoff": "exponential"})
    aql = portfolio(alice)
    execute(aql)

    answers = [step(aql, outcome="failure")["autonomy"] for _ in range(4)]

    assert [a["continue"] for a in answers] == [True, True, False, False]
    assert [a["resilienceAction"]["action"] for a in answers] == ["retry", "retry", "circuit_open", "pause"]
    assert [answers[0]["resilienceAction"]["retryAfterSeconds"], answers[1]["resilienceAction"]["retryAfterSeconds"]] \
        == [2, 4]
    execution = AgentExecution.objects.get()
    assert (execution.retries, execution.consecutive_failures) == (2, 4)
    assert execution.circuit_open_until is not None
