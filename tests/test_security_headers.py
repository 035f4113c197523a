"""Every response carries a Content-Security-Policy that runs only our own script files, and every
page we serve still works under it: no inline script, no inline event handler. HSTS follows an
https public URL."""

import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.test import Client

from accounts.models import User
from tests.test_oauth import authorize_query, pkce_pair, register_client
from tests.test_run_page import REVIEW, draft, page_url, save, start

pytestmark = pytest.mark.django_db

BASE_DIR = Path(__file__).resolve().parents[1]


class InlineCode(HTMLParser):
    """Script a browser would refuse under `script-src 'self'`: inline <script>, on* attributes and
    javascript: URLs. JSON data blocks are not run, so they are allowed."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "script" and not attributes.get("src") and "json" not in (attributes.get("type") or ""):
            self.found.append(f"inline <script> at line {self.getpos()[0]}")
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=...>")
            if name in ("href", "src", "action") and (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value}>")


def inline_code(html: str) -> list[str]:
    parser = InlineCode()
    parser.feed(html)
    return parser.found


def directives(policy: str) -> dict[str, list[str]]:
    parsed = {}
    for directive in policy.split(";"):
        name, *values = directive.split()
        parsed[name] = values
    return parsed


@pytest.fixture
def root(db) -> Client:
    User.objects.create_superuser("root", "root@example.com", "pw-root")
    browser = Client()
    browser.login(username="root", password="pw-root")
    return browser


@pytest.mark.parametrize("path", ["/", "/healthz", "/accounts/login/", "/admin/login/", "/docs/", "/api/docs/",
                                  "/.well-known/oauth-authorization-server"])
def test_every_response_carries_the_policy(path):
    response = Client().get(path)

    assert response.status_code == 200
    policy = directives(response["Content-Security-Policy"])
    assert policy["script-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert not any("'unsafe-eval'" in values for values in policy.values())
    # The consent form redirects to each client's own callback, which form-action would block.
    assert "form-action" not in policy


def test_the_signed_in_pages_run_no_inline_code(kb, root, alice):
    save(alice, "review", REVIEW)
    run = draft(start(alice))
    owner = Client()
    owner.force_login(alice.user)
    client_id = register_client(Client())
    pages = {
        "/": root,
        "/docs/": root,
        "/docs/operations": root,
        "/api/docs/": root,
        "/admin/": root,
        "/admin/workflows/workflow/add/": root,
        "/admin/accounts/auditevent/": root,
        "/admin/docs_kb/docpage/": root,
        "/oauth/authorize/?" + urlencode(authorize_query(client_id, pkce_pair()[1])): root,
        page_url(run): owner,
    }

    for path, browser in pages.items():
        response = browser.get(path)
        assert response.status_code == 200, path
        assert "Content-Security-Policy" in response
        assert inline_code(response.content.decode()) == [], path


def test_the_browsable_api_runs_no_inline_code(root):
    response = root.get("/api/me", HTTP_ACCEPT="text/html")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert inline_code(response.content.decode()) == []


def test_the_anonymous_pages_run_no_inline_code():
    for path in ["/accounts/login/", "/accounts/password/reset/", "/admin/login/"]:
        response = Client().get(path)
        assert response.status_code == 200, path
        assert inline_code(response.content.decode()) == [], path


def test_swagger_ui_starts_from_a_script_file(root):
    page = root.get("/api/docs/").content.decode()

    assert 'src="/api/docs/?script="' in page
    script = root.get("/api/docs/?script=")
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in script.content.decode()


def settings_in_a_fresh_process(**env: str) -> subprocess.CompletedProcess:
    code = ("from django.conf import settings as s; "
            "print(s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, s.SECURE_HSTS_PRELOAD)")
    environ = {k: v for k, v in os.environ.items() if k not in ("ATRIUM_PUBLIC_URL", "NUM_PROXIES")}
    environ.update({"DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "test-only-not-secret", **env})
    return subprocess.run([sys.executable, "-c", code], cwd=BASE_DIR, env=environ, capture_output=True, text=True,
                          timeout=60)


def test_an_https_public_url_turns_on_hsts():
    result = settings_in_a_fresh_process(ATRIUM_PUBLIC_URL="https://atrium.example")

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(365 * 24 * 3600), "False", "False"]


def test_hsts_is_configurable():
    result = settings_in_a_fresh_process(ATRIUM_PUBLIC_URL="https://atrium.example", SECURE_HSTS_SECONDS="600",
                                         SECURE_HSTS_INCLUDE_SUBDOMAINS="1", SECURE_HSTS_PRELOAD="1")

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["600", "True", "True"]


def test_a_plain_http_public_url_sends_no_hsts():
    result = settings_in_a_fresh_process(ATRIUM_PUBLIC_URL="http://127.0.0.1:8000")

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "False", "False"]


@pytest.mark.parametrize(("env", "message"), [
    ({"NUM_PROXIES": "1"}, "NUM_PROXIES is replaced by ATRIUM_TRUSTED_PROXIES"),
    ({"ATRIUM_TRUSTED_PROXIES": "10.0.0.0/8,not-an-address"}, "ATRIUM_TRUSTED_PROXIES"),
])
def test_it_refuses_to_start_with_a_proxy_setting_it_cannot_honour(env, message):
    result = settings_in_a_fresh_process(**env)

    assert result.returncode != 0
    assert message in result.stderr


def test_the_policy_can_be_replaced(settings):
    settings.ATRIUM_CONTENT_SECURITY_POLICY = "default-src 'self'; report-uri /csp"

    assert Client().get("/healthz")["Content-Security-Policy"] == "default-src 'self'; report-uri /csp"
