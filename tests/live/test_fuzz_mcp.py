"""Fuzzing every MCP tool through the official SDK client against a live server.

Each tool is called with arguments generated from the inputSchema tools/list reports, and with
arguments that break it: wrong types, unknown keys, missing required keys, odd strings (NUL bytes,
lone surrogates, 100 KB), deep nesting. Whatever comes in, the server answers without an internal
error (JSON-RPC -32603, an internal_error code, a traceback) or a 5xx, and a refused call leaves
every row of the database as it was."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db.models import Max
from hypothesis import given
from hypothesis import strategies as st

from accounts.services import mcp_session_open
from core.caller import Caller
from elements.agents import agent_execute
from elements.collection import collection_refresh
from elements.mcpaql import ROUTES
from elements.services import element_create
from elements.types import ElementType
from integrations.models import Action, Execution, Integration
from integrations.vault import vault_connect
from tests.conftest import make_member
from tests.live.conftest import serve
from tests.live.fuzzing import Answer, Findings, SdkSession, ServerGone, fuzz_settings, table_digests, tables_changed
from workflows.playbooks import playbook_create
from workflows.scoping import Scope
from workflows.services import project_register, workflow_save

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# Examples per tool from its schema, and with broken arguments; the fixed edge cases come on top.
SCHEMA_EXAMPLES = 8
BROKEN_EXAMPLES = 8
AQL_EXAMPLES = 30
# Seconds of a run after which tools get only their fixed cases, not generated ones: a server that
# answers slowly (as one does while it is failing) must not stretch a CI run past a quarter of an
# hour. The whole run takes about 300 s on SQLite and 500 s on PostgreSQL on a quiet 2-core machine.
GENERATED_BUDGET = 720
# DollhouseMCP's discrete tools (/mcp/discrete) run the operations fuzzed through mcp_aql_* above;
# what is their own is the argument layer, so they get every fixed case and fewer generated examples,
# within a budget of their own (about 330 calls, a minute on a quiet 2-core machine).
DISCRETE_EXAMPLES = 2
DISCRETE_BUDGET = 120
# The discrete tools whose every property gets the fixed cases: among them, every kind of parameter.
DISCRETE_FIXED = frozenset({"create_element", "list_elements", "import_element", "dollhouse_config"})
# Examples per catalogue action of capabilities_execute, its input drawn from the action's own schema.
ACTION_EXAMPLES = 3
# The gatekeeper's pending confirmations.
ASKED = frozenset({("elements", "confirmation")})
# The record of executions: an action that ran and failed is recorded, and that is not a refusal.
EXECUTED = frozenset({("integrations", "execution")})
# What capabilities_execute refuses with before anything runs (and so records nothing); input that
# does not fit the schema is refused with `problems` (an executor's own invalid_input comes without).
REFUSED_BEFORE_RUNNING = {"invalid_arguments", "capability_not_found", "rate_limited", "insufficient_scope"}
# Where the imported integrations (GitHub, Slack) send their requests while fuzzed: nothing listens.
CLOSED_PORT_URL = "http://127.0.0.1:9"
ROOT = "/home/alice/shop"
# Calls that would end the fuzzing session itself rather than exercise a tool: auth_logout revokes
# the token (it takes no arguments, so it is fuzzed only with arguments it must refuse).
ENDS_SESSION = {"auth_logout"}
DEEP = 5000
FLOW = {"name": "Seed", "start": "work",
        "nodes": {"work": {"type": "ai_agent", "prompt": "Do it", "transitions": {"done": "end"}},
                  "end": {"type": "end"}}}

# Values the tools know, so generated calls reach past "not found" as well as stopping there.
KNOWN_STRINGS = ["seed", "notes", "flow", ROOT, f"{ROOT}/src", "global", "repo", "persona", "skill", "memory",
                 "template", "agent", "ensemble", "element:seed", "getting-started", "workflows", "index", "run_1", "/",
                 "success",  # an agent step's outcome
                 # The shipped catalogue (sync_catalogue): integration ids, action names, what actions take.
                 "atrium_tools", "http_tools", "webhook_tools", "email_tools", "github_tools", "slack_tools",
                 "atrium_tools.search_docs", "atrium_tools.get_element", "atrium_tools.add_memory_entry",
                 "atrium_tools.start_workflow", "http_tools.request", "webhook_tools.send_webhook",
                 "email_tools.send_email", "github_tools.issues_create", "github_tools.repos_get",
                 "slack_tools.chat_postMessage", "GET", "POST", "http://127.0.0.1:9/", "https://example.com/x",
                 # What permission_prompt is asked about: Claude Code's tools, their inputs, and patterns.
                 "Bash", "Read", "Edit", "command", "file_path", "git status", "make deploy", "rm -rf /",
                 ":(){ :|:& };:", "cat <<EOF\n$(ls)\nEOF", "Bash:git status*", "mcp__atrium__mcp_aql_read"]
ODD_STRINGS = ["", " ", "\x00", "a\x00b", "x" * 100_000, "\u202e\u200b\ufeff", "🙂" * 50, "../../etc/passwd",
               "{{ context.x }}", "${HOME}", "*a", "&a [*a, *a]", "(a+)+$", "[", "null", "true", "-1",
               "%00", "<script>", "'; DROP TABLE x; --", "\r\n\t"]
LONE_SURROGATES = ["\ud800", "a\udfffb"]
ELEMENT_TYPES = ["persona", "skill", "template", "agent", "memory", "ensemble", "personas", "Memory", "nope"]
# A billion laughs: nine aliases of nine, each a reference to the one before.
YAML_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
YAML_ODD = [YAML_BOMB, "[" * DEEP + "]" * DEEP, "a: " + "{a: " * 1000 + "1" + "}" * 1000, "!!python/object:os.system x",
            "name: x\nstart: a\nnodes: {a: {type: end}}\nnodes: {}", "&a [*a]", "{" * 50, "\x00", "---\n...\n---"]


def strings() -> st.SearchStrategy[str]:
    return st.one_of(st.text(max_size=40), st.sampled_from(KNOWN_STRINGS), st.sampled_from(ODD_STRINGS))


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63),
                       st.floats(allow_nan=False, allow_infinity=False), strings())
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(strings(), inner, max_size=4), max_leaves=max_leaves)


def from_json_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values that fit a tool's argument schema. hypothesis-jsonschema does not run on current
    Hypothesis; the tools' schemas (pydantic's) use only the keywords handled here."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    if "anyOf" in schema:
        return st.one_of([from_json_schema(option) for option in schema["anyOf"]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_json_schema({**schema, "type": k}) for k in kind])
    if kind == "string":
        if schema.get("format") == "date-time":
            return st.datetimes().map(lambda d: d.isoformat() + "Z")
        if "pattern" in schema:
            try:
                return st.from_regex(schema["pattern"], fullmatch=True)
            except re.error:
                pass  # a pattern Python's re does not read (RE2 or ECMA-only syntax): any string will do
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if low or high is not None:
            return st.one_of(strings(), st.text(min_size=low, max_size=low + 40)).filter(
                lambda text: low <= len(text) <= (high if high is not None else len(text)))
        return strings()
    if kind in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if kind == "integer":
            return st.integers(min_value=low, max_value=high)
        return st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        low = schema.get("minItems", 0)
        return st.lists(from_json_schema(schema.get("items") or {}), min_size=low,
                        max_size=max(low, min(4, schema.get("maxItems", 4))))
    if kind == "object" and "properties" in schema:
        properties = schema["properties"]
        required = set(schema.get("required") or [])
        return st.fixed_dictionaries(
            {key: from_json_schema(properties[key]) for key in sorted(required)},
            optional={key: from_json_schema(value) for key, value in sorted(properties.items())
                      if key not in required})
    return json_values()  # an open object, or no type at all


def from_tool_schema(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return from_json_schema({**schema, "type": "object", "properties": schema.get("properties") or {}})


@st.composite
def broken(draw: st.DrawFn, schema: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Arguments that violate the schema in one way (sometimes more), and which way."""
    properties = sorted(schema.get("properties") or {})
    required = list(schema.get("required") or [])
    arguments = dict(draw(from_tool_schema(schema))) if properties else {}
    ways = ["unknown key"]
    if properties:
        ways += ["wrong type", "odd string", "nested"]
    if required:
        ways.append("missing required")
    way = draw(st.sampled_from(ways))
    if way == "unknown key":
        key = draw(strings().filter(lambda k: k not in properties))
        arguments[key] = draw(json_values())
    elif way == "wrong type":
        arguments[draw(st.sampled_from(properties))] = draw(json_values())
    elif way == "odd string":
        arguments[draw(st.sampled_from(properties))] = draw(st.sampled_from(ODD_STRINGS))
    elif way == "nested":
        depth = draw(st.integers(min_value=2, max_value=64))
        value: Any = draw(json_values(3))
        for _ in range(depth):
            value = draw(st.sampled_from([[value], {"a": value}]))
        arguments[draw(st.sampled_from(properties))] = value
    else:
        for key in draw(st.lists(st.sampled_from(required), min_size=1, unique=True)):
            arguments.pop(key, None)
    return way, arguments


def fixed_cases(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any] | str]]:
    """The edge cases every property gets, whatever Hypothesis draws: (way, arguments as an object,
    or as JSON text where the SDK cannot carry them)."""
    properties = sorted(schema.get("properties") or {})
    for key in properties:
        yield "NUL byte", {key: "a\x00b"}
        yield "100 KB string", {key: "x" * 100_000}
        yield "lone surrogate", json.dumps({key: LONE_SURROGATES[len(key) % 2]})  # ensure_ascii: \\ud800
    # The JSON of the whole request is parsed before any argument is looked at: once per tool.
    yield f"nested {DEEP} deep", f'{{{json.dumps(properties[0] if properties else "a")}: {"[" * DEEP}{"]" * DEEP}}}'
    yield f"arguments nested {DEEP} deep", '{"a": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}"


def aql_value(kind: str) -> st.SearchStrategy[Any]:
    """A value for an MCP-AQL operation parameter of `kind`, or one of the kinds it must refuse."""
    fitting = {"string": strings(), "number": st.integers(), "integer": st.integers(), "boolean": st.booleans(),
               "array": st.lists(strings(), max_size=3),
               "object": st.dictionaries(strings(), json_values(), max_size=3)}
    odd = st.sampled_from([None, 0, -1, 10**18, 2**64, 1.5, "", "x" * 1_000_000, "(a+)+$", "[", "*", "%", "\x00",
                           [], {}, ["x"] * 200, "not an object", [{"a": 1}], True])
    return st.one_of(fitting.get(kind, json_values()), odd, json_values(4))


@st.composite
def aql_call(draw: st.DrawFn, endpoint: str) -> tuple[str, dict[str, Any]]:
    """An MCP-AQL call to one of the endpoint's operations, its parameters drawn by their declared kind."""
    from elements.mcpaql import ROUTES

    routes = sorted((r for r in ROUTES.values() if r.endpoint.slug == endpoint), key=lambda r: r.name)
    route = draw(st.sampled_from(routes))
    params = {p.name: draw(aql_value(p.type)) for p in route.params
              if draw(st.booleans()) or (p.required and draw(st.booleans()))}
    if draw(st.booleans()):
        params[draw(strings())] = draw(json_values(3))
    call: dict[str, Any] = {"operation": route.name, "params": params}
    if draw(st.booleans()):
        call["element_type"] = draw(st.sampled_from(ELEMENT_TYPES))
    if draw(st.integers(0, 9)) == 0:
        # Copies up to what fits in half the server's body limit: a body past it is refused with
        # 413 before it is read (tests/test_argument_bounds.py covers that), and the client, still
        # sending, sees the connection closed instead of an answer.
        room = settings.ATRIUM_MAX_REQUEST_BYTES // 2 // len(json.dumps(call))
        call = {"operations": [call] * draw(st.integers(1, max(1, min(60, room))))}
    return f"operation {route.name}", call


class Fuzzer:
    def __init__(self, session: SdkSession, *, examples: tuple[int, int] = (SCHEMA_EXAMPLES, BROKEN_EXAMPLES),
                 budget: float = GENERATED_BUDGET, fixed: frozenset[str] | None = None) -> None:
        self.session = session
        self.fixed = fixed  # the tools that get the fixed cases; None: every tool
        self.schema_examples, self.broken_examples = examples
        self.budget = budget
        self.findings = Findings()
        self.calls = 0
        self.gone: ServerGone | None = None
        self.started = time.monotonic()
        self.skipped: list[str] = []

    def probe(self, tool: str, way: str, arguments: dict[str, Any] | str) -> Answer:
        """One call, judged: no internal error, and a refused call changes nothing."""
        if self.gone is not None:
            raise self.gone  # Hypothesis replays a failing example: the server will not answer it now
        before = table_digests()
        last_execution = Execution.objects.aggregate(last=Max("pk"))["last"] or 0
        raw = isinstance(arguments, str)
        try:
            answer = self.session.call_raw(tool, arguments) if raw else self.session.call(tool, arguments)
        except ServerGone as exc:
            self.gone = exc
            raise
        self.calls += 1
        shown = arguments if raw else json.dumps(arguments, ensure_ascii=True)
        failure = answer.failure()
        if failure is not None:
            self.findings.add(tool, way, shown, failure)
        elif answer.refused:
            unexplained = tables_changed(before) - self.asked(answer) - self.ran(tool, answer, last_execution)
            if unexplained:
                self.findings.add(tool, f"{way}, refused, changed the database", shown,
                                  f"{answer.text} (changed: {', '.join('.'.join(t) for t in sorted(unexplained))})")
        return answer

    @staticmethod
    def asked(answer: Answer) -> frozenset[tuple[str, str]]:
        """A gatekeeper refusal that asks for a confirmation records the pending request it asks about."""
        return ASKED if isinstance(answer.payload, dict) and "confirmation" in answer.payload else frozenset()

    @staticmethod
    def ran(tool: str, answer: Answer, last_execution: int) -> frozenset[tuple[str, str]]:
        """An action that ran and failed answers its own error payload (isError) and records exactly
        that: failed action executions with the payload's code. It is not a refusal, so the record of
        executions may change; every other row still may not."""
        payload = answer.payload
        if tool != "capabilities_execute" or not answer.is_error or not isinstance(payload, dict):
            return frozenset()
        code = payload.get("code")
        if not isinstance(code, str) or code in REFUSED_BEFORE_RUNNING or "problems" in payload:
            return frozenset()
        recorded = set(Execution.objects.filter(pk__gt=last_execution).values_list("kind", "status", "error_code"))
        return EXECUTED if recorded == {("action", "failed", code)} else frozenset()

    def within_budget(self) -> bool:
        return time.monotonic() - self.started < self.budget

    def fuzz(self, tool: str, schema: dict[str, Any]) -> None:
        """The fixed cases first, then (while the run's budget lasts) generated arguments."""
        for way, arguments in fixed_cases(schema) if self.fixed is None or tool in self.fixed else ():
            self.probe(tool, way, arguments)
        self.config_texts(tool, schema)
        if not self.within_budget():
            self.skipped.append(tool)
            return
        if tool not in ENDS_SESSION:
            @fuzz_settings(self.schema_examples)
            @given(from_tool_schema(schema))
            def from_its_schema(arguments: dict[str, Any]) -> None:
                self.probe(tool, "schema", arguments)

            from_its_schema()

        @fuzz_settings(self.broken_examples)
        @given(broken(schema))
        def with_broken_arguments(case: tuple[str, dict[str, Any]]) -> None:
            way, arguments = case
            if tool in ENDS_SESSION and not set(arguments) - set(schema.get("properties") or {}):
                arguments = {**arguments, "unknown": 1}
            self.probe(tool, way, arguments)

        with_broken_arguments()
        if tool == "capabilities_execute":
            self.actions(tool)
        if tool.startswith("mcp_aql_"):
            @fuzz_settings(AQL_EXAMPLES)
            @given(aql_call(tool.removeprefix("mcp_aql_")))
            def with_operations(case: tuple[str, dict[str, Any]]) -> None:
                self.probe(tool, *case)

            with_operations()

    def actions(self, tool: str) -> None:
        """Every action of the catalogue executed with input drawn from its own input schema, so calls
        get past the schema check to the executors."""
        for action in Action.objects.select_related("integration").order_by("integration_id", "name"):
            self.action(tool, action.full_name, action.input_schema)

    def action(self, tool: str, name: str, input_schema: dict[str, Any]) -> None:
        @fuzz_settings(ACTION_EXAMPLES)
        @given(from_tool_schema(input_schema))
        def with_its_input(input: dict[str, Any]) -> None:
            self.probe(tool, f"action {name}", {"name": name, "input": input})

        with_its_input()

    def config_texts(self, tool: str, schema: dict[str, Any]) -> None:
        """Odd YAML (alias bombs, deep nesting, tags, duplicate keys) wherever a tool takes YAML text."""
        properties = schema.get("properties") or {}
        for key in ("config", "raw_model_output", "result", "response"):
            if key in properties:
                scope = {"global": True} if "global" in properties else {}
                for text in YAML_ODD:
                    arguments = {**scope, key: text}
                    if tool == "create_workflow" or tool == "update_workflow":
                        arguments["id"] = "seed"
                    if tool == "finalize_skill_conversion":
                        arguments.update(skill_path="element:seed", target_source="global")
                    self.probe(tool, "YAML text", arguments)


def seed(member) -> None:
    call_command("sync_catalogue", stdout=StringIO())
    # A curator's base URL is kept by later syncs; here it keeps every request on loopback.
    Integration.objects.filter(kind=Integration.Kind.OPENAPI).update(base_url=CLOSED_PORT_URL)
    caller = Caller.trusted(member.user, via="command")
    # Connected, so that executing their actions gets as far as their executors.
    vault_connect(caller=caller, integration_id="webhook_tools", credentials={"secret": "seed-secret"})
    vault_connect(caller=caller, integration_id="github_tools", credentials={"token": "seed-token"})
    vault_connect(caller=caller, integration_id="email_tools", confirmed=True)
    project = project_register(caller=caller, path=ROOT, project_id="acme/shop")
    workflow_save(caller=caller, scope=Scope(owner=member.user, project=None), workflow_id="seed", source="global",
                  config=FLOW, overwrite=False)
    workflow_save(caller=caller, scope=Scope(owner=member.user, project=project), workflow_id="flow", source="repo",
                  config=FLOW, overwrite=False)
    element_create(caller=caller, element_type=ElementType.PERSONA, name="seed",
                   params={"description": "A seed", "instructions": "You ARE a seed."})
    element_create(caller=caller, element_type=ElementType.MEMORY, name="notes", params={"description": "Notes"})
    # An agent with an execution in progress (its goalId made when it is), so the lifecycle operations
    # reach past "not found" too.
    agent = element_create(caller=caller, element_type=ElementType.AGENT, name="seed", params={
        "description": "A seed agent", "goal": {"template": "Seed {thing}", "parameters": [
            {"name": "thing", "type": "string", "required": True}]}})
    # The collection as a server holds it after its first use: loading it is not a refused call's doing.
    collection_refresh()
    session = mcp_session_open(caller=caller, transport="http")
    started = agent_execute(caller=caller.with_session(session), agent=agent, parameters={"thing": "it"})
    KNOWN_STRINGS.append(started.execution.pk)
    # A playbook (its id is made when it is), so generated calls reach it as well as "not found".
    playbook = playbook_create(caller=caller, name="Seed", plan={"steps": [
        {"id": "note", "title": "Note it", "kind": "capability", "capability": "atrium_tools.add_memory_entry",
         "input": {"memory": "notes", "content": "{{ context.text || \"seed\" }}"}},
        {"id": "reply", "title": "Reply", "kind": "ai", "prompt": "Say {{ note.entryId }}"}]})
    KNOWN_STRINGS.append(playbook.pk)


@pytest.fixture
def fuzzed_server(transactional_db, tmp_path):
    """A hosted server without the per-token call limit, the capability execution limit or the
    permission_prompt limit: the fuzzer makes thousands of calls with one token, and the limits are
    tested on their own (tests/live/test_live_limits.py, tests/test_capability_execute.py,
    tests/test_cli_permissions.py). Its actions and GitHub sign-in reach no host but loopback, and mail
    goes to its log."""
    with serve(tmp_path, CELERY_BROKER_URL="", ATRIUM_TOOL_CALLS_PER_MINUTE="0",
               ATRIUM_CAPABILITY_EXECUTIONS_PER_MINUTE="0", ATRIUM_PERMISSION_PROMPTS_PER_MINUTE="0",
               ATRIUM_HTTP_ALLOWED_HOSTS="", EMAIL_HOST="", ATRIUM_GITHUB_URL="http://127.0.0.1:9",
               ATRIUM_GITHUB_API_URL="http://127.0.0.1:9") as server:
        yield server


# Bounded by the examples per tool (operation), not by time; this only stops a server that hangs.
@pytest.mark.timeout(1200)
def test_no_tool_fails_inside_or_changes_anything_when_it_refuses(fuzzed_server):
    call_command("import_docs", verbosity=0)
    alice = make_member("alice")
    seed(alice)
    session = SdkSession(fuzzed_server.mcp_url, alice.token)
    fuzzer = Fuzzer(session)
    tools = fuzz_every_tool(fuzzer, session)
    assert set(tools) >= {"list_workflows", "mcp_aql_read", "search_docs", "start_workflow", "capabilities_execute",
                          "vault", "permission_prompt"}
    # Executing capabilities got past the input check to the executors: actions ran, and failed.
    assert {"succeeded", "failed"} <= set(Execution.objects.values_list("status", flat=True))
    assert not fuzzer.skipped, f"out of time before generating arguments for {fuzzer.skipped}"
    assert fuzzer.calls > len(tools) * (SCHEMA_EXAMPLES + BROKEN_EXAMPLES) // 2


@pytest.mark.timeout(600)
def test_no_discrete_tool_fails_inside_or_changes_anything_when_it_refuses(fuzzed_server):
    alice = make_member("alice")
    seed(alice)
    session = SdkSession(f"{fuzzed_server.url}/mcp/discrete", alice.token)
    fuzzer = Fuzzer(session, examples=(DISCRETE_EXAMPLES, DISCRETE_EXAMPLES), budget=DISCRETE_BUDGET,
                    fixed=DISCRETE_FIXED)
    tools = fuzz_every_tool(fuzzer, session)
    assert set(tools) == set(ROUTES)
    assert not fuzzer.skipped, f"out of time before generating arguments for {fuzzer.skipped}"
    assert fuzzer.calls > len(tools) * DISCRETE_EXAMPLES


def fuzz_every_tool(fuzzer: Fuzzer, session: SdkSession) -> dict[str, dict[str, Any]]:
    """Every tool the session lists fuzzed, then the protocol layer; fails on any finding. The tools'
    schemas, by name."""
    try:
        tools = {t.name: t.inputSchema for t in session.tools}
        try:
            for name in sorted(tools):
                fuzzer.fuzz(name, tools[name])
        except ServerGone as exc:
            fuzzer.findings.add(name, "the server stopped answering", "(after the calls above)", str(exc))
        # The protocol layer itself: JSON nested deeper than any parser should walk.
        deep = '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ' + "[" * DEEP + "]" * DEEP + "}"
        answer = session.post_raw(deep)
        if answer.failure() is not None:
            fuzzer.findings.add("(tools/call params)", f"params nested {DEEP} deep", deep, answer.failure() or "")
    finally:
        session.close()
    if fuzzer.findings.found:
        skipped = f"\n(generated arguments skipped, out of time: {', '.join(fuzzer.skipped)})" if fuzzer.skipped else ""
        pytest.fail(f"{len(fuzzer.findings.found)} distinct failure(s):\n{fuzzer.findings.report()}{skipped}",
                    pytrace=False)
    return tools
