"""Autonomy: whether an agent goes on by itself after a recorded step, and what its resilience
policy makes of a pause.

Pure functions of the step, the execution's counters and the agent's settings, so every rule can
be tested on its own. The rules run in the original's order and the first that pauses decides:
step limit, failed outcome, approval patterns, safety tier, risk tolerance; otherwise continue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from core.errors import InvalidInput

DEFAULT_MAX_STEPS = 10
MAX_STEPS_LIMIT = 10_000
RISK_TOLERANCES = {"conservative": 25, "moderate": 50, "aggressive": 75}
# Safety tiers by risk score, as in @dollhousemcp/safety.
CONFIRM_AT, VERIFY_AT, DANGER_AT = 31, 61, 86
# Hints are matched only this far: every pattern below then runs on bounded text.
MAX_HINT = 500
MAX_PATTERNS = 50
MAX_PATTERN_LENGTH = 100
MAX_VERIFICATION_MINUTES = 24 * 60

# The commands that put an agent in the danger zone whatever its risk score. Each is linear in
# the text (no nested quantifiers), and the text is at most MAX_HINT characters.
DANGER_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("rm -rf", re.compile(r"rm\s+-rf", re.IGNORECASE)),
    ("DROP TABLE", re.compile(r"drop\s+table", re.IGNORECASE)),
    ("DELETE FROM ... WHERE 1=1", re.compile(r"delete\s+from\s+[^\s;]{1,128}\s+where\s+1\s*=\s*1", re.IGNORECASE)),
    ("eval(", re.compile(r"\beval\s*\(", re.IGNORECASE)),
    ("exec(", re.compile(r"\bexec\s*\(", re.IGNORECASE)),
    ("child_process", re.compile(r"child_process", re.IGNORECASE)),
    ("process.exit", re.compile(r"process\.exit", re.IGNORECASE)),
)

STEP_LIMIT_POLICIES = ("pause", "continue", "restart")
FAILURE_POLICIES = ("pause", "retry", "restart-fresh")
BACKOFFS = ("linear", "exponential")
DEFAULT_MAX_RETRIES = 3
DEFAULT_MAX_CONTINUATIONS = 10
RETRY_BASE_SECONDS = 2
RETRY_MAX_SECONDS = 300
# How long an open circuit refuses retries before it lets one through again.
CIRCUIT_COOLDOWN = timedelta(seconds=60)


# --- settings --------------------------------------------------------------------------------

def _key(raw: dict[str, Any], *names: str) -> Any:
    """The first of `names` present in `raw`: camelCase first, then the snake_case spellings."""
    for name in names:
        if name in raw:
            return raw[name]
    return None


def _whole(value: Any, *, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            isinstance(value, float) and not value.is_integer()) or not low <= value <= high:
        raise InvalidInput(f"{field} must be a whole number from {low} to {high:,}.", code="invalid_agent")
    return int(value)


def _patterns(value: Any, *, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if (not isinstance(value, list) or len(value) > MAX_PATTERNS
            or not all(isinstance(p, str) and 0 < len(p) <= MAX_PATTERN_LENGTH for p in value)):
        raise InvalidInput(f"{field} must be a list of at most {MAX_PATTERNS} glob patterns of at most "
                           f"{MAX_PATTERN_LENGTH} characters.", code="invalid_agent")
    return tuple(p.lower() for p in value)


def _choice(value: Any, *, field: str, allowed: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if value not in allowed:
        raise InvalidInput(f"{field} must be one of {', '.join(allowed)} (got {value!r:.40}).", code="invalid_agent")
    return value


@dataclass(frozen=True)
class Autonomy:
    """An agent's autonomy settings, normalised."""

    risk_tolerance: str = "moderate"
    max_autonomous_steps: int = DEFAULT_MAX_STEPS  # 0: unlimited
    requires_approval: tuple[str, ...] = ()
    auto_approve: tuple[str, ...] = ()
    verification_timeout_minutes: int | None = None

    @property
    def threshold(self) -> int:
        return RISK_TOLERANCES[self.risk_tolerance]

    def to_json(self) -> dict[str, Any]:
        return {"riskTolerance": self.risk_tolerance, "maxAutonomousSteps": self.max_autonomous_steps,
                "requiresApproval": list(self.requires_approval), "autoApprove": list(self.auto_approve),
                "verificationTimeoutMinutes": self.verification_timeout_minutes}


def autonomy_from(raw: object, *, legacy_risk_tolerance: object = None) -> Autonomy:
    """The `autonomy` section of an agent (snake_case and maxSteps accepted); a legacy top-level
    riskTolerance counts when the section names none."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidInput("autonomy must be an object.", code="invalid_agent")
    tolerance = _key(raw, "riskTolerance", "risk_tolerance")
    steps = _key(raw, "maxAutonomousSteps", "max_autonomous_steps", "maxSteps", "max_steps")
    minutes = _key(raw, "verificationTimeoutMinutes", "verification_timeout_minutes")
    return Autonomy(
        risk_tolerance=_choice(tolerance if tolerance is not None else legacy_risk_tolerance,
                               field="autonomy.riskTolerance", allowed=tuple(RISK_TOLERANCES), default="moderate"),
        max_autonomous_steps=DEFAULT_MAX_STEPS if steps is None else _whole(
            steps, field="autonomy.maxAutonomousSteps", low=0, high=MAX_STEPS_LIMIT),
        requires_approval=_patterns(_key(raw, "requiresApproval", "requires_approval"),
                                    field="autonomy.requiresApproval"),
        auto_approve=_patterns(_key(raw, "autoApprove", "auto_approve"), field="autonomy.autoApprove"),
        verification_timeout_minutes=None if minutes is None else _whole(
            minutes, field="autonomy.verificationTimeoutMinutes", low=1, high=MAX_VERIFICATION_MINUTES),
    )


@dataclass(frozen=True)
class Resilience:
    """An agent's resilience policy, normalised."""

    on_step_limit_reached: str = "pause"
    on_execution_failure: str = "pause"
    max_retries: int = DEFAULT_MAX_RETRIES
    max_continuations: int = DEFAULT_MAX_CONTINUATIONS
    retry_backoff: str = "linear"
    preserve_state: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"onStepLimitReached": self.on_step_limit_reached, "onExecutionFailure": self.on_execution_failure,
                "maxRetries": self.max_retries, "maxContinuations": self.max_continuations,
                "retryBackoff": self.retry_backoff, "preserveState": self.preserve_state}


def resilience_from(raw: object) -> Resilience:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidInput("resilience must be an object.", code="invalid_agent")
    retries = _key(raw, "maxRetries", "max_retries")
    continuations = _key(raw, "maxContinuations", "max_continuations")
    preserve = _key(raw, "preserveState", "preserve_state")
    if preserve is not None and not isinstance(preserve, bool):
        raise InvalidInput("resilience.preserveState must be true or false.", code="invalid_agent")
    return Resilience(
        on_step_limit_reached=_choice(_key(raw, "onStepLimitReached", "on_step_limit_reached"),
                                      field="resilience.onStepLimitReached", allowed=STEP_LIMIT_POLICIES,
                                      default="pause"),
        on_execution_failure=_choice(_key(raw, "onExecutionFailure", "on_execution_failure"),
                                     field="resilience.onExecutionFailure", allowed=FAILURE_POLICIES,
                                     default="pause"),
        max_retries=DEFAULT_MAX_RETRIES if retries is None else _whole(
            retries, field="resilience.maxRetries", low=0, high=100),
        max_continuations=DEFAULT_MAX_CONTINUATIONS if continuations is None else _whole(
            continuations, field="resilience.maxContinuations", low=0, high=1000),
        retry_backoff=_choice(_key(raw, "retryBackoff", "retry_backoff"), field="resilience.retryBackoff",
                              allowed=BACKOFFS, default="linear"),
        preserve_state=True if preserve is None else preserve,
    )


def effective_max_steps(autonomy: Autonomy, override: int | None) -> int:
    """The step limit of an execution: the per-call override if there is one, else the agent's."""
    return autonomy.max_autonomous_steps if override is None else override


# --- safety tier -----------------------------------------------------------------------------

@dataclass(frozen=True)
class SafetyTier:
    tier: str  # advisory, confirm, verify or danger_zone
    risk_score: int
    reason: str
    danger_patterns: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"tier": self.tier, "riskScore": self.risk_score, "reason": self.reason}
        if self.danger_patterns:
            data["dangerPatterns"] = list(self.danger_patterns)
        return data


def danger_patterns_in(text: str | None, *, limit: int = MAX_HINT) -> tuple[str, ...]:
    bounded = (text or "")[:limit]
    return tuple(name for name, pattern in DANGER_PATTERNS if pattern.search(bounded))


def safety_tier(risk_score: int | None, text: str | None, *, limit: int = MAX_HINT) -> SafetyTier:
    """The tier of the next action, from its risk score and the words describing it (their first
    `limit` characters)."""
    score = risk_score or 0
    dangerous = danger_patterns_in(text, limit=limit)
    if dangerous:
        return SafetyTier("danger_zone", score, f"Dangerous operation pattern: {', '.join(dangerous)}", dangerous)
    if score >= DANGER_AT:
        return SafetyTier("danger_zone", score, f"Risk score {score} is in the danger zone (>= {DANGER_AT})")
    if score >= VERIFY_AT:
        return SafetyTier("verify", score, f"Risk score {score} needs verification (>= {VERIFY_AT})")
    if score >= CONFIRM_AT:
        return SafetyTier("confirm", score, f"Risk score {score} needs confirmation (>= {CONFIRM_AT})")
    return SafetyTier("advisory", score, f"Risk score {score} is advisory only (< {CONFIRM_AT})")


def risk_level(score: int) -> str:
    if score >= DANGER_AT:
        return "critical"
    if score >= VERIFY_AT:
        return "high"
    if score >= CONFIRM_AT:
        return "medium"
    return "low"


# --- evaluation ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """What autonomy looks at in a recorded step."""

    step_count: int  # the steps of the current window, this one included
    outcome: str  # success, failure or partial
    next_action_hint: str = ""
    risk_score: int | None = None


@dataclass(frozen=True)
class Directive:
    """Whether the agent goes on, and why."""

    proceed: bool
    reason: str
    rule: str  # step_limit, failure, approval, confirm, verify, danger_zone, risk_threshold or continue
    factors: tuple[str, ...] = ()
    steps_remaining: int | None = None
    stopped: bool = False
    tier: SafetyTier | None = None
    resilience_action: dict[str, Any] | None = None
    notifications: tuple[dict[str, str], ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"continue": self.proceed, "factors": list(self.factors)}
        if self.reason:
            data["reason"] = self.reason
        if self.steps_remaining is not None:
            data["stepsRemaining"] = self.steps_remaining
        if self.stopped:
            data["stopped"] = True
        if self.tier is not None:
            data["nextStepRisk"] = self.tier.to_json()
        if self.resilience_action is not None:
            data["resilienceAction"] = self.resilience_action
        if self.notifications:
            data["notifications"] = [dict(n) for n in self.notifications]
        return data


# The rules resilience may turn from a pause into going on; the others always stand.
RESILIENT_RULES = frozenset({"step_limit", "failure"})


def _pause(rule: str, reason: str, factors: list[str], *, steps_remaining: int | None = None,
           tier: SafetyTier | None = None) -> Directive:
    kind = {"verify": "permission_pending", "danger_zone": "danger_zone"}.get(rule, "autonomy_pause")
    return Directive(False, reason, rule, tuple(factors), steps_remaining, stopped=rule == "danger_zone", tier=tier,
                     notifications=({"type": kind, "message": reason},))


def evaluate(step: Step, autonomy: Autonomy, max_steps: int, *, skip: frozenset[str] = frozenset()) -> Directive:
    """The directive for one recorded step. `max_steps` 0 is unlimited. `skip` leaves rules out
    (resilience asks what the remaining rules say once it has dealt with its own)."""
    factors: list[str] = []
    limited = max_steps > 0
    factors.append(f"Step {step.step_count} of {max_steps}" if limited else f"Step {step.step_count} (no step limit)")
    # 1. The step limit.
    if "step_limit" not in skip and limited and step.step_count >= max_steps:
        return _pause("step_limit", f"Maximum autonomous steps reached ({max_steps})", factors, steps_remaining=0)
    # 2. A failed step.
    if "failure" not in skip and step.outcome == "failure":
        return _pause("failure", "Previous step failed - human review recommended", factors)
    # 3. Approval patterns on the hint: requiresApproval wins over autoApprove.
    hint = step.next_action_hint[:MAX_HINT].lower()
    auto_approved = False
    if hint:
        for pattern in autonomy.requires_approval:
            if fnmatchcase(hint, pattern):
                return _pause("approval", f'Action requires approval: matches pattern "{pattern}"', factors)
        approving = next((p for p in autonomy.auto_approve if fnmatchcase(hint, p)), None)
        if approving is not None:
            auto_approved = True
            factors.append(f'Action auto-approved: matches pattern "{approving}"')
    # 4. The safety tier of the next action.
    tier = safety_tier(step.risk_score, step.next_action_hint)
    if step.risk_score is not None or tier.danger_patterns:
        factors.append(f"Safety tier {tier.tier}: {tier.reason}")
    if tier.tier == "danger_zone":
        return _pause("danger_zone", f"Danger zone: {tier.reason}. The agent is blocked until its owner verifies.",
                      factors, tier=tier)
    if tier.tier == "verify":
        return _pause("verify", f"Verification required: {tier.reason}", factors, tier=tier)
    if tier.tier == "confirm" and autonomy.risk_tolerance != "aggressive" and not auto_approved:
        return _pause("confirm", f"Confirmation required: {tier.reason}", factors, tier=tier)
    # 5. The agent's risk tolerance.
    if step.risk_score is not None and not auto_approved:
        factors.append(f"Risk tolerance {autonomy.risk_tolerance} (threshold {autonomy.threshold})")
        if step.risk_score > autonomy.threshold:
            return _pause("risk_threshold", f"Risk score {step.risk_score} exceeds {autonomy.risk_tolerance} "
                                            f"threshold ({autonomy.threshold})", factors, tier=tier)
    # 6. Go on.
    remaining = max(0, max_steps - step.step_count - 1) if limited else None
    return Directive(True, "", "continue", tuple(factors), remaining,
                     tier=tier if step.risk_score is not None or tier.danger_patterns else None)


# --- resilience ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Counters:
    """An execution's resilience counters."""

    continuations: int = 0
    retries: int = 0
    consecutive_failures: int = 0
    circuit_open_until: datetime | None = None


def retry_delay(attempt: int, backoff: str) -> int:
    """Seconds to wait before retry number `attempt` (from 1). Reported to the client, never slept."""
    delay = RETRY_BASE_SECONDS * (2 ** (attempt - 1) if backoff == "exponential" else attempt)
    return min(delay, RETRY_MAX_SECONDS)


def _with(directive: Directive, *, action: dict[str, Any], factor: str) -> Directive:
    return replace(directive, resilience_action=action, factors=(*directive.factors, factor))


def resilience_apply(
    directive: Directive, *, step: Step, autonomy: Autonomy, max_steps: int, policy: Resilience,
    counters: Counters, now: datetime,
) -> tuple[Directive, Counters]:
    """What the resilience policy makes of the directive for `step`, and the counters after it.

    Only a pause for the step limit or for a failed step is the policy's to lift, and only when
    the rules after it (approval, safety tier, risk tolerance) would let the agent go on: a
    resilient agent never continues or retries its way past a dangerous next action."""
    open_until = counters.circuit_open_until
    failures = counters.consecutive_failures
    if open_until is not None and now >= open_until:
        open_until, failures = None, 0  # the cool-down is over: the next failure may be retried again
    failures = failures + 1 if step.outcome == "failure" else 0
    after = replace(counters, consecutive_failures=failures, circuit_open_until=open_until)
    if directive.proceed or directive.rule not in RESILIENT_RULES:
        return directive, after

    skipped: frozenset[str] = frozenset()
    current = directive
    continuation: dict[str, Any] | None = None
    if current.rule == "step_limit":
        if policy.on_step_limit_reached == "pause":
            return current, after
        if counters.continuations >= policy.max_continuations:
            return _with(current, action={"action": "pause", "reason": "maxContinuations reached",
                                          "continuationCount": counters.continuations},
                         factor=f"maxContinuations ({policy.max_continuations}) reached"), after
        skipped = frozenset({"step_limit"})
        current = evaluate(step, autonomy, max_steps, skip=skipped)
        continuation = {"action": policy.on_step_limit_reached, "continuationCount": counters.continuations + 1}
        if policy.on_step_limit_reached == "restart":
            continuation["preserveState"] = policy.preserve_state

    retry: dict[str, Any] | None = None
    if current.rule == "failure":
        if policy.on_execution_failure == "pause":
            return current, after
        if open_until is not None:
            wait = max(1, int((open_until - now).total_seconds() + 0.999))
            return _with(current, action={"action": "pause", "reason": "circuit_open", "retryAfterSeconds": wait,
                                          "consecutiveFailures": failures},
                         factor=f"Circuit breaker open: no retry for {wait} s"), after
        if failures > policy.max_retries:
            wait = int(CIRCUIT_COOLDOWN.total_seconds())
            opened = _with(current, action={"action": "circuit_open", "consecutiveFailures": failures,
                                            "retryAfterSeconds": wait},
                           factor=f"{failures} consecutive failures (maxRetries {policy.max_retries}): circuit "
                                  f"breaker opened for {wait} s")
            return opened, replace(after, circuit_open_until=now + CIRCUIT_COOLDOWN)
        skipped = skipped | {"failure"}
        current = evaluate(step, autonomy, max_steps, skip=skipped)
        delay = retry_delay(failures, policy.retry_backoff) if policy.on_execution_failure == "retry" else 0
        retry = {"action": policy.on_execution_failure, "retryCount": failures, "maxRetries": policy.max_retries,
                 "retryAfterSeconds": delay, "backoff": policy.retry_backoff}

    if not current.proceed:
        return replace(current, factors=(*current.factors, "Resilience did not lift the pause: the next action "
                                                           "pauses on its own")), after
    if continuation is not None:
        # The step window starts again after this step.
        current = _with(replace(current, steps_remaining=max(0, max_steps - 1)), action=continuation,
                        factor=f"Step limit reached: resilience {policy.on_step_limit_reached} "
                               f"({continuation['continuationCount']} of {policy.max_continuations})")
        after = replace(after, continuations=continuation["continuationCount"])
    if retry is not None:
        if continuation is not None:
            retry["continuationCount"] = continuation["continuationCount"]
        current = _with(current, action=retry, factor=f"Step failed: resilience {policy.on_execution_failure} "
                                                      f"({failures} of {policy.max_retries})")
        after = replace(after, retries=counters.retries + 1)
    return current, after
