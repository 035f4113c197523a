"""The built-in executors: http_tools, webhook_tools and email_tools, and the transport under them."""

import hashlib
import hmac
import json
import socket
import threading

import httpx
import pytest
from jsonschema import Draft202012Validator, ValidationError

from core.caller import Caller
from integrations.catalogue import BUILTIN_MODULES
from integrations.executors import ActionFailed
from integrations.executors import email as email_executor
from integrations.executors import http as http_executor
from integrations.executors import webhook as webhook_executor
from integrations.executors.transport import MAX_RESPONSE_BYTES, Allowlist, authorize, origin_allowlist
from integrations.models import Action
from tests.actions import Reply, install, json_reply, run_action


@pytest.fixture
def caller(alice):
    return Caller.trusted(alice.user, via="mcp")


@pytest.fixture
def http_request(db) -> Action:
    return install(http_executor.INTEGRATION).actions.get(name="request")


@pytest.fixture
def allowed(settings, fake_server):
    settings.ATRIUM_HTTP_ALLOWED_HOSTS = [fake_server.netloc]
    return fake_server


def refused(action, input, credentials=None, *, caller) -> ActionFailed:
    with pytest.raises(ActionFailed) as info:
        run_action(action, input, credentials, caller=caller)
    return info.value


def test_every_builtin_spec_declares_valid_schemas_and_a_registered_executor():
    from integrations.executors import EXECUTORS

    specs = {spec.id: spec for spec in (http_executor.INTEGRATION, webhook_executor.INTEGRATION,
                                        email_executor.INTEGRATION)}
    assert {f"integrations.executors.{name}" for name in ("http", "webhook", "email")} <= set(BUILTIN_MODULES)
    assert {spec_id: [a.name for a in spec.actions] for spec_id, spec in specs.items()} == {
        "http_tools": ["request"], "webhook_tools": ["send_webhook"], "email_tools": ["send_email"]}
    for spec in specs.values():
        for action in spec.actions:
            Draft202012Validator.check_schema(action.input_schema)
            Draft202012Validator.check_schema(action.output_schema)
            assert action.executor in EXECUTORS
    assert (specs["http_tools"].auth_scheme, specs["http_tools"].connection_required) == ("bearer", False)
    assert (specs["webhook_tools"].auth_scheme, specs["webhook_tools"].connection_required) == ("api_key", True)
    email = specs["email_tools"]
    assert (email.auth_scheme, email.first_party, email.connection_required) == ("none", True, True)


# http_tools


def test_a_get_answers_status_selected_headers_and_parsed_json(http_request, allowed, caller):
    allowed.route("GET", "/things", json_reply({"things": [1, 2]}, ETag='"v1"', **{"Set-Cookie": "s=1"}))
    output = run_action(http_request, {"method": "GET", "url": f"{allowed.url}/things?a=1",
                                       "query": {"b": "two", "n": 3, "flag": True, "many": ["x", "y"]}},
                        caller=caller)
    assert output["status"] == 200
    assert output["body"] == {"things": [1, 2]}
    assert output["truncated"] is False
    assert output["headers"]["content-type"] == "application/json"
    assert output["headers"]["etag"] == '"v1"'
    assert "set-cookie" not in output["headers"]
    sent = allowed.last()
    assert sent.query == {"a": ["1"], "b": ["two"], "n": ["3"], "flag": ["true"], "many": ["x", "y"]}
    assert "authorization" not in sent.headers
    assert sent.headers["accept-encoding"] == "identity"


def test_a_post_sends_json_and_the_connection_token_replaces_the_callers_authorization(http_request, allowed,
                                                                                        caller):
    allowed.route("POST", "/items", json_reply({"id": 7}, status=201))
    output = run_action(http_request, {"method": "POST", "url": f"{allowed.url}/items", "json": {"name": "café"},
                                       "headers": {"Authorization": "Bearer callers-own", "X-Trace": "t1"}},
                        {"token": "vault-token"}, caller=caller)
    assert (output["status"], output["body"]) == (201, {"id": 7})
    sent = allowed.last()
    assert sent.headers["authorization"] == "Bearer vault-token"
    assert sent.headers["x-trace"] == "t1"
    assert sent.headers["content-type"] == "application/json"
    assert sent.json() == {"name": "café"}


def test_without_a_connection_the_callers_authorization_is_sent(http_request, allowed, caller):
    run_action(http_request, {"method": "PUT", "url": f"{allowed.url}/x", "body": "plain words",
                              "headers": {"Authorization": "Token mine"}}, caller=caller)
    sent = allowed.last()
    assert (sent.method, sent.headers["authorization"], sent.body) == ("PUT", "Token mine", b"plain words")
    assert sent.headers["content-type"] == "text/plain; charset=utf-8"


def test_an_error_status_is_the_output_not_a_failure(http_request, allowed, caller):
    allowed.route("DELETE", "/gone", Reply(status=404, body=b"no such thing", headers={"Content-Type": "text/plain"}))
    output = run_action(http_request, {"method": "DELETE", "url": f"{allowed.url}/gone"}, caller=caller)
    assert (output["status"], output["body"], output["truncated"]) == (404, "no such thing", False)


def test_head_answers_headers_and_no_body(http_request, allowed, caller):
    output = run_action(http_request, {"method": "HEAD", "url": allowed.url + "/"}, caller=caller)
    assert (output["status"], output["body"]) == (200, "")
    assert allowed.last().method == "HEAD"


def test_a_body_longer_than_the_cap_is_cut_and_said_to_be(http_request, allowed, caller):
    allowed.route("GET", "/big", json_reply(["x" * (MAX_RESPONSE_BYTES // 2), "y" * (MAX_RESPONSE_BYTES // 2)]))
    output = run_action(http_request, {"method": "GET", "url": f"{allowed.url}/big"}, caller=caller)
    assert output["truncated"] is True
    assert isinstance(output["body"], str) and len(output["body"].encode()) == MAX_RESPONSE_BYTES


def test_a_host_not_in_the_setting_is_refused_and_not_contacted(http_request, allowed, caller):
    for url in ("http://example.com/", "https://api.example.com/v1", f"http://localhost:{allowed.port}/"):
        error = refused(http_request, {"method": "GET", "url": url}, caller=caller)
        assert error.code == "host_not_allowed"
        assert "ATRIUM_HTTP_ALLOWED_HOSTS" in error.message
    assert allowed.received == []


def test_another_port_of_an_allowed_host_is_refused(http_request, allowed, settings, caller):
    error = refused(http_request, {"method": "GET", "url": f"http://127.0.0.1:{allowed.port + 1}/"}, caller=caller)
    assert error.code == "host_not_allowed"
    settings.ATRIUM_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]  # no port: only the scheme's default one
    assert refused(http_request, {"method": "GET", "url": f"{allowed.url}/"}, caller=caller).code == "host_not_allowed"
    assert allowed.received == []


def test_an_empty_setting_allows_no_host(http_request, settings, fake_server, caller):
    settings.ATRIUM_HTTP_ALLOWED_HOSTS = []
    error = refused(http_request, {"method": "GET", "url": f"{fake_server.url}/"}, caller=caller)
    assert error.code == "host_not_allowed" and "empty" in error.message
    assert fake_server.received == []


def test_a_redirect_is_followed_only_to_an_allowed_host(http_request, allowed, caller):
    allowed.route("GET", "/hop", Reply(status=302, body=b"", headers={"Location": "/final"}))
    allowed.route("GET", "/final", json_reply({"arrived": True}))
    output = run_action(http_request, {"method": "GET", "url": f"{allowed.url}/hop"}, caller=caller)
    assert (output["status"], output["body"]) == (200, {"arrived": True})
    for target in ("http://elsewhere.example/steal", f"http://127.0.0.1:{allowed.port + 1}/"):
        allowed.route("GET", "/away", Reply(status=307, body=b"", headers={"Location": target}))
        error = refused(http_request, {"method": "GET", "url": f"{allowed.url}/away"}, caller=caller)
        assert error.code == "host_not_allowed"
        assert "redirected to" in error.message
    assert [r.path for r in allowed.received] == ["/hop", "/final", "/away", "/away"]


def test_too_many_redirects_fail(http_request, allowed, caller):
    allowed.route("GET", "/loop", Reply(status=302, body=b"", headers={"Location": "/loop"}))
    assert refused(http_request, {"method": "GET", "url": f"{allowed.url}/loop"}, caller=caller).code == \
        "request_failed"


def test_only_http_and_https_urls_are_requested(http_request, allowed, caller):
    for url in (f"ftp://{allowed.netloc}/file", "file:///etc/passwd", "/relative/path"):
        assert refused(http_request, {"method": "GET", "url": url}, caller=caller).code == "scheme_not_allowed"
    error = refused(http_request, {"method": "GET", "url": f"http://user:pw@{allowed.netloc}/"}, caller=caller)
    assert error.code == "invalid_url"
    assert allowed.received == []


def test_headers_the_request_sets_itself_or_that_could_split_are_refused(http_request, allowed, caller):
    for headers in ({"Host": "other.example"}, {"Content-Length": "1"}, {"X-A": "one\r\nX-B: two"},
                    {"Bad Name": "v"}):
        error = refused(http_request, {"method": "GET", "url": allowed.url + "/", "headers": headers}, caller=caller)
        assert error.code == "invalid_input"
    error = refused(http_request, {"method": "POST", "url": allowed.url + "/", "json": {}, "body": "x"},
                    caller=caller)
    assert error.code == "invalid_input"
    assert allowed.received == []


def test_a_method_outside_the_list_is_refused_by_the_schema(http_request, allowed, caller):
    with pytest.raises(ValidationError):
        run_action(http_request, {"method": "TRACE", "url": allowed.url + "/"}, caller=caller)


def test_no_answer_fails_as_request_failed(http_request, settings, caller):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.ATRIUM_HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{port}"]
    error = refused(http_request, {"method": "GET", "url": f"http://127.0.0.1:{port}/"}, caller=caller)
    assert error.code == "request_failed"


def test_a_server_slower_than_the_timeout_fails_as_request_failed(http_request, allowed, settings, caller):
    release = threading.Event()

    def slow(_):
        release.wait(5)
        return json_reply({})

    allowed.route("GET", "/slow", slow)
    settings.ATRIUM_HTTP_TIMEOUT_SECONDS = 0.2
    try:
        error = refused(http_request, {"method": "GET", "url": f"{allowed.url}/slow"}, caller=caller)
    finally:
        release.set()
    assert error.code == "request_failed"


def test_allowlist_entries_match_names_subdomains_and_ports():
    allowlist = Allowlist(entries=("*.example.com", "api.test:8443", "[::1]:9000", "Bücher.example"), source="test")

    def allows(url: str) -> bool:
        return allowlist.allows(httpx.URL(url))

    assert allows("https://a.example.com/") and allows("http://a.b.example.com/") and allows("https://A.Example.COM./")
    assert not allows("https://example.com/") and not allows("https://badexample.com/")
    assert not allows("https://a.example.com:8443/")
    assert allows("https://api.test:8443/") and not allows("https://api.test/")
    assert allows("http://[::1]:9000/") and not allows("http://[::1]:9001/")
    assert allows("https://xn--bcher-kva.example/") and allows("https://bücher.example/")
    base = origin_allowlist("https://api.github.com", owner="github_tools")
    assert base.allows(httpx.URL("https://api.github.com/repos")) and not base.allows(httpx.URL("http://api.github.com/"))


def test_credentials_are_applied_as_each_scheme_says():
    assert authorize(scheme="bearer", config={}, credentials={}).headers == {}
    assert authorize(scheme="bearer", config={}, credentials={"token": "t"}).headers == {"Authorization": "Bearer t"}
    assert authorize(scheme="basic", config={}, credentials={"username": "ana", "password": "pw"}).headers == {
        "Authorization": "Basic YW5hOnB3"}
    oauth = authorize(scheme="oauth2", config={}, credentials={"accessToken": "at", "tokenType": "bearer"})
    assert oauth.headers == {"Authorization": "Bearer at"}
    header = authorize(scheme="api_key", config={"in": "header", "name": "X-Api-Key"}, credentials={"apiKey": "k"})
    assert header.headers == {"X-Api-Key": "k"}
    query = authorize(scheme="api_key", config={"in": "query", "name": "key"}, credentials={"apiKey": "k"})
    assert (query.headers, query.query) == ({}, {"key": "k"})
    assert query.apply({}, [("key", "callers"), ("q", "1")]) == ({}, [("q", "1"), ("key", "k")])
    cookie = authorize(scheme="api_key", config={"in": "cookie", "name": "sid"}, credentials={"apiKey": "k"})
    assert cookie.headers == {"Cookie": "sid=k"}
    assert authorize(scheme="none", config={}, credentials={"token": "t"}).headers == {}
    with pytest.raises(ActionFailed) as info:
        authorize(scheme="bearer", config={}, credentials={"apiKey": "wrong shape"})
    assert info.value.code == "invalid_credentials"
    with pytest.raises(ActionFailed) as info:
        authorize(scheme="bearer", config={}, credentials={"token": "t\r\nX-Injected: 1"})
    assert info.value.code == "invalid_input"


# webhook_tools


@pytest.fixture
def send_webhook(db) -> Action:
    return install(webhook_executor.INTEGRATION).actions.get(name="send_webhook")


def test_a_webhook_is_signed_so_the_receiver_can_verify_it(send_webhook, allowed, caller):
    secret = "shared-secret"

    def verify(request):
        timestamp = request.headers["x-atrium-timestamp"]
        expected = "sha256=" + hmac.new(secret.encode(), f"{timestamp}.".encode() + request.body,
                                        hashlib.sha256).hexdigest()
        verified = hmac.compare_digest(expected, request.headers["x-atrium-signature"])
        return json_reply({"verified": verified}, status=202)

    allowed.route("POST", "/hooks/atrium", verify)
    output = run_action(send_webhook, {"url": f"{allowed.url}/hooks/atrium", "event": "deploy.finished",
                                       "payload": {"service": "api", "ok": True}}, {"secret": secret}, caller=caller)
    assert (output["status"], output["body"]) == (202, {"verified": True})
    sent = allowed.last()
    assert sent.json() == {"service": "api", "ok": True}
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["x-atrium-event"] == "deploy.finished"
    assert sent.headers["x-atrium-delivery"] == output["delivery"]
    assert sent.headers["x-atrium-timestamp"].isdigit()


def test_a_webhook_signed_with_another_secret_does_not_verify(send_webhook, allowed, caller):
    def verify(request):
        timestamp = request.headers["x-atrium-timestamp"]
        expected = "sha256=" + hmac.new(b"receivers-secret", f"{timestamp}.".encode() + request.body,
                                        hashlib.sha256).hexdigest()
        return json_reply({"verified": hmac.compare_digest(expected, request.headers["x-atrium-signature"])})

    allowed.route("POST", "/hook", verify)
    output = run_action(send_webhook, {"url": f"{allowed.url}/hook", "payload": {}}, {"secret": "other"},
                        caller=caller)
    assert output["body"] == {"verified": False}
    assert allowed.last().headers["x-atrium-event"] == webhook_executor.DEFAULT_EVENT


def test_a_webhook_without_a_secret_or_to_a_host_not_allowed_is_not_sent(send_webhook, allowed, caller):
    assert refused(send_webhook, {"url": f"{allowed.url}/hook", "payload": {}}, {}, caller=caller).code == \
        "invalid_credentials"
    error = refused(send_webhook, {"url": "https://hooks.example.org/x", "payload": {}}, {"secret": "s"},
                    caller=caller)
    assert error.code == "host_not_allowed"
    assert allowed.received == []


def test_the_signature_recipe_is_in_the_action_description():
    description = webhook_executor.INTEGRATION.actions[0].description
    assert "X-Atrium-Signature" in description and "HMAC-SHA256" in description and "<timestamp>.<body>" in description
    assert webhook_executor.signature("s", "1700000000", b"{}") == "sha256=" + hmac.new(
        b"s", b"1700000000.{}", hashlib.sha256).hexdigest()


# email_tools


@pytest.fixture
def send_email(db) -> Action:
    return install(email_executor.INTEGRATION).actions.get(name="send_email")


def test_an_email_goes_out_from_the_server_address_with_reply_to(send_email, mailoutbox, settings, caller):
    settings.DEFAULT_FROM_EMAIL = "atrium@example.net"
    output = run_action(send_email, {"to": ["ana@example.com", "ben@example.org"], "subject": "Weekly report",
                                     "body": "All green.\nSee you.", "cc": ["cy@example.com"],
                                     "replyTo": "alice@example.com"}, caller=caller)
    assert output == {"sent": 1, "to": ["ana@example.com", "ben@example.org"]}
    [message] = mailoutbox
    assert message.from_email == "atrium@example.net"
    assert message.to == ["ana@example.com", "ben@example.org"]
    assert message.cc == ["cy@example.com"]
    assert message.reply_to == ["alice@example.com"]
    assert (message.subject, message.body) == ("Weekly report", "All green.\nSee you.")


def test_an_invalid_address_sends_nothing(send_email, mailoutbox, caller):
    for field, value in (("to", ["ana@example.com", "not an address"]), ("cc", ["@nowhere"])):
        data = {"to": ["ana@example.com"], "subject": "Hi", "body": "x", field: value}
        error = refused(send_email, data, caller=caller)
        assert error.code == "invalid_input" and field in error.message
    assert refused(send_email, {"to": ["a@example.com"], "subject": "s", "body": "b", "replyTo": "nope"},
                   caller=caller).code == "invalid_input"
    assert mailoutbox == []


def test_more_than_ten_recipients_or_a_two_line_subject_are_refused(send_email, mailoutbox, caller):
    with pytest.raises(ValidationError):
        run_action(send_email, {"to": [f"u{i}@example.com" for i in range(11)], "subject": "s", "body": "b"},
                   caller=caller)
    with pytest.raises(ValidationError):
        run_action(send_email, {"to": ["a@example.com"], "subject": "one\r\nBcc: x@example.com", "body": "b"},
                   caller=caller)
    assert mailoutbox == []


def test_a_mail_server_that_fails_is_send_failed(send_email, settings, caller):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        settings.EMAIL_PORT = probe.getsockname()[1]
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_USE_TLS = False
    error = refused(send_email, {"to": ["a@example.com"], "subject": "s", "body": "b"}, caller=caller)
    assert error.code == "send_failed"
    assert json.dumps(error.payload())
