"""A fake OpenAI-compatible chat completions API on loopback, for the model backend: it answers
POST /v1/chat/completions with the replies a test scripted, in order, and keeps every request."""

from __future__ import annotations

import json
from collections import deque
from typing import Any
from urllib.parse import parse_qs

from tests.actions import FakeServer, Received, Reply, json_reply

COMPLETIONS_PATH = "/v1/chat/completions"


class FakeCompletions:
    """Scripted replies, one per request: `says` a completion (with its usage), `fails` with an HTTP
    status. A request past the script is answered 500, so a test that sends one too many sees it."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.url = f"{server.url}/v1"
        self.script: deque[Reply] = deque()
        server.route("POST", COMPLETIONS_PATH, self._reply)

    def says(self, text: str, *, prompt_tokens: int | None = 100, completion_tokens: int | None = 20) -> None:
        body: dict[str, Any] = {"id": f"chatcmpl-{len(self.script)}", "object": "chat.completion", "model": "fake",
                                "choices": [{"index": 0, "finish_reason": "stop",
                                             "message": {"role": "assistant", "content": text}}]}
        if prompt_tokens is not None or completion_tokens is not None:
            body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": (prompt_tokens or 0) + (completion_tokens or 0)}
        self.script.append(json_reply(body))

    def fails(self, status: int = 503, *, times: int = 1, body: str = "overloaded") -> None:
        for _ in range(times):
            self.script.append(json_reply({"error": {"message": body}}, status=status))

    def _reply(self, request: Received) -> Reply:
        if not self.script:
            return json_reply({"error": {"message": "the test scripted no more replies"}}, status=500)
        return self.script.popleft()

    @property
    def requests(self) -> list[Received]:
        return [r for r in self.server.received if r.path == COMPLETIONS_PATH]

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.body) for r in self.requests]


GITHUB_TOKEN = "gho_fakeTokenForTests0123456789abcdefXYZ"
GITHUB_DEVICE_CODE = "3584d83530557fdd1f46af8289938c8ef79f9dc5"
GITHUB_CLIENT_ID = "Ov23liFakeClient0001"
GITHUB_LOGIN = "octo-alice"


class FakeGitHub:
    """GitHub's device flow and /user on loopback. Each token request is answered with the next of
    `answers` (error names such as authorization_pending, or "granted" for the token); past the
    script it keeps answering the last one. `interval` and `expires_in` are what the device code
    answer says.

    And the REST endpoints of portfolio repositories, POST /user/repos and GET /repos/{owner}/{repo},
    for the repositories a test serves: each answers the clone_url the test chose (a local bare
    repository). Creating one that exists is refused as GitHub refuses it (422, "name already exists
    on this account")."""

    def __init__(self, server: FakeServer, *, interval: int = 0, expires_in: int = 900) -> None:
        self.server = server
        self.url = server.url
        self.interval, self.expires_in = interval, expires_in
        self.answers: deque[str] = deque(["granted"])
        self.device_code_requests = 0
        self.token_requests: list[dict[str, list[str]]] = []
        server.route("POST", "/login/device/code", self._device_code)
        server.route("POST", "/login/oauth/access_token", self._token)
        server.route("GET", "/user", self._user)
        self.repositories: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        server.route("POST", "/user/repos", self._create)

    def script(self, *answers: str) -> None:
        self.answers = deque(answers)

    def _device_code(self, request: Received) -> Reply:
        self.device_code_requests += 1
        form = parse_qs(request.body.decode())
        if form.get("client_id", [""])[0] == "Iv1.0000000000000bad":
            return json_reply({"error": "unauthorized_client"}, status=400)
        return json_reply({"device_code": GITHUB_DEVICE_CODE, "user_code": "WDJB-MJHT",
                           "verification_uri": "https://github.com/login/device", "expires_in": self.expires_in,
                           "interval": self.interval})

    def _token(self, request: Received) -> Reply:
        form = parse_qs(request.body.decode())
        self.token_requests.append(form)
        answer = self.answers.popleft() if len(self.answers) > 1 else self.answers[0]
        if answer != "granted":
            return json_reply({"error": answer, "error_description": answer.replace("_", " ")})
        return json_reply({"access_token": GITHUB_TOKEN, "token_type": "bearer", "scope": "repo,read:user"})

    def _user(self, request: Received) -> Reply:
        if request.headers.get("authorization") != f"Bearer {GITHUB_TOKEN}":
            return json_reply({"message": "Bad credentials"}, status=401)
        return json_reply({"login": GITHUB_LOGIN, "id": 1})

    def serve(self, name: str, clone_url: str, *, exists: bool = False, default_branch: str = "main") -> None:
        self.repositories[name] = {"clone_url": clone_url, "exists": exists, "default_branch": default_branch,
                                   "private": False}
        self.server.route("GET", f"/repos/{GITHUB_LOGIN}/{name}", lambda request: self._show(request, name))

    def _answer(self, name: str) -> dict[str, Any]:
        repo = self.repositories[name]
        return {"name": name, "full_name": f"{GITHUB_LOGIN}/{name}", "owner": {"login": GITHUB_LOGIN},
                "private": repo["private"], "html_url": f"https://github.com/{GITHUB_LOGIN}/{name}",
                "clone_url": repo["clone_url"], "default_branch": repo["default_branch"]}

    def _authorized(self, request: Received) -> bool:
        return request.headers.get("authorization") == f"Bearer {GITHUB_TOKEN}"

    def _create(self, request: Received) -> Reply:
        if not self._authorized(request):
            return json_reply({"message": "Requires authentication"}, status=401)
        body = request.json()
        self.created.append(body)
        repo = self.repositories.get(body.get("name"))
        if repo is None:
            return json_reply({"message": "the test serves no such repository"}, status=500)
        if repo["exists"]:
            return json_reply({"message": "Repository creation failed.", "errors": [
                {"resource": "Repository", "code": "custom", "field": "name",
                 "message": "name already exists on this account"}]}, status=422)
        repo["exists"], repo["private"] = True, bool(body.get("private"))
        return json_reply(self._answer(body["name"]), status=201)

    def _show(self, request: Received, name: str) -> Reply:
        if not self._authorized(request) or not self.repositories[name]["exists"]:
            return json_reply({"message": "Not Found"}, status=404)
        return json_reply(self._answer(name))
