"""Running actions the way the capability service will: input checked against the action's input
schema, the executor called with the caller's credentials, the output checked against the output
schema. And a fake HTTP server on loopback that records what it was sent."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from jsonschema import Draft202012Validator

from core.caller import Caller
from integrations.executors import EXECUTORS, ActionCall, IntegrationSpec
from integrations.models import Action, Integration


def run_action(action: Action, input: dict[str, Any], credentials: dict[str, Any] | None = None, *,
               caller: Caller) -> Any:
    Draft202012Validator.check_schema(action.input_schema)
    Draft202012Validator(action.input_schema).validate(input)
    output = EXECUTORS[action.executor](ActionCall(caller=caller, action=action, input=input,
                                                   credentials=credentials or {}))
    Draft202012Validator.check_schema(action.output_schema)
    Draft202012Validator(action.output_schema).validate(output)
    return output


def install(spec: IntegrationSpec) -> Integration:
    """A built-in integration's rows, as sync_catalogue writes them."""
    integration = Integration.objects.create(
        id=spec.id, name=spec.name, description=spec.description, category=spec.category,
        agent_instructions=spec.agent_instructions, auth_scheme=spec.auth_scheme, auth_config=spec.auth_config,
        connection_required=spec.connection_required, first_party=spec.first_party)
    for action in spec.actions:
        Action.objects.create(integration=integration, name=action.name, description=action.description,
                              input_schema=action.input_schema, output_schema=action.output_schema,
                              executor=action.executor, config=action.config)
    return integration


@dataclass
class Received:
    method: str
    path: str  # as sent, still percent-encoded
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})


Responder = Callable[[Received], Reply]


def json_reply(value: Any, status: int = 200, **headers: str) -> Reply:
    return Reply(status=status, body=json.dumps(value).encode(), headers={"Content-Type": "application/json",
                                                                          **headers})


class FakeServer:
    """An HTTP server on 127.0.0.1 answering each METHOD path with what a test routed there (a JSON
    {} by default), keeping every request it was sent."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.routes: dict[tuple[str, str], Responder] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def handle_one(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                request = Received(method=self.command, path=parts.path, query=parse_qs(parts.query),
                                   headers={k.lower(): v for k, v in self.headers.items()},
                                   body=self.rfile.read(length) if length else b"")
                server.received.append(request)
                responder = server.routes.get((self.command, parts.path), lambda _: Reply())
                reply = responder(request)
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(reply.body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = handle_one

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gave up (a timeout test) closes the connection under a reply

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.netloc = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def route(self, method: str, path: str, responder: Responder | Reply) -> None:
        self.routes[(method, path)] = responder if callable(responder) else (lambda _: responder)

    def last(self) -> Received:
        assert self.received, "the server received nothing"
        return self.received[-1]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
