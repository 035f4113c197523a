"""Many clients at once for a minute, then a check that nothing acknowledged was lost or applied twice.

Fifty official-SDK clients (ten for each of five users, so a user's clients race each other on the
same rows) talk to one gunicorn server on PostgreSQL, with a Celery worker on Redis running the
script nodes. Each client loops until the time is up, picking in turn:

- a read: get_element, list_workflows or search_docs;
- a write: edit_element adding its own metadata key to the user's shared `ledger` skill, and
  addEntry adding its own line to the user's shared `journal` memory;
- a run: start_workflow on a two-step workflow, then both answers through advance_run;
- a script: start_workflow on a one-script workflow (it finishes in the worker).

Every write the server acknowledged is remembered. Afterwards, straight from the database: every
acknowledged metadata key and journal line is there exactly once, every acknowledged run completed
with exactly one visit and one turn per step, and every script run completed with one script
visit and the script's own answer. The same clients then call a bare SDK server (FastMCP, one
echo tool, stateless HTTP) for a few seconds, so Atrium's calls per second can be given as a
ratio to it on the same machine.

    .venv/bin/python bench/soak_bench.py --database-url postgres://postgres@127.0.0.1:5432/postgres \
        --broker-url redis://127.0.0.1:6379/14 [--clients 50] [--seconds 60]
"""

import argparse
import asyncio
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from elements_bench import database_for, summary
from harness import APPROVE, BASE_DIR, REVIEW_LOOP, free_port, manage, processes_stop, server_env
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

USERS = 5
ONE_SCRIPT = """\
name: Soak script
start: work
nodes:
  work:
    type: script
    script: 'echo "{\\"sum\\": $((2 + 3))}"'
    timeout: 30
    transitions: {success: done, failure: done}
  done: {type: end, output: "{{ work.sum }}"}
"""
G = {"global": True}
AQL_CREATE, AQL_READ, AQL_UPDATE, AQL_EXECUTE = (f"mcp_aql_{e}" for e in ("create", "read", "update", "execute"))

BARE_SERVER = """\
import sys
from mcp.server.fastmcp import FastMCP

server = FastMCP("bare", host="127.0.0.1", port=int(sys.argv[1]), stateless_http=True, json_response=True,
                 log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    return text


server.run(transport="streamable-http")
"""


@dataclass
class Ledger:
    """What the server acknowledged, and what went wrong, across every client."""

    keys: dict[str, set[str]] = field(default_factory=dict)  # username -> metadata keys
    lines: dict[str, list[str]] = field(default_factory=dict)  # username -> journal lines
    runs: list[str] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)
    calls: int = 0

    def timed(self, kind: str, seconds: float) -> None:
        self.latencies.setdefault(kind, []).append(seconds)
        self.calls += 1


class Client:
    def __init__(self, session: ClientSession, username: str, number: int, ledger: Ledger) -> None:
        self.session, self.username, self.number, self.ledger = session, username, number, ledger
        self.counter = itertools.count()

    async def call(self, kind: str, tool: str, arguments: dict) -> dict | None:
        began = time.perf_counter()
        result = await self.session.call_tool(tool, arguments)
        self.ledger.timed(kind, time.perf_counter() - began)
        body = json.loads(result.content[0].text)
        failed = result.isError or (isinstance(body, dict) and ("error" in body or body.get("success") is False))
        if failed:
            self.ledger.errors[f"{kind}: {str(body.get('error', body))[:80]}"] += 1
            return None
        return body

    async def aql(self, kind: str, tool: str, operation: str, element_type: str | None, params: dict) -> dict | None:
        arguments = {"operation": operation, "params": params, **({"element_type": element_type} if element_type
                                                                   else {})}
        began = time.perf_counter()
        result = await self.session.call_tool(tool, arguments)
        body = json.loads(result.content[0].text)
        if not body["success"] and "confirmation" in body:
            await self.session.call_tool(AQL_EXECUTE, {"operation": "confirm_operation",
                                                       "params": {"operation": operation}})
            result = await self.session.call_tool(tool, arguments)
            body = json.loads(result.content[0].text)
        self.ledger.timed(kind, time.perf_counter() - began)
        if not body["success"]:
            self.ledger.errors[f"{kind}: {str(body.get('error'))[:80]}"] += 1
            return None
        return body

    async def read(self, turn: int) -> None:
        if turn % 3 == 0:
            await self.aql("read", AQL_READ, "get_element", "skill", {"element_name": "ledger"})
        elif turn % 3 == 1:
            await self.call("read", "list_workflows", G)
        else:
            await self.call("read", "search_docs", {"query": "cancel a run"})

    async def write(self) -> None:
        mark = f"c{self.number}-{next(self.counter)}"
        if await self.aql("write", AQL_UPDATE, "edit_element", "skill",
                          {"element_name": "ledger", "input": {"metadata": {mark: True}}}):
            self.ledger.keys.setdefault(self.username, set()).add(mark)
        if await self.aql("write", AQL_CREATE, "addEntry", None, {"element_name": "journal", "content": mark}):
            self.ledger.lines.setdefault(self.username, []).append(mark)

    async def run(self) -> None:
        started = await self.call("run", "start_workflow", {"workflow_id": "soak-steps", "context": {"topic": "x"},
                                                            **G})
        if started is None:
            return
        result = started
        for answer in ("A draft", APPROVE):
            arguments = {"run_id": started["runId"], "response": answer, **G}
            step = (result.get("pendingStep") or {}).get("stepId")
            if step:
                arguments["step_id"] = step
            result = await self.call("run", "advance_run", arguments)
            if result is None:
                return
        if result.get("status") == "completed":
            self.ledger.runs.append(started["runId"])
        else:
            self.ledger.errors[f"run: ended {result.get('status')}"] += 1

    async def script(self) -> None:
        started = await self.call("script", "start_workflow", {"workflow_id": "soak-script", **G})
        if started is not None:
            self.ledger.scripts.append(started["runId"])


async def client_loop(url: str, token: str, username: str, number: int, deadline: float, ledger: Ledger) -> None:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    try:
        async with http, streamable_http_client(url, http_client=http) as (read, write, _), \
                ClientSession(read, write) as session:
            await session.initialize()
            client = Client(session, username, number, ledger)
            for turn in itertools.count(number):
                if time.monotonic() >= deadline:
                    return
                step = turn % 6
                if step in (0, 3):
                    await client.read(turn)
                elif step in (1, 4):
                    await client.write()
                elif step == 2:
                    await client.run()
                else:
                    await client.script()
    except Exception as exc:  # a client that dies is a finding, not a crash of the benchmark
        ledger.errors[f"client died: {type(exc).__name__}: {str(exc)[:80]}"] += 1


async def bare_loop(url: str, deadline: float, latencies: list[float]) -> None:
    async with httpx.AsyncClient(timeout=60) as http, \
            streamable_http_client(url, http_client=http) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        while time.monotonic() < deadline:
            began = time.perf_counter()
            await session.call_tool("echo", {"text": "x"})
            latencies.append(time.perf_counter() - began)


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(argv, cwd=BASE_DIR, env=env, stdout=out, stderr=out)


def wait_for(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer:\n{log.read_text()[-2000:]}")


def verify(ledger: Ledger, env: dict[str, str]) -> dict:
    """Read the rows back: every acknowledged write exactly once, every run stepped exactly once."""
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "SECRET_KEY", "DEBUG", "ATRIUM_VAULT_KEYS")})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(BASE_DIR))
    import django

    django.setup()
    from django.db import connections

    from elements.models import Element, MemoryEntry
    from runs.models import NodeRun, Run, Turn

    lost_keys = duplicated_lines = lost_lines = 0
    for username, keys in ledger.keys.items():
        stored = Element.objects.get(owner__username=username, element_type="skill", name="ledger").metadata
        lost_keys += len(keys - set(stored))
    for username, lines in ledger.lines.items():
        stored = Counter(MemoryEntry.objects.filter(memory__owner__username=username, memory__name="journal")
                         .values_list("content", flat=True))
        lost_lines += sum(1 for line in lines if stored[line] == 0)
        duplicated_lines += sum(1 for line in lines if stored[line] > 1)

    bad_runs = 0
    for run_id in ledger.runs:
        visits = Counter(NodeRun.objects.filter(run_id=run_id).values_list("node_id", flat=True))
        turns = Turn.objects.filter(node_run__run_id=run_id).count()
        status = Run.objects.values_list("status", flat=True).get(pk=run_id)
        bad_runs += visits != Counter({"draft": 1, "review": 1, "done": 1}) or turns != 2 or status != "completed"

    # Scripts finish in the worker: give the queue time to drain before judging them.
    settle = time.monotonic() + 300
    while Run.objects.filter(pk__in=ledger.scripts, status__in=("running", "pending")).exists() and \
            time.monotonic() < settle:
        time.sleep(1)
    script_status = Counter(Run.objects.filter(pk__in=ledger.scripts).values_list("status", flat=True))
    bad_scripts = sum(
        Counter(NodeRun.objects.filter(run_id=run_id, node_id="work").values_list("status", flat=True))
        != Counter({"completed": 1}) for run_id in ledger.scripts)
    outputs = Counter(json.dumps(o) for o in Run.objects.filter(pk__in=ledger.scripts).values_list("output", flat=True))
    connections.close_all()
    return {
        "acknowledged": {"metadata_keys": sum(map(len, ledger.keys.values())),
                         "journal_lines": sum(map(len, ledger.lines.values())),
                         "runs_completed": len(ledger.runs), "scripts_started": len(ledger.scripts)},
        "lost_metadata_keys": lost_keys, "lost_journal_lines": lost_lines, "duplicated_journal_lines": duplicated_lines,
        "runs_not_stepped_exactly_once": bad_runs, "script_runs_by_status": dict(script_status),
        "script_runs_not_run_exactly_once": bad_scripts, "script_outputs": dict(outputs),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--bare-seconds", type=float, default=15)
    parser.add_argument("--database-url", required=True, help="a PostgreSQL server URL; a scratch database is made")
    parser.add_argument("--broker-url", required=True, help="a Redis URL for the Celery worker")
    parser.add_argument("--web-concurrency", default="2")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="soak-", dir=BASE_DIR / "var"))
    url, drop = database_for(args.database_url, 0, workdir)
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    env = server_env(url, CELERY_BROKER_URL=args.broker_url, CACHE_URL=args.broker_url.rsplit("/", 1)[0] + "/15",
                     ATRIUM_TOOL_CALLS_PER_MINUTE="1000000", WEB_CONCURRENCY=args.web_concurrency, PORT=str(port),
                     ATRIUM_PUBLIC_URL=public)
    report: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                    "clients": args.clients, "seconds": args.seconds}
    processes: list[subprocess.Popen] = []
    try:
        manage(env, "migrate", "--no-input")
        manage(env, "import_docs")
        for workflow_id, text in (("soak-steps", REVIEW_LOOP), ("soak-script", ONE_SCRIPT)):
            (workdir / "flows").mkdir(exist_ok=True)
            (workdir / "flows" / f"{workflow_id}.yaml").write_text(text)
        tokens = {}
        for n in range(USERS):
            username = f"soak{n}"
            tokens[username] = manage(env, "issue_token", username, "--create-user").strip().splitlines()[-1]
            manage(env, "sync_workflows", str(workdir / "flows"), "--global", "--user", username)
        server_log, worker_log = workdir / "server.log", workdir / "worker.log"
        processes.append(start([sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi"],
                               env, server_log))
        processes.append(start([sys.executable, "-m", "celery", "-A", "config", "worker", "--concurrency", "2",
                                "--loglevel", "WARNING"], env, worker_log))
        wait_for(f"{public}/healthz", processes[0], server_log)
        asyncio.run(setup_elements(f"{public}/mcp", tokens))

        ledger = Ledger()
        users = list(tokens)
        began = time.monotonic()
        deadline = began + args.seconds

        async def soak() -> None:
            await asyncio.gather(*(client_loop(f"{public}/mcp", tokens[users[n % USERS]], users[n % USERS], n,
                                               deadline, ledger) for n in range(args.clients)))

        asyncio.run(soak())
        elapsed = time.monotonic() - began
        report["atrium"] = {"calls": ledger.calls, "calls_per_s": round(ledger.calls / elapsed, 1),
                            "latency": {kind: summary(samples) for kind, samples in ledger.latencies.items()},
                            "errors": dict(ledger.errors)}
        report["verified"] = verify(ledger, env)

        bare_port = free_port()
        bare_log = workdir / "bare.log"
        bare_file = workdir / "bare_server.py"
        bare_file.write_text(BARE_SERVER)
        processes.append(start([sys.executable, str(bare_file), str(bare_port)], env, bare_log))
        wait_for(f"http://127.0.0.1:{bare_port}/mcp", processes[-1], bare_log)
        bare: list[float] = []
        bare_began = time.monotonic()

        async def bare_soak() -> None:
            end = time.monotonic() + args.bare_seconds
            await asyncio.gather(*(bare_loop(f"http://127.0.0.1:{bare_port}/mcp", end, bare)
                                   for _ in range(args.clients)))

        asyncio.run(bare_soak())
        bare_rate = len(bare) / (time.monotonic() - bare_began)
        report["bare_sdk"] = {"calls": len(bare), "calls_per_s": round(bare_rate, 1), "latency": summary(bare)}
        report["atrium_to_bare_calls_per_s"] = round(report["atrium"]["calls_per_s"] / bare_rate, 3)
    finally:
        processes_stop(processes)
        drop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))


async def setup_elements(url: str, tokens: dict[str, str]) -> None:
    for token in tokens.values():
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        async with http, streamable_http_client(url, http_client=http) as (read, write, _), \
                ClientSession(read, write) as session:
            await session.initialize()
            client = Client(session, "setup", -1, Ledger())
            assert await client.aql("setup", AQL_CREATE, "create_element", "skill",
                                    {"element_name": "ledger", "description": "Soak ledger", "content": "Keys."})
            assert await client.aql("setup", AQL_CREATE, "create_element", "memory",
                                    {"element_name": "journal", "description": "Soak journal"})


if __name__ == "__main__":
    main()
