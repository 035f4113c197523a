"""What the fuzz tests share: the official SDK client driven from synchronous Hypothesis tests, a
raw JSON-RPC path for what the SDK cannot encode, a checksum of the database, and the verdict on
one answer (an internal error, a 5xx or a traceback is a failure)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from django.apps import apps
from hypothesis import HealthCheck, settings
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

INTERNAL_ERROR = -32603
# Rows a refused call may touch: the MCP session's and the token's bookkeeping (last seen, last used).
# The session record and the tool-call log are written for every call, refused ones included.
VOLATILE_MODELS = {("accounts", "mcpsession"), ("accounts", "toolcall")}
VOLATILE_FIELDS = {"last_used_at", "last_seen_at"}
SESSION_ENDED = "the SDK client's session ended"
NO_ANSWER = "no answer in time"
# Longer than any tool call should take (long work returns an id at once), short enough to bound a run.
CALL_TIMEOUT = 20
TRACEBACK_MARKERS = ("Traceback (most recent call last)", 'File "/')


def fuzz_settings(max_examples: int) -> settings:
    """No deadline (a live server answers in its own time), no example database left in the tree,
    and the same examples on every CI run so a red build can be reproduced."""
    return settings(max_examples=max_examples, deadline=None, database=None, derandomize=bool(os.environ.get("CI")),
                    suppress_health_check=list(HealthCheck), print_blob=False)


def table_digests() -> dict[tuple[str, str], str]:
    """A digest of each of the project's own tables, by (app label, model name), less the bookkeeping
    a refused call may do."""
    digests = {}
    for model in apps.get_models():
        meta = model._meta
        if meta.app_label not in {"accounts", "elements", "workflows", "runs", "docs_kb", "integrations"}:
            continue
        if (meta.app_label, meta.model_name) in VOLATILE_MODELS:
            continue
        columns = [f.attname for f in meta.concrete_fields if f.attname not in VOLATILE_FIELDS]
        digest = hashlib.sha256()
        for row in model.objects.order_by("pk").values_list(*columns):
            digest.update(repr(row).encode())
        digests[(meta.app_label, meta.model_name)] = digest.hexdigest()
    return digests


def tables_changed(before: dict[tuple[str, str], str]) -> set[tuple[str, str]]:
    """The tables whose rows differ now from their digests in `before`."""
    return {table for table, digest in table_digests().items() if before.get(table) != digest}


def database_checksum() -> str:
    """A digest of every row of the project's own tables, less the bookkeeping a refused call may do."""
    return hashlib.sha256(repr(sorted(table_digests().items())).encode()).hexdigest()


@dataclass
class Answer:
    """What one tools/call came back with."""

    is_error: bool = False
    payload: Any = None
    text: str = ""
    rpc_error: int | None = None
    rpc_message: str = ""
    status: int | None = None

    @property
    def refused(self) -> bool:
        if self.is_error or self.rpc_error is not None:
            return True
        payload = self.payload
        return isinstance(payload, dict) and (payload.get("success") is False or payload.get("ok") is False
                                              or payload.get("valid") is False or "error" in payload)

    def failure(self) -> str | None:
        """Why this answer is a server bug, or None."""
        if self.status is not None and self.status >= 500:
            return f"HTTP {self.status}"
        if self.rpc_message.startswith((SESSION_ENDED, NO_ANSWER)):
            return self.rpc_message[:300]
        if self.rpc_error == INTERNAL_ERROR:
            return f"JSON-RPC {INTERNAL_ERROR}: {self.rpc_message[:300]}"
        if isinstance(self.payload, dict) and self.payload.get("code") in {"internal_error", "output_schema_violation"}:
            return f"{self.payload['code']}: {self.text[:300]}"
        if any(marker in self.text or marker in self.rpc_message for marker in TRACEBACK_MARKERS):
            return f"traceback in the answer: {(self.text or self.rpc_message)[:300]}"
        return None


def answer_from_result(result: types.CallToolResult) -> Answer:
    text = "".join(block.text for block in result.content if isinstance(block, types.TextContent))
    try:
        payload = json.loads(text) if text else None
    except ValueError:
        payload = text
    return Answer(is_error=bool(result.isError), payload=payload, text=text)


class ServerGone(Exception):
    """The server no longer answers initialize: fuzzing cannot go on."""


class SessionLost(Exception):
    """The SDK client's transport gave up (it does on a 5xx answer): the session is gone."""


class SdkSession:
    """One session of the official SDK client, on an event loop of its own thread: Hypothesis tests
    are synchronous, and the SDK's transport must be opened and closed by one task. A server error
    ends the SDK's session, so a new one is opened for the calls after it."""

    def __init__(self, mcp_url: str, token: str) -> None:
        self.mcp_url = mcp_url
        self.token = token
        self.statuses: list[int] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.raw = httpx.Client(timeout=CALL_TIMEOUT, headers={"Authorization": f"Bearer {token}"})
        self._open()

    def _open(self) -> None:
        self._ready: concurrent.futures.Future = concurrent.futures.Future()
        self._served = asyncio.run_coroutine_threadsafe(self._serve(), self.loop)
        self.queue: asyncio.Queue = self._ready.result(timeout=60)

    async def _serve(self) -> None:
        async def record(response: httpx.Response) -> None:
            self.statuses.append(response.status_code)

        try:
            http = httpx.AsyncClient(headers={"Authorization": f"Bearer {self.token}"}, timeout=120,
                                     event_hooks={"response": [record]})
            async with http, streamable_http_client(self.mcp_url, http_client=http) as (read, write, session_id), \
                    ClientSession(read, write) as session:
                initialized = await session.initialize()
                self.protocol_version = initialized.protocolVersion
                self.session_id = session_id()
                self.tools = (await session.list_tools()).tools
                queue: asyncio.Queue = asyncio.Queue()
                self._ready.set_result(queue)
                while (item := await queue.get()) is not None:
                    work, done = item
                    try:
                        done.set_result(await work(session))
                    except Exception as exc:
                        done.set_exception(exc)
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise

    def run(self, work: Callable[[ClientSession], Awaitable[Any]], timeout: float = CALL_TIMEOUT) -> Any:
        done: concurrent.futures.Future = concurrent.futures.Future()
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (work, done))
        concurrent.futures.wait([done, self._served], timeout=timeout,
                                return_when=concurrent.futures.FIRST_COMPLETED)
        if done.done():
            return done.result()
        if self._served.done():
            lost = self._served.exception()
            self._reopen()
            raise SessionLost(repr(lost))
        raise TimeoutError(f"no answer in {timeout} s")

    def _reopen(self, attempts: int = 4) -> None:
        """A new session after a server error, waiting a little for a server that is still busy."""
        for attempt in range(attempts):
            try:
                self._open()
                return
            except Exception as exc:
                if attempt == attempts - 1:
                    raise ServerGone(f"no new MCP session could be opened after a server error: {exc!r}") from exc
                time.sleep(5 * (attempt + 1))

    def call(self, name: str, arguments: dict[str, Any]) -> Answer:
        """tools/call through the SDK client."""
        before = len(self.statuses)

        async def work(session: ClientSession) -> types.CallToolResult:
            return await session.call_tool(name, arguments, read_timeout_seconds=timedelta(seconds=CALL_TIMEOUT))

        try:
            answer = answer_from_result(self.run(work))
        except McpError as exc:
            answer = Answer(rpc_error=exc.error.code, rpc_message=exc.error.message)
        except SessionLost as exc:
            answer = Answer(rpc_message=f"{SESSION_ENDED}: {exc}")
        except TimeoutError as exc:
            answer = Answer(rpc_message=f"{NO_ANSWER}: {exc}")
        server_errors = [s for s in self.statuses[before:] if s >= 500]
        if server_errors:
            answer.status = server_errors[0]
        return answer

    def call_raw(self, name: str, arguments_json: str) -> Answer:
        """tools/call as JSON text written by hand, in the SDK client's session: for arguments the SDK
        cannot send (lone surrogates, which it encodes as UTF-8; nesting deeper than its serializer goes)."""
        body = f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {{"name": {json.dumps(name)}, ' \
               f'"arguments": {arguments_json}}}}}'
        return self.post_raw(body)

    def post_raw(self, body: str) -> Answer:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                   "MCP-Protocol-Version": str(self.protocol_version)}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        try:
            response = self.raw.post(self.mcp_url, content=body.encode("utf-8"), headers=headers)
        except httpx.HTTPError as exc:
            return Answer(rpc_message=f"{NO_ANSWER}: {exc!r}")
        answer = Answer(status=response.status_code)
        message = _last_message(response)
        if message is None:
            answer.text = response.text[:2000]
            return answer
        if "error" in message:
            answer.rpc_error = message["error"].get("code")
            answer.rpc_message = str(message["error"].get("message", ""))
            return answer
        result = types.CallToolResult.model_validate(message.get("result") or {})
        parsed = answer_from_result(result)
        parsed.status = response.status_code
        return parsed

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, None)
        try:
            concurrent.futures.wait([self._served], timeout=30)
        finally:
            self.raw.close()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


def _last_message(response: httpx.Response) -> dict[str, Any] | None:
    """The JSON-RPC message of a response, plain JSON or the last event of a stream."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        text = data[-1] if data else ""
    try:
        message = json.loads(text)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


_REPEATS = re.compile(r"(.{1,8}?)\1{15,}", re.DOTALL)


def shorten(text: str, limit: int = 300) -> str:
    """Arguments as a report shows them: long runs written as a count, the rest cut at `limit`."""
    text = _REPEATS.sub(lambda m: f"<{m.group(1)!r} x {len(m.group(0)) // len(m.group(1))}>", text)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


@dataclass
class Finding:
    tools: set[str]
    arguments: str
    answer: str


@dataclass
class Findings:
    """Every distinct failure (how the arguments were broken, and what came back), the tools that
    showed it, and the shortest arguments that did."""

    found: dict[tuple[str, str], Finding] = field(default_factory=dict)

    def add(self, tool: str, way: str, arguments: str, answer: str, *, kind: str | None = None) -> None:
        """`kind` names the failure where the answer's text differs from case to case."""
        shown, said = shorten(arguments), shorten(answer)
        key = (way, kind if kind is not None else re.sub(r"\d+", "N", said)[:80])
        finding = self.found.setdefault(key, Finding(tools=set(), arguments=shown, answer=said))
        if len(shown) < len(finding.arguments):
            finding.arguments, finding.answer = shown, said
        finding.tools.add(tool)

    def report(self) -> str:
        return "\n".join(f"[{way}] {', '.join(sorted(f.tools))}\n    arguments: {f.arguments}\n    answer: {f.answer}"
                         for (way, _), f in sorted(self.found.items()))
