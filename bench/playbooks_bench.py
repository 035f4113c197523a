"""Playbook executions started per second, by signed webhook deliveries and by playbooks_execute through /mcp,
and how soon a Celery worker carries them to their end.

One gunicorn server on PostgreSQL and one Celery worker (prefork, two processes, Redis broker). The
playbook, made through the REST API before any timing, has one capability step,
`atrium_tools.add_memory_entry`, adding a line to an existing memory, so an execution runs to its
end in the worker with no AI step. It has an enabled webhook trigger.

For each client count (1 and 4), the same number of executions (--deliveries, shared among the
clients) is started three ways, one after the other:

- signed webhook deliveries: POST /hooks/playbooks/<token>, each body different ({"memory": ...,
  "n": i}) and signed as Atrium signs its own (X-Atrium-Timestamp, X-Atrium-Signature), with one
  httpx async client per sender;
- `playbooks_execute` through /mcp, with one official-SDK ClientSession per client;
- the bare SDK server's `echo` (FastMCP, one tool, stateless HTTP, as in soak_bench.py), the floor.

Each start call's latency is recorded; starts/s is executions over the wall time of the starts.
After the last start the benchmark polls the runs' rows until every execution has ended, and
counts each measurement's memory entries: completed/s is executions over the time from the first
start to the last end. Each measurement writes to its own memory, so they start alike.

    .venv/bin/python bench/playbooks_bench.py --database-url postgres://postgres@127.0.0.1:5432/postgres \
        --broker-url redis://127.0.0.1:6379/13 [--deliveries 200] [--clients 1,4]
"""

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import psycopg
from elements_bench import database_for, summary
from harness import BASE_DIR, free_port, manage, processes_stop, server_env
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from soak_bench import BARE_SERVER, start, wait_for

# The project's own signing, as a sender would use it, from this checkout.
sys.path.insert(0, str(BASE_DIR))
from integrations.executors.webhook import signature

PLAN = {
    "input": {"type": "object", "required": ["memory", "n"],
              "properties": {"memory": {"type": "string"}, "n": {"type": "integer"}}},
    "steps": [{"id": "log", "title": "Log the delivery", "kind": "capability",
               "capability": "atrium_tools.add_memory_entry",
               "input": {"memory": "{{ context.memory }}", "content": "delivery {{ context.n }}"}}],
    "output": {"description": "The entry written", "value": "{{ log.entryId }}"},
}
WARM_UP = 5


def shares(total: int, clients: int) -> list[range]:
    return [range(c, total, clients) for c in range(clients)]


async def webhook_starts(url: str, secret: str, memory: str, clients: int, total: int,
                         latencies: list[float], ids: list[str], errors: Counter) -> None:
    async def sender(numbers: range) -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            for n in numbers:
                body = json.dumps({"memory": memory, "n": n}).encode()
                timestamp = str(int(time.time()))
                began = time.perf_counter()
                response = await http.post(url, content=body, headers={
                    "Content-Type": "application/json", "X-Atrium-Timestamp": timestamp,
                    "X-Atrium-Signature": signature(secret, timestamp, body)})
                latencies.append(time.perf_counter() - began)
                if response.status_code == 202:
                    ids.append(response.json()["executionId"])
                else:
                    errors[f"{response.status_code} {response.json().get('code')}"] += 1

    await asyncio.gather(*(sender(numbers) for numbers in shares(total, clients)))


async def sessions(stack: AsyncExitStack, url: str, token: str | None, clients: int) -> list[ClientSession]:
    """Open and initialise the clients' sessions before the clock starts."""
    opened = []
    for _ in range(clients):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        http = await stack.enter_async_context(httpx.AsyncClient(headers=headers, timeout=60))
        read, write, _ = await stack.enter_async_context(streamable_http_client(url, http_client=http))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        opened.append(session)
    return opened


async def execute_starts(url: str, token: str, playbook_id: str, memory: str, clients: int, total: int,
                         latencies: list[float], ids: list[str], errors: Counter) -> float:
    async def client(session: ClientSession, numbers: range) -> None:
        for n in numbers:
            began = time.perf_counter()
            result = await session.call_tool("playbooks_execute", {"playbookId": playbook_id,
                                                                   "input": {"memory": memory, "n": n}})
            latencies.append(time.perf_counter() - began)
            body = json.loads(result.content[0].text)
            if result.isError:
                errors[str(body.get("code", body))[:80]] += 1
            else:
                ids.append(body["executionId"])

    async with AsyncExitStack() as stack:
        opened = await sessions(stack, url, token, clients)
        began = time.perf_counter()
        await asyncio.gather(*(client(s, numbers) for s, numbers in zip(opened, shares(total, clients), strict=True)))
        return time.perf_counter() - began


async def bare_calls(url: str, clients: int, total: int, latencies: list[float]) -> float:
    async def client(session: ClientSession, numbers: range) -> None:
        for _ in numbers:
            began = time.perf_counter()
            await session.call_tool("echo", {"text": "x"})
            latencies.append(time.perf_counter() - began)

    async with AsyncExitStack() as stack:
        opened = await sessions(stack, url, None, clients)
        began = time.perf_counter()
        await asyncio.gather(*(client(s, numbers) for s, numbers in zip(opened, shares(total, clients), strict=True)))
        return time.perf_counter() - began


def ended(db: psycopg.Connection, ids: list[str], *, timeout: float = 600) -> tuple[float, Counter]:
    """Poll the runs' rows until every one has ended; when that was (perf_counter), and their statuses."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = Counter(dict(db.execute("SELECT status, count(*) FROM runs_run WHERE id = ANY(%s) GROUP BY status",
                                           (ids,)).fetchall()))
        if sum(statuses[s] for s in ("completed", "failed", "cancelled")) == len(ids) or time.monotonic() > deadline:
            return time.perf_counter(), statuses
        time.sleep(0.05)


def entries(db: psycopg.Connection, memory: str) -> int:
    return db.execute("SELECT count(*) FROM elements_memoryentry e JOIN elements_element m ON m.id = e.memory_id "
                      "WHERE m.element_type = 'memory' AND m.name = %s", (memory,)).fetchone()[0]


def measure(kind: str, clients: int, total: int, memory: str, setup: dict, db: psycopg.Connection) -> dict:
    latencies: list[float] = []
    ids: list[str] = []
    errors: Counter = Counter()
    began = time.perf_counter()
    if kind == "webhook":
        asyncio.run(webhook_starts(setup["webhookUrl"], setup["secret"], memory, clients, total, latencies, ids,
                                   errors))
        starting = time.perf_counter() - began
    else:
        starting = asyncio.run(execute_starts(setup["mcp"], setup["token"], setup["playbookId"], memory, clients,
                                              total, latencies, ids, errors))
        began = time.perf_counter() - starting
    starts_done = time.perf_counter()
    done, statuses = ended(db, ids)
    return {"clients": clients, "executions": len(ids), "start": summary(latencies),
            "starts_per_s": round(len(ids) / starting, 1), "completed_per_s": round(len(ids) / (done - began), 1),
            "all_ended_after_s": round(done - began, 2), "drain_after_last_start_s": round(done - starts_done, 2),
            "statuses": dict(statuses), "memory_entries": entries(db, memory), "errors": dict(errors)}


def setup_playbook(public: str, token: str, memories: list[str]) -> dict:
    api = httpx.Client(base_url=public, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    with api:
        for name in memories:
            made = api.post("/api/elements/memory/", json={"element_name": name, "description": "Bench log"})
            assert made.status_code == 201, made.text
        made = api.post("/api/playbooks/", json={"name": "Bench logger", "goal": "Log each start", "plan": PLAN})
        assert made.status_code == 201, made.text
        playbook_id = made.json()["playbookId"]
        hook = api.post(f"/api/playbooks/{playbook_id}/triggers/", json={"type": "webhook", "enabled": True})
        assert hook.status_code == 201, hook.text
        return {"playbookId": playbook_id, "webhookUrl": hook.json()["webhookUrl"], "secret": hook.json()["secret"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True,
                        help="a PostgreSQL server URL (postgres://...); a scratch database is made next to it")
    parser.add_argument("--broker-url", required=True,
                        help="a Redis URL for the Celery worker (redis://host:port/N); the cache uses N + 1")
    parser.add_argument("--deliveries", type=int, default=200, help="executions started per measurement")
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--web-concurrency", default="1")
    args = parser.parse_args()
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        parser.error("--database-url must be a PostgreSQL URL (postgres://...): the benchmark measures PostgreSQL")
    client_counts = [int(c) for c in args.clients.split(",")]

    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=BASE_DIR / "var"))
    url, drop = database_for(args.database_url, "playbooks", workdir)
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    broker_base, broker_db = args.broker_url.rsplit("/", 1)
    # A queue of the benchmark's own: the other tasks on that broker never reach this worker. The
    # runs are watched by id, so a message an interrupted earlier run left there changes nothing.
    env = server_env(url, CELERY_BROKER_URL=args.broker_url, CACHE_URL=f"{broker_base}/{int(broker_db) + 1}",
                     CELERY_TASK_DEFAULT_QUEUE="bench-playbooks",
                     ATRIUM_CAPABILITY_EXECUTIONS_PER_MINUTE="0", WEB_CONCURRENCY=args.web_concurrency,
                     PORT=str(port), ATRIUM_PUBLIC_URL=public)
    report: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                    "database": "postgresql", "worker": "celery prefork, concurrency 2",
                    "web_concurrency": args.web_concurrency, "deliveries": args.deliveries,
                    # Others' work on the machine moves these figures: say how busy it was.
                    "load_average_before": os.getloadavg(), "results": []}
    processes: list[subprocess.Popen] = []
    try:
        manage(env, "migrate", "--no-input")
        manage(env, "sync_catalogue")
        token = manage(env, "issue_token", "bench", "--create-user").strip().splitlines()[-1]
        server_log, worker_log, bare_log = workdir / "server.log", workdir / "worker.log", workdir / "bare.log"
        processes.append(start([sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi"],
                               env, server_log))
        processes.append(start([sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "prefork",
                                "--concurrency", "2", "--loglevel", "WARNING"], env, worker_log))
        bare_port = free_port()
        bare_file = workdir / "bare_server.py"
        bare_file.write_text(BARE_SERVER)
        processes.append(start([sys.executable, str(bare_file), str(bare_port)], env, bare_log))
        wait_for(f"{public}/healthz", processes[0], server_log)
        wait_for(f"http://127.0.0.1:{bare_port}/mcp", processes[2], bare_log)
        bare_url = f"http://127.0.0.1:{bare_port}/mcp"

        memories = ["bench-warm-webhook", "bench-warm-execute"] + [
            f"bench-{kind}-{clients}" for clients in client_counts for kind in ("webhook", "execute")]
        setup = {**setup_playbook(public, token, memories), "mcp": f"{public}/mcp", "token": token}
        with psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True) as db:
            # Warm-up: the server's first requests, the worker's first tasks (it is ready once they end).
            warm = [measure(kind, 1, WARM_UP, f"bench-warm-{kind}", setup, db) for kind in ("webhook", "execute")]
            asyncio.run(bare_calls(bare_url, 1, 20, []))
            report["warm_up"] = [{k: w[k] for k in ("executions", "statuses", "errors")} for w in warm]
            for clients in client_counts:
                bare: list[float] = []
                elapsed = asyncio.run(bare_calls(bare_url, clients, args.deliveries, bare))
                floor = len(bare) / elapsed
                row = {"clients": clients, "bare_sdk_echo": {"calls": len(bare), "latency": summary(bare),
                                                             "calls_per_s": round(floor, 1)}}
                for kind in ("webhook", "execute"):
                    result = measure(kind, clients, args.deliveries, f"bench-{kind}-{clients}", setup, db)
                    result["starts_to_bare"] = round(result["starts_per_s"] / floor, 3)
                    result["completed_to_bare"] = round(result["completed_per_s"] / floor, 3)
                    row[kind] = result
                report["results"].append(row)
                print(json.dumps(row), file=sys.stderr)
        report["load_average_after"] = os.getloadavg()
    except BaseException:
        for log in sorted(workdir.glob("*.log")):
            print(f"--- {log.name}\n{log.read_text()[-3000:]}", file=sys.stderr)
        raise
    finally:
        processes_stop(processes)
        drop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
