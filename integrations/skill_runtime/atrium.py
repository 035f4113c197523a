"""The `atrium` module a skill's code is given (as run's second argument, or by `import atrium`).

It runs inside the sandbox, under the system's Python, and reaches the server only through the Unix
socket named by $ATRIUM_RPC_SOCKET: one JSON request per line, {"name", "input"}, answered by one
JSON line, {"output": ...} or {"error": {"code", "message", "payload"?}}. The server runs the action
with the caller's connection; credentials never come in here, only the action's output.
"""

import json
import os
import socket
import threading

__all__ = ["ActionError", "call"]


class ActionError(Exception):
    """An action's failure, or the server's refusal of the call. `code` is stable
    (integration_not_declared, too_many_calls, request_too_large, action_failed, ...), `message`
    says it in words, `payload` is the action's error payload ({} when there is none)."""

    def __init__(self, code, message, payload=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.payload = payload if payload is not None else {}


_lock = threading.Lock()
_stream = None


def call(name, input=None):
    """Run the action `name` ("integrationId.ACTION_NAME", one of the skill's declared integrations)
    with `input` (a dict of JSON values) and return its output; raises ActionError when it fails."""
    if not isinstance(name, str):
        raise TypeError("atrium.call: name must be a string such as 'http_tools.GET'")
    if input is None:
        input = {}
    if not isinstance(input, dict):
        raise TypeError("atrium.call: input must be a dict")
    request = json.dumps({"name": name, "input": input}, allow_nan=False, separators=(",", ":"))
    with _lock:
        reply = _exchange(request.encode() + b"\n")
    error = reply.get("error") if isinstance(reply, dict) else None
    if error is not None:
        if not isinstance(error, dict):
            error = {}
        raise ActionError(str(error.get("code", "error")), str(error.get("message", "The call failed.")),
                          error.get("payload"))
    return reply.get("output") if isinstance(reply, dict) else None


def _exchange(data):
    global _stream
    if _stream is None:
        path = os.environ.get("ATRIUM_RPC_SOCKET")
        if not path:
            raise ActionError("rpc_unavailable", "This sandbox has no connection to the server.")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Through the directory's descriptor: a socket's own path may have only 107 bytes.
            directory = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
            try:
                sock.connect(f"/proc/self/fd/{directory}/{os.path.basename(path)}")
            finally:
                os.close(directory)
        except OSError as exc:
            sock.close()
            raise ActionError("rpc_unavailable", f"Could not reach the server: {exc.strerror or exc}") from None
        _stream = sock.makefile("rwb")
    try:
        _stream.write(data)
        _stream.flush()
        line = _stream.readline()
    except OSError as exc:
        line = b""
        reason = exc.strerror or str(exc)
    else:
        reason = "it closed the connection"
    if not line:
        _stream = None
        raise ActionError("rpc_unavailable", f"Lost the connection to the server: {reason}.")
    return json.loads(line)
