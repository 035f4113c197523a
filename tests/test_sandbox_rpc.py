"""runs.sandbox: a job's rpc handler is the one way out of the sandbox. A program inside reaches it
over the Unix socket $ATRIUM_RPC_SOCKET names, with bounded requests and calls, and nothing else:
no network, no other socket of the host."""

import json
import os
import socket
import stat
import threading
import time

import pytest

from runs import sandbox
from runs.sandbox import RPC_CALLS, RPC_REQUEST_BYTES, ScriptJob, script_run
from tests.test_sandbox import PYTHON, host_processes, marker, wait_until

# Connects the way skill_runtime/atrium.py does: through the directory's descriptor, since a
# socket's own path may have only 107 bytes and a test's temporary directory can be longer.
CONNECT = """\
import json, os, socket, sys
path = os.environ["ATRIUM_RPC_SOCKET"]
directory = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
connection = socket.socket(socket.AF_UNIX)
connection.connect(f"/proc/self/fd/{directory}/{os.path.basename(path)}")
"""
# Sends each argument as one request line and prints each reply line.
CLIENT = CONNECT + """\
stream = connection.makefile("rwb")
for line in sys.argv[1:]:
    if line.startswith("@blob:"):  # a request too long for argv
        line = json.dumps({"blob": "x" * int(line[6:])})
    stream.write(line.encode("utf-8", "surrogateescape") + b"\\n")
    stream.flush()
    print(stream.readline().decode().strip(), flush=True)
"""


class Recorder:
    def __init__(self, reply=None):
        self.requests: list[dict] = []
        self.threads: set[int] = set()
        self.reply = reply or (lambda request: {"output": {"echo": request}})

    def __call__(self, request: dict) -> dict:
        self.requests.append(request)
        self.threads.add(threading.get_ident())
        return self.reply(request)


def client(*lines: str, rpc, **options) -> ScriptJob:
    return ScriptJob(script=None, command=[PYTHON, "-c", CLIENT, *lines], timeout=options.pop("timeout", 20),
                     env={}, rpc=rpc, **options)


def replies(result) -> list[dict]:
    assert result.succeeded, (result.error(), result.stderr)
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(autouse=True)
def sandbox_dir(settings, tmp_path):
    base = tmp_path / "sandbox"
    settings.ATRIUM_SANDBOX_DIR = str(base)
    return base


@pytest.fixture
def in_bubblewrap():
    assert sandbox.mode().name == "bwrap", sandbox.mode().reason


@pytest.fixture(params=["bwrap", "subprocess"])
def both_modes(request, settings) -> str:
    settings.ATRIUM_SCRIPT_SANDBOX = request.param
    settings.DEBUG = request.param == "subprocess"
    assert sandbox.mode().name == request.param
    return request.param


def test_a_program_inside_reaches_the_handler_and_reads_its_replies(both_modes, sandbox_dir):
    handler = Recorder()

    result = script_run(client('{"name": "a.B", "input": {"n": 1}}', '{"n": 2}', rpc=handler))

    assert replies(result) == [{"output": {"echo": {"name": "a.B", "input": {"n": 1}}}},
                               {"output": {"echo": {"n": 2}}}]
    assert handler.requests == [{"name": "a.B", "input": {"n": 1}}, {"n": 2}]
    # Served on the thread that called script_run, with that thread's database connection.
    assert handler.threads == {threading.get_ident()}
    assert list(sandbox_dir.iterdir()) == []


def test_only_the_sandboxes_own_uid_may_connect_to_the_socket(in_bubblewrap):
    probe = ("import os, sys; s = os.stat(os.environ['ATRIUM_RPC_SOCKET']); "
             "print(os.getuid(), s.st_uid, oct(s.st_mode))")

    result = script_run(ScriptJob(script=None, command=[PYTHON, "-c", probe], timeout=20, env={}, rpc=Recorder()))

    uid, owner, mode = result.stdout.split()
    assert uid == owner and int(uid) not in (0, os.getuid())
    assert int(mode, 8) == stat.S_IFSOCK | 0o600


def test_with_a_handler_the_network_is_still_cut(both_modes):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    program = CLIENT + (f"socket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')\n")
    try:
        result = script_run(ScriptJob(script=None, command=[PYTHON, "-c", program, '{"ping": 1}'], timeout=20,
                                      env={}, rpc=Recorder()))
    finally:
        server.close()
    assert result.network_isolated
    assert result.stdout.splitlines()[0] == '{"output":{"echo":{"ping":1}}}'
    assert "connected" not in result.stdout
    assert "Connection refused" in result.stderr or "unreachable" in result.stderr


def test_other_unix_sockets_of_the_host_are_out_of_reach(in_bubblewrap, tmp_path):
    elsewhere = tmp_path / "host.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(elsewhere))
    server.listen()
    elsewhere.chmod(0o777)
    program = f"import socket; socket.socket(socket.AF_UNIX).connect({str(elsewhere)!r}); print('connected')"
    try:
        result = script_run(ScriptJob(script=None, command=[PYTHON, "-c", program], timeout=20, env={},
                                      rpc=Recorder()))
    finally:
        server.close()
    assert result.stdout == ""
    assert "FileNotFoundError" in result.stderr


def test_calls_beyond_the_limit_are_refused_without_reaching_the_handler(in_bubblewrap):
    handler = Recorder()

    answers = replies(script_run(client(*[json.dumps({"n": n}) for n in range(RPC_CALLS + 2)], rpc=handler)))

    assert len(handler.requests) == RPC_CALLS
    assert answers[RPC_CALLS - 1] == {"output": {"echo": {"n": RPC_CALLS - 1}}}
    assert answers[RPC_CALLS:] == [{"error": {"code": "too_many_calls",
                                              "message": f"A run may make at most {RPC_CALLS} calls."}}] * 2


def test_an_oversized_request_is_refused_and_the_connection_stays_usable(both_modes):
    handler = Recorder(lambda request: {"output": len(request.get("blob", ""))})
    fits = RPC_REQUEST_BYTES - len('{"blob": ""}')

    answers = replies(script_run(client(f"@blob:{fits + 1}", f"@blob:{3 * RPC_REQUEST_BYTES}", f"@blob:{fits}",
                                        '{"after": true}', rpc=handler)))

    too_large = {"error": {"code": "request_too_large",
                           "message": f"A request may be at most {RPC_REQUEST_BYTES} bytes of JSON."}}
    assert answers == [too_large, too_large, {"output": fits}, {"output": 0}]
    assert handler.requests[1:] == [{"after": True}]


def test_a_request_that_is_not_one_json_object_is_refused(in_bubblewrap):
    handler = Recorder()

    answers = replies(script_run(client("not json", "[1, 2]", "[" * 100_000, "\udcff", rpc=handler)))

    invalid = {"error": {"code": "invalid_request", "message": "A request is one JSON object on one line."}}
    assert answers == [invalid] * 4
    assert handler.requests == []


def test_no_call_is_served_once_the_jobs_time_is_up(in_bubblewrap):
    def slow(request: dict) -> dict:
        time.sleep(1.5)
        return {"output": "late"}

    handler = Recorder(slow)
    # Both requests in one write: the second is read while the first's call overran the timeout.
    program = CONNECT + "connection.sendall(b'{\"first\": 1}\\n{\"second\": 2}\\n'); import time; time.sleep(30)"

    result = script_run(ScriptJob(script=None, command=[PYTHON, "-c", program], timeout=1, env={}, rpc=handler))

    assert result.timed_out
    assert handler.requests == [{"first": 1}]


def test_an_exception_from_the_handler_ends_the_run_and_cleans_up(in_bubblewrap, sandbox_dir):
    def broken(request: dict) -> dict:
        raise RuntimeError("database gone")

    survivor = marker()
    program = CLIENT + f"import time; time.sleep({survivor})\n"
    with pytest.raises(RuntimeError, match="database gone"):
        script_run(ScriptJob(script=None, command=[PYTHON, "-c", program, "{}"], timeout=60, env={},
                             rpc=Recorder(broken)))
    assert wait_until(lambda: not host_processes(survivor))
    assert list(sandbox_dir.iterdir()) == []


def test_without_a_handler_there_is_no_socket_and_no_variable(both_modes):
    result = script_run(ScriptJob(script=None, command=["sh", "-c", 'echo "[$ATRIUM_RPC_SOCKET]"; ls -A'],
                                  timeout=20, env={}))
    assert result.stdout == "[]\ntmp\n"
