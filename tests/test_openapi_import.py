"""OpenAPI documents imported as integrations, and their operations run by openapi.operation."""

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from jsonschema import Draft202012Validator

from core.caller import Caller
from core.errors import InvalidInput
from integrations.catalogue import SHIPPED_DOCUMENTS, shipped_documents
from integrations.executors import ActionFailed
from integrations.models import Action, Capability, Integration
from integrations.openapi import MAX_DOCUMENT_BYTES, MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, integration_import
from integrations.search import capabilities_search
from tests.actions import Reply, json_reply, run_action

GITHUB_ACTIONS = {
    "repos_get", "repos_list_for_authenticated_user", "issues_list_for_repo", "issues_get", "issues_create",
    "issues_update", "issues_list_comments", "issues_create_comment", "pulls_list", "pulls_get", "pulls_create",
    "repos_get_content", "repos_list_commits", "search_repos", "search_issues_and_pull_requests",
}
SLACK_ACTIONS = {
    "chat_postMessage", "chat_update", "chat_delete", "conversations_list", "conversations_history",
    "conversations_info", "conversations_create", "users_list", "users_info", "reactions_add", "search_messages",
}
ISSUE = {"id": 1, "number": 7, "title": "Crash on start", "state": "open", "html_url": "https://github.com/o/r/issues/7",
         "body": None, "user": {"login": "octocat", "id": 1}, "labels": ["bug", {"id": 2, "name": "ui"}],
         "milestone": None, "assignees": []}


@pytest.fixture
def caller(alice):
    return Caller.trusted(alice.user, via="mcp")


def shipped(name: str) -> bytes:
    return (SHIPPED_DOCUMENTS / name).read_bytes()


def action(integration_id: str, name: str) -> Action:
    return Action.objects.select_related("integration").get(integration_id=integration_id, name=name)


def document(paths: dict, **top) -> str:
    """A small OpenAPI 3.1 document, as JSON."""
    return json.dumps({"openapi": "3.1.0", "info": {"title": "Tiny API"}, "servers": [{"url": "https://tiny.test"}],
                       "paths": paths, **top})


def get(operation_id: str, **extra) -> dict:
    return {"get": {"operationId": operation_id, "responses": {"200": {"description": "ok"}}, **extra}}


def refused(**kwargs) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        integration_import(source="test.json", **kwargs)
    return info.value


# The shipped documents


def test_two_documents_are_shipped():
    assert [path.name for path in shipped_documents()] == ["github.yaml", "slack.yaml"]


def test_the_github_document_imports_as_github_tools(db):
    report = integration_import(document=shipped("github.yaml"), source="github.yaml")
    assert (report.integration_id, report.integration_created, report.skipped) == ("github_tools", True, [])
    assert set(report.created) == GITHUB_ACTIONS
    integration = Integration.objects.get(pk="github_tools")
    assert (integration.name, integration.category, integration.kind) == ("GitHub", "development", "openapi")
    assert (integration.auth_scheme, integration.auth_config) == ("bearer", {})
    assert integration.base_url == "https://api.github.com"
    assert integration.connection_required is True and integration.first_party is False
    assert "owner" in integration.agent_instructions
    assert integration.source_document == shipped("github.yaml").decode()
    assert set(integration.actions.values_list("name", flat=True)) == GITHUB_ACTIONS
    for row in integration.actions.all():
        assert row.executor == "openapi.operation"
        assert len(row.description) > 60, row.name
        Draft202012Validator.check_schema(row.input_schema)
        Draft202012Validator.check_schema(row.output_schema)
    content = integration.actions.get(name="repos_get_content")
    assert content.config == {"method": "GET", "path": "/repos/{owner}/{repo}/contents/{path}", "hasBody": False,
                              "parameters": [{"name": "owner", "in": "path"}, {"name": "repo", "in": "path"},
                                             {"name": "path", "in": "path", "allowReserved": True},
                                             {"name": "ref", "in": "query"}]}
    assert content.input_schema["required"] == ["owner", "repo", "path"]
    create = integration.actions.get(name="issues_create")
    assert create.input_schema["properties"]["body"]["required"] == ["title"]
    assert create.input_schema["properties"]["owner"]["description"].startswith("The account owner")
    assert create.description.startswith("Create an issue\n\nOpen a new issue")


def test_the_slack_document_imports_as_slack_tools_with_oauth(db):
    report = integration_import(document=shipped("slack.yaml"), source="slack.yaml")
    assert set(report.created) == SLACK_ACTIONS
    integration = Integration.objects.get(pk="slack_tools")
    assert (integration.name, integration.category, integration.auth_scheme) == ("Slack", "communication", "oauth2")
    assert integration.base_url == "https://slack.com/api"
    config = integration.auth_config
    assert config["authorizationUrl"] == "https://slack.com/oauth/v2/authorize"
    assert config["tokenUrl"] == "https://slack.com/api/oauth.v2.access"
    assert {"chat:write", "channels:read", "channels:history", "users:read", "reactions:write"} <= set(config["scopes"])
    post = integration.actions.get(name="chat_postMessage")
    assert post.config["path"] == "/chat.postMessage" and post.config["hasBody"] is True
    assert post.input_schema["properties"]["body"]["required"] == ["channel"]


def test_github_operations_are_sent_with_path_query_body_and_the_bearer_token(db, fake_server, settings, caller):
    settings.ATRIUM_HTTP_ALLOWED_HOSTS = []  # the base URL's host needs no listing
    integration_import(document=shipped("github.yaml"), source="github.yaml", server_url=fake_server.url + "/")
    token = {"token": "ghp_secret"}
    fake_server.route("GET", "/repos/octo/hello/issues/7", json_reply(ISSUE))
    issue = run_action(action("github_tools", "issues_get"), {"owner": "octo", "repo": "hello", "issue_number": 7},
                       token, caller=caller)
    assert issue["title"] == "Crash on start"
    sent = fake_server.last()
    assert sent.headers["authorization"] == "Bearer ghp_secret"
    assert sent.headers["accept"] == "application/json"

    fake_server.route("GET", "/repos/octo/hello/issues", json_reply([ISSUE]))
    run_action(action("github_tools", "issues_list_for_repo"),
               {"owner": "octo", "repo": "hello", "state": "closed", "labels": "bug,ui", "per_page": 5}, token,
               caller=caller)
    assert fake_server.last().query == {"state": ["closed"], "labels": ["bug,ui"], "per_page": ["5"]}

    fake_server.route("POST", "/repos/octo/hello/issues", json_reply({**ISSUE, "number": 8}, status=201))
    created = run_action(action("github_tools", "issues_create"),
                         {"owner": "octo", "repo": "hello", "body": {"title": "New", "labels": ["bug"]}}, token,
                         caller=caller)
    assert created["number"] == 8
    sent = fake_server.last()
    assert (sent.method, sent.json(), sent.headers["content-type"]) == ("POST", {"title": "New", "labels": ["bug"]},
                                                                        "application/json")

    fake_server.route("GET", "/search/repositories", json_reply({"total_count": 0, "incomplete_results": False,
                                                                 "items": []}))
    run_action(action("github_tools", "search_repos"), {"q": "topic:mcp stars:>10", "sort": "stars"}, token,
               caller=caller)
    assert fake_server.last().query == {"q": ["topic:mcp stars:>10"], "sort": ["stars"]}


def test_path_parameters_are_quoted_into_the_path(db, fake_server, caller):
    integration_import(document=shipped("github.yaml"), source="github.yaml", server_url=fake_server.url)
    file = {"type": "file", "name": "a b.md", "path": "docs/a b.md", "sha": "abc", "content": "aGk=",
            "encoding": "base64"}
    fake_server.route("GET", "/repos/my%20org/hello/contents/docs/a%20b.md", json_reply(file))
    output = run_action(action("github_tools", "repos_get_content"),
                        {"owner": "my org", "repo": "hello", "path": "docs/a b.md", "ref": "main"}, caller=caller)
    assert output == file
    fake_server.route("GET", "/repos/a%2Fb/hello", json_reply({"id": 1, "name": "hello", "full_name": "a/hello",
                                                               "private": False, "html_url": "https://x"}))
    run_action(action("github_tools", "repos_get"), {"owner": "a/b", "repo": "hello"}, caller=caller)
    assert [r.path for r in fake_server.received] == ["/repos/my%20org/hello/contents/docs/a%20b.md",
                                                      "/repos/a%2Fb/hello"]
    for path in ("..", "docs/../../secrets", "./x"):
        with pytest.raises(ActionFailed) as info:
            run_action(action("github_tools", "repos_get_content"), {"owner": "o", "repo": "r", "path": path},
                       caller=caller)
        assert info.value.code == "invalid_input"
    with pytest.raises(ActionFailed):
        run_action(action("github_tools", "repos_get"), {"owner": "..", "repo": "hello"}, caller=caller)
    assert len(fake_server.received) == 2


def test_an_error_status_is_http_error_with_the_status_and_body(db, fake_server, caller):
    integration_import(document=shipped("github.yaml"), source="github.yaml", server_url=fake_server.url)
    fake_server.route("GET", "/repos/o/private", json_reply({"message": "Not Found"}, status=404))
    with pytest.raises(ActionFailed) as info:
        run_action(action("github_tools", "repos_get"), {"owner": "o", "repo": "private"}, caller=caller)
    assert info.value.payload() == {"error": "GitHub answered HTTP 404 to GET /repos/{owner}/{repo}.",
                                    "code": "http_error", "status": 404, "details": {"message": "Not Found"}}
    fake_server.route("GET", "/repos/o/big", Reply(status=500, body=b"x" * 10_000, headers={}))
    with pytest.raises(ActionFailed) as info:
        run_action(action("github_tools", "repos_get"), {"owner": "o", "repo": "big"}, caller=caller)
    assert info.value.extra["status"] == 500 and len(info.value.extra["details"]) < 4100


def test_an_operation_may_not_be_redirected_off_its_base_url(db, fake_server, settings, caller):
    integration_import(document=shipped("github.yaml"), source="github.yaml", server_url=fake_server.url)
    other = f"127.0.0.1:{fake_server.port + 1}"
    settings.ATRIUM_HTTP_ALLOWED_HOSTS = [other]  # listing a host for http_tools does not open it here
    fake_server.route("GET", "/repos/o/r", Reply(status=301, body=b"", headers={"Location": f"http://{other}/x"}))
    with pytest.raises(ActionFailed) as info:
        run_action(action("github_tools", "repos_get"), {"owner": "o", "repo": "r"}, {"token": "t"}, caller=caller)
    assert info.value.code == "host_not_allowed"
    assert len(fake_server.received) == 1


def test_slack_operations_send_the_oauth_access_token(db, fake_server, caller):
    integration_import(document=shipped("slack.yaml"), source="slack.yaml", server_url=fake_server.url + "/api")
    credentials = {"accessToken": "xoxb-1", "refreshToken": "r", "tokenType": "bearer"}
    fake_server.route("POST", "/api/chat.postMessage", json_reply({"ok": True, "channel": "C1", "ts": "1.2"}))
    output = run_action(action("slack_tools", "chat_postMessage"),
                        {"body": {"channel": "C1", "text": "Deployed :rocket:", "thread_ts": "1.1"}}, credentials,
                        caller=caller)
    assert output == {"ok": True, "channel": "C1", "ts": "1.2"}
    sent = fake_server.last()
    assert sent.headers["authorization"] == "Bearer xoxb-1"
    assert sent.json() == {"channel": "C1", "text": "Deployed :rocket:", "thread_ts": "1.1"}
    fake_server.route("GET", "/api/conversations.history", json_reply({"ok": True, "messages": [], "has_more": False}))
    run_action(action("slack_tools", "conversations_history"), {"channel": "C1", "limit": 20, "inclusive": True},
               credentials, caller=caller)
    assert fake_server.last().query == {"channel": ["C1"], "limit": ["20"], "inclusive": ["true"]}
    # Slack answers 200 with ok false for its own errors: the result says so.
    fake_server.route("POST", "/api/reactions.add", json_reply({"ok": False, "error": "already_reacted"}))
    output = run_action(action("slack_tools", "reactions_add"),
                        {"body": {"channel": "C1", "name": "eyes", "timestamp": "1.2"}}, credentials, caller=caller)
    assert output == {"ok": False, "error": "already_reacted"}


def test_api_key_and_basic_schemes_are_applied(db, fake_server, caller):
    schemes = {"key": {"type": "apiKey", "in": "query", "name": "api_key"},
               "header": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
               "basic": {"type": "http", "scheme": "basic"}}
    for scheme, credentials, check in (
        ("key", {"apiKey": "k1"}, lambda r: r.query == {"api_key": ["k1"], "q": ["x"]}),
        ("header", {"apiKey": "k2"}, lambda r: r.headers["x-api-key"] == "k2"),
        ("basic", {"username": "ana", "password": "pw"}, lambda r: r.headers["authorization"] == "Basic YW5hOnB3"),
    ):
        paths = {"/find": get("find", parameters=[{"name": "q", "in": "query", "schema": {"type": "string"}}])}
        report = integration_import(document=document(paths, components={"securitySchemes": schemes},
                                                      security=[{scheme: []}]),
                                    source="tiny.json", integration_id=f"tiny_{scheme}", server_url=fake_server.url)
        integration = Integration.objects.get(pk=report.integration_id)
        assert integration.auth_scheme == {"key": "api_key", "header": "api_key", "basic": "basic"}[scheme]
        run_action(action(report.integration_id, "find"), {"q": "x"}, credentials, caller=caller)
        assert check(fake_server.last()), fake_server.last()
    assert Integration.objects.get(pk="tiny_key").auth_config == {"in": "query", "name": "api_key"}


def test_a_large_success_answer_is_refused_as_too_large(db, fake_server, caller):
    integration_import(document=document({"/big": get("big")}), source="t.json", server_url=fake_server.url)
    fake_server.route("GET", "/big", json_reply({"x": "y" * (2 * 1024 * 1024)}))
    with pytest.raises(ActionFailed) as info:
        run_action(action("tiny_api_tools", "big"), {}, caller=caller)
    assert info.value.code == "response_too_large"


# What an import makes of a document


def test_reimporting_updates_changed_actions_and_removes_vanished_ones(db):
    first = {"/a": get("a"), "/b": get("b"), "/c": get("c")}
    report = integration_import(document=document(first), source="v1.json")
    assert (report.integration_id, sorted(report.created)) == ("tiny_api_tools", ["a", "b", "c"])
    b_before = Action.objects.get(integration_id="tiny_api_tools", name="b")
    second = {"/a": get("a", summary="Now described"), "/b": get("b"), "/d": {"post": {
        "operationId": "d", "responses": {"201": {"description": "made"}}}}}
    report = integration_import(document=document(second), source="v2.json")
    assert report.integration_created is False
    assert (report.created, report.updated, report.unchanged, report.removed) == (["d"], ["a"], ["b"], ["c"])
    rows = {row.name: row for row in Action.objects.filter(integration_id="tiny_api_tools")}
    assert set(rows) == {"a", "b", "d"}
    assert rows["a"].description == "Now described"
    assert rows["b"].pk == b_before.pk and rows["b"].updated_at == b_before.updated_at
    assert rows["d"].config["method"] == "POST"


def test_a_reimport_keeps_the_oauth_client_a_curator_set(db):
    integration_import(document=shipped("slack.yaml"), source="slack.yaml")
    Integration.objects.filter(pk="slack_tools").update(
        auth_config={**Integration.objects.get(pk="slack_tools").auth_config, "clientId": "123.456"}, enabled=False)
    integration_import(document=shipped("slack.yaml"), source="slack.yaml")
    integration = Integration.objects.get(pk="slack_tools")
    assert integration.auth_config["clientId"] == "123.456"
    assert integration.enabled is False


def test_a_failed_import_changes_nothing(db):
    integration_import(document=document({"/a": get("a"), "/b": get("b")}), source="v1.json")
    before = list(Action.objects.values_list("name", "description", "updated_at"))
    broken = {"/a": get("a", summary="changed"), "/c": get("c", parameters=[{"$ref": "#/components/parameters/x"}])}
    error = refused(document=document(broken))
    assert "paths['/c'].get.parameters[0].$ref" in error.message and "points at nothing" in error.message
    assert list(Action.objects.values_list("name", "description", "updated_at")) == before
    assert Integration.objects.get(pk="tiny_api_tools").source_document == document({"/a": get("a"), "/b": get("b")})


def test_a_recursive_schema_is_refused(db):
    components = {"schemas": {"Node": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}}}}
    paths = {"/tree": {"get": {"operationId": "tree", "responses": {"200": {"description": "ok", "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}}}}}}
    error = refused(document=document(paths, components=components))
    assert "recursive" in error.message and "#/components/schemas/Node" in error.message
    assert "paths['/tree'].get.responses" in error.message
    assert not Integration.objects.exists()


def test_invalid_documents_are_refused_naming_the_problem(db):
    cases = [
        ("openapi: [", "not a YAML or JSON document"),
        ("- a\n- b\n", "an OpenAPI document is an object"),
        (json.dumps({"swagger": "2.0", "info": {"title": "x"}, "paths": {}}), "Swagger 2.0"),
        (json.dumps({"openapi": "2.9", "info": {"title": "x"}, "paths": {}}), "openapi: must be an OpenAPI 3.0 or 3.1"),
        (json.dumps({"openapi": "3.0.3", "paths": {}}), "info: must be an object"),
        (document({}), "no operation"),
        (document({"/x": get("x", parameters=[{"name": "q", "in": "body"}])}),
         "paths['/x'].get.parameters[0].in: must be path, query, header or cookie"),
        (document({"/x/{id}": get("x")}), "no path parameter id is declared"),
        (document({"/x": get("x", responses={"200": {"description": "ok", "content": {"application/json": {
            "schema": {"$ref": "other.yaml#/Thing"}}}}})}), "refers to another document"),
        (document({"/a": get("chat.post"), "/b": get("chat_post")}), "also GET /a's"),
        (document({"/x": get("x")}, security=[{"missing": []}]), "which components.securitySchemes does not define"),
        (document({"/x": get("x")}, security=[{"oidc": []}],
                  components={"securitySchemes": {"oidc": {"type": "openIdConnect", "openIdConnectUrl": "https://x"}}}),
         "type 'openIdConnect' is not supported"),
        (document({"/x": get("x")}, **{"x-atrium-integration": {"agentInstructions": "typo"}}),
         "x-atrium-integration.agentInstructions: is not a setting"),
        (document({"/x": get("x", parameters=[{"name": "body", "in": "query"}], requestBody={"content": {
            "application/json": {"schema": {}}}})}), "has the name the request body takes"),
    ]
    for text, expected in cases:
        error = refused(document=text)
        assert expected in error.message, (expected, error.message)
        assert error.message.startswith("test.json: ")
    assert refused(document=document({"/x": get("x")}), integration_id="Bad-Id").message.endswith(
        "'Bad-Id' is not an integration id: Lower-case letters, digits and _, starting with a letter.")
    assert not Integration.objects.exists()


def test_a_builtin_integration_is_not_replaced_by_an_import(db):
    Integration.objects.create(id="http_tools", name="HTTP requests")
    error = refused(document=document({"/x": get("x")}), integration_id="http_tools")
    assert error.code == "integration_exists"
    assert not Action.objects.exists()


def test_bounds_refuse_what_would_grow_too_large(db):
    assert refused(document=b" " * (MAX_DOCUMENT_BYTES + 1)).code == "too_large"
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(7))
    assert refused(document=bomb).code == "unsafe_yaml"
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(MAX_SCHEMA_NODES + 1)}}
    error = refused(document=document({"/x": get("x", parameters=[{"name": "q", "in": "query", "schema": wide}])}))
    assert f"more than {MAX_SCHEMA_NODES:,} schema objects" in error.message
    schemas = {f"S{i}": {"type": "object", "properties": {"next": {"$ref": f"#/components/schemas/S{i + 1}"}}}
               for i in range(MAX_SCHEMA_DEPTH + 5)}
    schemas[f"S{MAX_SCHEMA_DEPTH + 5}"] = {"type": "string"}
    deep = {"/x": get("x", parameters=[{"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/S0"}}])}
    error = refused(document=document(deep, components={"schemas": schemas}))
    assert f"nested more than {MAX_SCHEMA_DEPTH} levels deep" in error.message
    # A schema used many times, not recursively, resolves in each place.
    shared = {"S": {"type": "object", "properties": {"a": {"type": "string"}}}}
    reused = {"/x": {"post": {"operationId": "x", "responses": {"200": {"description": "ok"}}, "requestBody": {
        "content": {"application/json": {"schema": {"type": "object", "properties": {
            "one": {"$ref": "#/components/schemas/S"}, "two": {"$ref": "#/components/schemas/S"}}}}}}}}}
    integration_import(document=document(reused, components={"schemas": shared}), source="ok.json")
    body = Action.objects.get(name="x").input_schema["properties"]["body"]
    assert body["properties"]["one"] == body["properties"]["two"] == shared["S"]


def test_openapi_3_0_schemas_become_json_schema(db):
    paths = {"/x": {"post": {"operationId": "x", "responses": {"200": {"description": "ok"}}, "requestBody": {
        "required": True, "content": {"application/json; charset=utf-8": {"schema": {
            "type": "object", "required": ["n"], "discriminator": {"propertyName": "kind"}, "x-internal": True,
            "properties": {
                "n": {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "example": 3},
                "note": {"type": "string", "nullable": True},
                "choice": {"type": "string", "enum": ["a", "b"], "nullable": True},
                "ref": {"allOf": [{"$ref": "#/components/schemas/T"}], "nullable": True},
                "described": {"$ref": "#/components/schemas/T", "description": "This use of T."},
            }}}}}}}}
    text = json.dumps({"openapi": "3.0.3", "info": {"title": "Old"}, "servers": [{"url": "https://old.test"}],
                       "paths": paths, "components": {"schemas": {"T": {"type": "string", "description": "A T."}}}})
    integration_import(document=text, source="old.json")
    schema = Action.objects.get(integration_id="old_tools", name="x").input_schema
    assert schema["required"] == ["body"]
    body = schema["properties"]["body"]
    assert "discriminator" not in body and "x-internal" not in body
    props = body["properties"]
    assert props["n"] == {"type": "integer", "exclusiveMinimum": 0, "examples": [3]}
    assert props["note"] == {"type": ["string", "null"]}
    assert props["choice"] == {"type": ["string", "null"], "enum": ["a", "b", None]}
    assert props["ref"] == {"anyOf": [{"allOf": [{"type": "string", "description": "A T."}]}, {"type": "null"}]}
    assert props["described"] == {"type": "string", "description": "This use of T."}
    validator = Draft202012Validator(schema)
    assert validator.is_valid({"body": {"n": 1, "note": None, "choice": None, "ref": None}})
    assert not validator.is_valid({"body": {"n": 0}})


def test_servers_ids_and_what_is_skipped(db):
    text = json.dumps({
        "openapi": "3.1.0", "info": {"title": "Acme Billing API!", "description": "Invoices."},
        "servers": [{"url": "https://{region}.acme.test/{version}", "variables": {
            "region": {"default": "eu", "enum": ["eu", "us"]}, "version": {"default": "v2"}}}],
        "paths": {
            "/invoices/{id}": {
                "parameters": [{"name": "id", "in": "path", "schema": {"type": "string"}},
                               {"name": "sid", "in": "cookie"}, {"name": "Accept", "in": "header"}],
                "get": {"responses": {"200": {"description": "ok"}}},
                "options": {"responses": {"200": {"description": "ok"}}},
                "put": {"requestBody": {"required": True, "content": {"multipart/form-data": {}}},
                        "responses": {"200": {"description": "ok"}}}},
        }})
    report = integration_import(document=text, source="acme.json")
    assert report.integration_id == "acme_billing_api_tools"
    assert report.created == ["get_invoices_id"]
    assert report.skipped == ["PUT /invoices/{id}: its request body is multipart/form-data, not JSON",
                              "OPTIONS /invoices/{id}: OPTIONS operations are not imported"]
    integration = Integration.objects.get(pk="acme_billing_api_tools")
    assert (integration.base_url, integration.description) == ("https://eu.acme.test/v2", "Invoices.")
    assert (integration.auth_scheme, integration.connection_required) == ("none", False)
    row = integration.actions.get()
    assert row.input_schema == {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"],
                                "additionalProperties": False}
    relative = json.dumps({"openapi": "3.1.0", "info": {"title": "Rel"}, "servers": [{"url": "/v1"}],
                           "paths": {"/x": get("x")}})
    report = integration_import(document=relative, source="https://docs.rel.test/api/openapi.json")
    assert Integration.objects.get(pk=report.integration_id).base_url == "https://docs.rel.test/v1"
    assert "is relative" in refused(document=relative).message
    assert "names no server" in refused(document=json.dumps({"openapi": "3.1.0", "info": {"title": "N"},
                                                            "paths": {"/x": get("x")}})).message


def test_a_yaml_document_with_unquoted_numbers_and_security_on_its_operations(db):
    text = """
openapi: 3.1
info: {title: Petstore}
servers: [{url: "https://pets.test/v1"}]
paths:
  /pets/{petId}:
    get:
      operationId: showPetById
      security: [{petAuth: ["pets:read"]}]
      parameters:
        - {name: petId, in: path, schema: {type: integer}}
        - {name: X-Request-Id, in: header, required: true, schema: {type: string}}
      responses:
        200:
          description: A pet.
          content:
            application/json:
              schema: {type: object, properties: {id: {type: integer}, name: {type: string}}}
components:
  securitySchemes:
    petAuth:
      type: oauth2
      flows:
        authorizationCode:
          authorizationUrl: https://pets.test/authorize
          tokenUrl: https://pets.test/token
          refreshUrl: https://pets.test/refresh
          scopes: {"pets:read": Read pets, "pets:write": Change pets}
"""
    report = integration_import(document=text, source="pets.yaml")
    integration = Integration.objects.get(pk=report.integration_id)
    assert (integration.id, integration.auth_scheme) == ("petstore_tools", "oauth2")
    assert integration.auth_config == {"authorizationUrl": "https://pets.test/authorize",
                                       "tokenUrl": "https://pets.test/token", "refreshUrl": "https://pets.test/refresh",
                                       "scopes": ["pets:read"]}
    row = integration.actions.get(name="showPetById")
    assert row.input_schema["required"] == ["petId", "X-Request-Id"]
    assert row.output_schema["properties"]["name"] == {"type": "string"}
    assert row.config["parameters"] == [{"name": "petId", "in": "path"}, {"name": "X-Request-Id", "in": "header"}]
    implicit = text.replace("authorizationCode:", "implicit:")
    assert "only the authorizationCode OAuth 2 flow" in refused(document=implicit).message


# The command


def test_the_command_imports_a_file_and_prints_the_report(db, tmp_path):
    out = StringIO()
    call_command("import_integration", str(SHIPPED_DOCUMENTS / "github.yaml"), "--server-url", "http://127.0.0.1:9",
                 stdout=out)
    text = out.getvalue()
    assert "Created integration github_tools (GitHub): base URL http://127.0.0.1:9, auth bearer." in text
    assert "created  issues_create" in text and "15 created, 0 updated, 0 removed, 0 unchanged" in text
    assert Integration.objects.get(pk="github_tools").base_url == "http://127.0.0.1:9"
    path = tmp_path / "tiny.json"
    path.write_text(document({"/a": get("a")}))
    out = StringIO()
    call_command("import_integration", str(path), "--id", "github_tools", stdout=out)
    assert "Updated integration github_tools" in out.getvalue() and "removed  pulls_get" in out.getvalue()


def test_what_the_command_imports_is_found_by_capability_search_at_once(db, alice):
    call_command("import_integration", str(Path(__file__).parent / "fixtures" / "openapi" / "weather.yaml"),
                 stdout=StringIO())
    hits = capabilities_search(caller=Caller.trusted(alice.user, via="mcp"), query="forecast for a city", types=None,
                               integration_id=None, category=None, mode="keyword", limit=5)
    assert hits[0]["name"] == "weather_tools.get_forecast"
    assert set(Capability.objects.filter(integration_id="weather_tools").values_list("name", flat=True)) == {
        "weather_tools", "weather_tools.get_forecast", "weather_tools.create_alert"}


def test_the_command_fetches_a_url(db, fake_server):
    fake_server.route("GET", "/openapi.json", Reply(body=document({"/a": get("a")}).encode()))
    out = StringIO()
    call_command("import_integration", f"{fake_server.url}/openapi.json", "--id", "fetched_tools", stdout=out)
    assert "Created integration fetched_tools" in out.getvalue()
    assert Integration.objects.get(pk="fetched_tools").actions.get().name == "a"
    fake_server.route("GET", "/big.json", Reply(body=b" " * (MAX_DOCUMENT_BYTES + 1)))
    with pytest.raises(CommandError, match="larger than"):
        call_command("import_integration", f"{fake_server.url}/big.json")
    fake_server.route("GET", "/missing.json", Reply(status=404, body=b"not here"))
    with pytest.raises(CommandError, match="answered HTTP 404"):
        call_command("import_integration", f"{fake_server.url}/missing.json")


def test_the_command_fails_clearly(db, tmp_path):
    with pytest.raises(CommandError, match="Cannot read"):
        call_command("import_integration", str(tmp_path / "nope.yaml"))
    path = tmp_path / "bad.yaml"
    path.write_text("openapi: 3.1.0\ninfo: {title: Bad}\nservers: [{url: 'https://bad.test'}]\npaths: {}\n")
    with pytest.raises(CommandError, match=r"bad\.yaml: paths: the document has no operation"):
        call_command("import_integration", str(path))
    assert not Integration.objects.exists()


def test_a_query_too_long_for_a_url_fails_as_the_actions_own_error_and_sends_nothing(db, fake_server, caller):
    integration_import(document=shipped("github.yaml"), source="github.yaml", server_url=fake_server.url + "/")
    with pytest.raises(ActionFailed) as failed:
        run_action(action("github_tools", "repos_get_content"),
                   {"owner": "octo", "repo": "hello", "path": "README.md", "ref": "x" * 100_000}, {"token": "t"},
                   caller=caller)
    assert failed.value.code == "invalid_url"
    assert fake_server.received == []
