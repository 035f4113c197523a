"""The gatekeeper: whether an MCP-AQL operation runs, needs a confirmation, or is denied.

`decide` is a pure function of the operation's route, the policies of the session's active
elements and the session's confirmations, so every rule can be tested on its own. Order:
deny > scope restriction > confirm > allow > the route's default level. Patterns are globs
(`read_*`, `*_element`), as the original's documentation promises.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from fnmatch import fnmatchcase

from core.errors import InvalidInput


class Level(IntEnum):
    # Ordered by strictness, so max() picks the stricter of two levels.
    AUTO_APPROVE = 0
    CONFIRM_SESSION = 1
    CONFIRM_SINGLE_USE = 2
    DENY = 3

    @property
    def confirmation(self) -> str | None:
        return {Level.CONFIRM_SESSION: "session", Level.CONFIRM_SINGLE_USE: "single_use"}.get(self)


@dataclass(frozen=True)
class ExternalRestrictions:
    """An element's rules for its client's own tools (Claude Code's Bash, Edit, Read...), which
    permission_prompt applies (elements.cli_permissions). Patterns target `ToolName` or
    `Tool:<argument>`, e.g. `Bash:git status*` or `Edit:/etc/*`."""

    description: str = ""
    allow: tuple[str, ...] = ()
    confirm: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    # approvalPolicy: requests that need a person even when no confirm pattern matches them
    # (patterns, or "moderate" for every request classified so), and how long such a request waits.
    require_approval: tuple[str, ...] = ()
    ttl_seconds: int | None = None


@dataclass(frozen=True)
class Policy:
    """The gatekeeper section of one active element."""

    element_type: str
    element_name: str
    allow: tuple[str, ...] = ()
    confirm: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    allowed_types: tuple[str, ...] = ()
    blocked_types: tuple[str, ...] = ()
    external: ExternalRestrictions | None = None

    @property
    def source(self) -> str:
        return f'{self.element_type} "{self.element_name}"'


@dataclass(frozen=True)
class Held:
    """A confirmation the session holds."""

    operation: str
    element_type: str  # "" covers every type
    level: str  # "session" or "single_use"


@dataclass(frozen=True)
class Decision:
    level: Level
    reason: str
    source: str | None = None  # the element whose policy decided, if one did
    satisfied_by: Held | None = None  # the confirmation that lets the call through

    @property
    def allowed(self) -> bool:
        return self.level is Level.AUTO_APPROVE or self.satisfied_by is not None


POLICY_CHANGE = "Creating or changing a gatekeeper policy needs an explicit confirmation every time."
SETTINGS_CHANGE = ("Changing your settings (auto-confirm is one of them) needs an explicit confirmation every "
                   "time.")

# Operations that touch no element, so a type restriction has nothing to restrict.
TYPELESS_OPERATIONS = frozenset({"introspect", "get_build_info", "dollhouse_config", "query_logs",
                                 "convert_skill_format", "confirm_operation", "deactivate_element"})


def matches(operation: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(operation, p) for p in patterns)


def policy_level(
    *, operation: str, element_type: str | None, default: Level, can_be_elevated: bool, policies: list[Policy]
) -> tuple[Level, str, str | None]:
    """The level the operation needs before confirmations: (level, reason, deciding element)."""
    for policy in policies:
        if matches(operation, policy.deny):
            reason = f'Operation "{operation}" is blocked by active {policy.source}\'s deny policy.'
            return Level.DENY, reason, policy.source
    for policy in policies:
        if not (policy.allowed_types or policy.blocked_types):
            continue
        if element_type is None and operation not in TYPELESS_OPERATIONS:
            # Without a type the operation could reach any type, so a restricted session must name one.
            reason = (f'Active {policy.source} restricts which element types may be used: pass element_type to '
                      f'"{operation}".')
            return Level.DENY, reason, policy.source
        blocked = element_type in policy.blocked_types
        if element_type and (blocked or (policy.allowed_types and element_type not in policy.allowed_types)):
            reason = (f'Operation "{operation}" on {element_type} elements is outside the scope allowed by '
                      f"active {policy.source}.")
            return Level.DENY, reason, policy.source
    confirming = [p for p in policies if matches(operation, p.confirm)]
    if confirming:
        level = max(default, Level.CONFIRM_SESSION)
        return level, f'Active {confirming[0].source} asks for confirmation of "{operation}".', confirming[0].source
    if can_be_elevated:
        for policy in policies:
            if matches(operation, policy.allow):
                return Level.AUTO_APPROVE, f'Allowed by active {policy.source}.', policy.source
    return default, "", None


def decide(
    *,
    operation: str,
    element_type: str | None,
    default: Level,
    can_be_elevated: bool,
    policies: list[Policy],
    held: list[Held],
    explicit: str = "",
    auto_confirm: bool = False,
) -> Decision:
    """Decide one call. `explicit`: why the call changes who may do what (a gatekeeper policy, the
    user's settings), or "": when given, only a single-use confirmation made for it counts,
    whatever session confirmations or allow policies say. `auto_confirm`: the user's setting to let
    their host's own approval stand in for confirmations (never for explicit ones or for operations
    that cannot be elevated)."""
    level, reason, source = policy_level(operation=operation, element_type=element_type, default=default,
                                         can_be_elevated=can_be_elevated, policies=policies)
    if level is Level.DENY:
        return Decision(level, reason, source)
    if explicit:
        level = Level.CONFIRM_SINGLE_USE
        reason = explicit
    if level is Level.AUTO_APPROVE:
        return Decision(level, reason or "Read operations are approved automatically.", source)
    for confirmation in held:
        if confirmation.operation != operation or confirmation.element_type not in ("", element_type or ""):
            continue
        if level is Level.CONFIRM_SINGLE_USE and confirmation.level != "single_use":
            continue
        return Decision(level, reason, source, satisfied_by=confirmation)
    sandbox = next((p for p in policies if matches("confirm_operation", p.deny)), None)
    if sandbox is not None:
        # Nothing can be confirmed in a sandboxed session, so a call that needs it is refused.
        return Decision(Level.DENY, f'Operation "{operation}" needs a confirmation, and active {sandbox.source} '
                                    "has sandboxed this session: nothing can be confirmed.", sandbox.source)
    if auto_confirm and can_be_elevated and not explicit:
        return Decision(Level.AUTO_APPROVE, "Approved by your auto-confirm setting.", None)
    return Decision(level, reason, source)


def _strings(value: object) -> tuple[str, ...]:
    return tuple(item for item in value if isinstance(item, str) and item) if isinstance(value, list) else ()


def _external_from(value: object) -> ExternalRestrictions | None:
    # Read defensively: sections stored before clean_policy checked their lists are still read.
    if not isinstance(value, dict):
        return None
    approval = value.get("approvalPolicy") if isinstance(value.get("approvalPolicy"), dict) else {}
    ttl = approval.get("ttlSeconds")
    return ExternalRestrictions(
        description=value["description"] if isinstance(value.get("description"), str) else "",
        allow=_strings(value.get("allowPatterns")), confirm=_strings(value.get("confirmPatterns")),
        deny=_strings(value.get("denyPatterns")), require_approval=_strings(approval.get("requireApproval")),
        ttl_seconds=ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None,
    )


def policy_from(element_type: str, element_name: str, gatekeeper: dict | None) -> Policy | None:
    """The Policy of an element's stored gatekeeper section, or None if it has none."""
    if not gatekeeper:
        return None
    scope = gatekeeper.get("scopeRestrictions") or {}
    return Policy(
        element_type=element_type, element_name=element_name,
        allow=tuple(gatekeeper.get("allow") or ()), confirm=tuple(gatekeeper.get("confirm") or ()),
        deny=tuple(gatekeeper.get("deny") or ()),
        allowed_types=tuple(scope.get("allowedTypes") or ()), blocked_types=tuple(scope.get("blockedTypes") or ()),
        external=_external_from(gatekeeper.get("externalRestrictions")),
    )


def policy_from_tools(element_name: str, tools: object) -> Policy | None:
    """An agent's `tools {allowed, denied}` as its policy, for an agent with no gatekeeper section
    of its own (the original's AgentToolPolicyTranslator): allowed operations are approved, denied
    ones refused. Names and globs, as in any policy."""
    if not isinstance(tools, dict):
        return None

    def patterns(key: str) -> tuple[str, ...]:
        value = tools.get(key)
        return tuple(p for p in value if isinstance(p, str) and p) if isinstance(value, list) else ()

    allow, deny = patterns("allowed"), patterns("denied")
    if not allow and not deny:
        return None
    return Policy(element_type="agent", element_name=element_name, allow=allow, deny=deny)


POLICY_LISTS = ("allow", "confirm", "deny")
EXTERNAL_LISTS = ("allowPatterns", "confirmPatterns", "denyPatterns")
EXTERNAL_KEYS = {"description", *EXTERNAL_LISTS, "approvalPolicy"}
APPROVAL_POLICY_KEYS = {"requireApproval", "ttlSeconds"}
# A Bash pattern quotes a command, so it may be longer than an operation name; a list stays short
# enough that matching every pattern against every part of a command stays cheap.
MAX_EXTERNAL_PATTERN = 500
MAX_EXTERNAL_PATTERNS = 100
MAX_EXTERNAL_DESCRIPTION = 1000


def _external_patterns(value: object, where: str) -> list[str]:
    if (not isinstance(value, list) or len(value) > MAX_EXTERNAL_PATTERNS
            or not all(isinstance(p, str) and 0 < len(p.strip()) <= MAX_EXTERNAL_PATTERN for p in value)):
        raise InvalidInput(f"gatekeeper.externalRestrictions.{where} must be a list of at most "
                           f"{MAX_EXTERNAL_PATTERNS} patterns of 1 to {MAX_EXTERNAL_PATTERN} characters, such as "
                           "'Bash:git status*', 'Edit:/etc/*' or 'WebFetch'.", code="invalid_gatekeeper")
    return list(dict.fromkeys(p.strip() for p in value))


def _clean_external(external: object) -> dict:
    from elements.approvals import MAX_TTL_SECONDS, MIN_TTL_SECONDS

    if not isinstance(external, dict) or set(external) - EXTERNAL_KEYS:
        raise InvalidInput("gatekeeper.externalRestrictions takes description, allowPatterns, confirmPatterns, "
                           "denyPatterns and approvalPolicy.", code="invalid_gatekeeper")
    cleaned: dict = {}
    if "description" in external:
        description = external["description"]
        if not isinstance(description, str) or len(description) > MAX_EXTERNAL_DESCRIPTION:
            raise InvalidInput(f"gatekeeper.externalRestrictions.description must be text of at most "
                               f"{MAX_EXTERNAL_DESCRIPTION} characters.", code="invalid_gatekeeper")
        cleaned["description"] = description
    for key in EXTERNAL_LISTS:
        if key in external:
            cleaned[key] = _external_patterns(external[key], key)
    if "approvalPolicy" in external:
        approval = external["approvalPolicy"]
        if not isinstance(approval, dict) or set(approval) - APPROVAL_POLICY_KEYS:
            raise InvalidInput("gatekeeper.externalRestrictions.approvalPolicy takes requireApproval (patterns, or "
                               "'moderate' for every moderate request) and ttlSeconds.", code="invalid_gatekeeper")
        policy: dict = {}
        if "requireApproval" in approval:
            policy["requireApproval"] = _external_patterns(approval["requireApproval"],
                                                           "approvalPolicy.requireApproval")
        if "ttlSeconds" in approval:
            ttl = approval["ttlSeconds"]
            if isinstance(ttl, bool) or not isinstance(ttl, int) or not MIN_TTL_SECONDS <= ttl <= MAX_TTL_SECONDS:
                raise InvalidInput(f"gatekeeper.externalRestrictions.approvalPolicy.ttlSeconds must be a whole "
                                   f"number of seconds from {MIN_TTL_SECONDS} to {MAX_TTL_SECONDS}.",
                                   code="invalid_gatekeeper")
            policy["ttlSeconds"] = ttl
        cleaned["approvalPolicy"] = policy
    return cleaned


def clean_policy(value: object) -> dict | None:
    """Validate a gatekeeper section from a client; None or {} means no policy."""
    if value in (None, {}):
        return None
    if not isinstance(value, dict):
        raise InvalidInput("gatekeeper must be an object with allow, confirm, deny, scopeRestrictions "
                           "or externalRestrictions.", code="invalid_gatekeeper")
    unknown = set(value) - {*POLICY_LISTS, "scopeRestrictions", "externalRestrictions"}
    if unknown:
        raise InvalidInput(f"Unknown gatekeeper key(s): {', '.join(sorted(unknown))}. Allowed: allow, confirm, deny, "
                           "scopeRestrictions, externalRestrictions.", code="invalid_gatekeeper")
    cleaned: dict = {}
    for key in POLICY_LISTS:
        if key in value:
            patterns = value[key]
            if not isinstance(patterns, list) or not all(isinstance(p, str) and 0 < len(p) <= 100 for p in patterns):
                raise InvalidInput(f"gatekeeper.{key} must be a list of operation names or globs such as 'read_*'.",
                                   code="invalid_gatekeeper")
            cleaned[key] = list(dict.fromkeys(p.strip() for p in patterns))
    if "scopeRestrictions" in value:
        scope = value["scopeRestrictions"]
        if not isinstance(scope, dict) or set(scope) - {"allowedTypes", "blockedTypes"}:
            raise InvalidInput("gatekeeper.scopeRestrictions takes allowedTypes and blockedTypes lists.",
                               code="invalid_gatekeeper")
        from elements.types import element_type_parse

        cleaned["scopeRestrictions"] = {
            key: [element_type_parse(t).value for t in scope[key]] for key in scope if isinstance(scope[key], list)
        }
    if "externalRestrictions" in value:
        cleaned["externalRestrictions"] = _clean_external(value["externalRestrictions"])
    return cleaned or None
