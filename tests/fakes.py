"""A fake OpenAI-compatible chat completions API on loopback, for the model backend: it answers
POST /v1/chat/completions with the replies a test scripted, in order, and keeps every request."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

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
