"""Schemathesis over the OpenAPI schema the server serves, against a live server.

Every operation is called with requests generated from the schema (and with requests that break
it). The server never answers 5xx, every answer is one the schema documents (status, content type,
body), a request the schema allows is not refused as malformed, and a refused request leaves every
row of the database as it was."""

from __future__ import annotations

import http.cookiejar
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from django.core.management import call_command
from hypothesis import given
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Err
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import make_member
from tests.live.fuzzing import Findings, database_checksum, fuzz_settings
from tests.live.test_fuzz_mcp import seed

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

EXAMPLES = {GenerationMode.POSITIVE: 10, GenerationMode.NEGATIVE: 6}
CHECKS = {
    GenerationMode.POSITIVE: [not_a_server_error, status_code_conformance, content_type_conformance,
                              response_schema_conformance, positive_data_acceptance],
    GenerationMode.NEGATIVE: [not_a_server_error, status_code_conformance, content_type_conformance,
                              response_schema_conformance],
}
# Refusals of schema-valid requests for rules OpenAPI cannot state: what a workflow definition or an
# element export package must hold (free-form objects or text), what each element type needs, which
# names pass for another (invisible characters), which paths are registered project roots or system
# areas, two query parameters that exclude each other (page with offset; source=repo with
# global=true), a search query that holds no words or too many terms, an expiry already past when the
# request arrives, and a skill's source that does not compile, schemas that are not JSON Schema, or
# integrations that do not exist; a playbook's plan and trigger specs (free-form objects with rules
# of their own), a capability a plan names that does not exist, and input that a user-written input
# card refuses (invalid_input with `problems`, the card's own verdict); and a list's cursor that this
# server did not give for that listing (signed and opaque).
UNSTATABLE = {"invalid_config", "integrity_error", "invalid_yaml", "invalid_package", "content_required",
              "instructions_required",
              "ensemble_members_required", "invalid_name", "NOT_FOUND", "PROTECTED_PATH", "invalid_pagination",
              "no_repo_source", "query_required", "too_many_terms", "expiry_in_past", "invalid_source",
              "invalid_schema", "integration_not_found", "invalid_plan", "invalid_trigger", "capability_not_found",
              "invalid_cursor"}
# A NUL character (which PostgreSQL text cannot hold) is refused anywhere in a body (invalid_input
# naming where). The schema says so of every string it declares; it cannot of a mapping key (OpenAPI
# 3.0 has no propertyNames) nor of text inside a free-form object or an undeclared property, so a
# refusal of a NUL there is tolerated, and one in a declared string field is a finding.
NUL_PROBLEM = "contains a NUL character (\\u0000), which text may not hold."
# Tokens are revoked by one of the operations under test: fuzzing it with the suite's own token would
# end the run. It is called with a token of its own instead.
REVOKES_THE_TOKEN = ("DELETE", "/api/tokens/{token_id}")


def refusal_code(response: requests.Response | None) -> str | None:
    try:
        return response.json().get("code") if response is not None else None
    except (ValueError, AttributeError):
        return None


def card_refused(response: requests.Response | None) -> bool:
    """Input that a playbook's own input card refused: the card is user data the schema cannot state."""
    try:
        answer = response.json() if response is not None else None
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("code") == "invalid_input" and "problems" in answer


def resolved(schema: dict, node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def declares_text(schema: dict, node: Any, where: str) -> bool:
    """Whether the body schema `node` declares the string at `where` (`a.b[2].c`, as the server names
    fields; keys may themselves hold dots): declared properties and list items all the way down."""
    node = resolved(schema, node)
    if not where:
        return isinstance(node, dict) and node.get("type") == "string"
    if not isinstance(node, dict):
        return False
    options = [resolved(schema, o) for key in ("oneOf", "anyOf", "allOf") for o in node.get(key, [])]
    if any(declares_text(schema, option, where) for option in options):
        return True
    if where.startswith("[") and "]" in where and node.get("type") == "array":
        rest = where[where.index("]") + 1:]
        return declares_text(schema, node.get("items"), rest[1:] if rest.startswith(".") else rest)
    for name, child in node.get("properties", {}).items():
        if where == name or where.startswith((f"{name}.", f"{name}[")):
            rest = where[len(name):]
            if declares_text(schema, child, rest[1:] if rest.startswith(".") else rest):
                return True
    return False


def nul_where_the_schema_cannot_say(response: requests.Response | None, schema: dict,
                                    operation: schemathesis.APIOperation) -> bool:
    """The refusal is of NUL characters only, each in a key or in text the body schema does not declare."""
    try:
        answer = response.json() if response is not None else None
    except ValueError:
        return False
    if not isinstance(answer, dict) or answer.get("code") != "invalid_input" or not answer.get("fields"):
        return False
    body = schema["paths"][operation.path][operation.method.lower()].get("requestBody", {})
    declared = body.get("content", {}).get("application/json", {}).get("schema")
    for where, problems in answer["fields"].items():
        if not all(isinstance(p, str) and p.endswith(NUL_PROBLEM) for p in problems):
            return False
        if " key " not in where and declared is not None and declares_text(schema, declared, where):
            return False
        if declared is None and " key " not in where:
            return False
    return True


# Bounded by the examples per tool (operation), not by time; this only stops a server that hangs.
@pytest.mark.timeout(900)
def test_the_rest_api_answers_as_its_openapi_schema_says(live_atrium):
    call_command("import_docs", verbosity=0)
    alice = make_member("alice")
    seed(alice)
    schema_url = f"{live_atrium.url}/api/schema/"
    served = httpx.get(schema_url, headers={"Accept": "application/json"})
    assert served.status_code == 200
    openapi = served.json()
    schema = schemathesis.openapi.from_url(schema_url, headers={"Accept": "application/json"})
    auth = {"Authorization": f"Bearer {alice.token}"}
    findings = Findings()
    session = requests.Session()
    # Every request carries the credential its case says, and no cookie an earlier answer set.
    session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))

    def fuzz(operation: schemathesis.APIOperation, mode: GenerationMode, headers: dict[str, str]) -> None:
        @fuzz_settings(EXAMPLES[mode])
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case: schemathesis.Case) -> None:
            before = database_checksum()
            response = None
            try:
                response = case.call(base_url=live_atrium.url, session=session, headers=headers, timeout=60)
                case.validate_response(response, checks=CHECKS[mode], headers=headers)
            except FailureGroup as group:
                answered = f"\n[{response.status_code}] {response.text[:300]}" if response is not None else ""
                code = refusal_code(response)
                for failure in group.exceptions:
                    if failure.code == "ST202" and (code in UNSTATABLE or card_refused(response) or
                                                    nul_where_the_schema_cannot_say(response, openapi, operation)):
                        continue
                    status = response.status_code if response is not None else None
                    findings.add(operation.label, f"{mode.value}: {failure.title}", case.as_curl_command(),
                                 answered + "\n" + failure.message, kind=f"{operation.label} {status} {code}")
            except requests.RequestException as exc:
                findings.add(operation.label, f"{mode.value}: no answer", case.as_curl_command(), repr(exc))
            if response is not None and response.status_code >= 400 and database_checksum() != before:
                findings.add(operation.label, f"{mode.value}: refused, changed the database",
                             case.as_curl_command(), f"{response.status_code} {response.text}")

        try:
            check()
        except Unsatisfiable:
            # An operation without inputs has no request that breaks its schema.
            assert mode is GenerationMode.NEGATIVE, operation.label

    operations = 0
    for result in schema.get_all_operations():
        operations += 1
        if isinstance(result, Err):
            findings.add("(schema)", "an operation that cannot be loaded", "", str(result.err()))
            continue
        operation = result.ok()
        headers = auth
        if (operation.method.upper(), operation.path) == REVOKES_THE_TOKEN:
            headers = {"Authorization": f"Bearer {make_member(f'bot{operations}').token}"}
        for mode in EXAMPLES:
            fuzz(operation, mode, headers)

    assert operations > 40
    if findings.found:
        pytest.fail(f"{len(findings.found)} distinct disagreement(s):\n{findings.report()}", pytrace=False)
