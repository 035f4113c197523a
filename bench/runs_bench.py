"""Runs started and advanced per second through /mcp (gunicorn, Streamable HTTP, the official SDK client).

Each client repeatedly starts a three-step workflow (ai_agent -> ai_judge -> end), answers both
steps with advance_run, and records the latency of every call. With --clients N, N clients do
this at once, each with its own MCP session.

    .venv/bin/python bench/runs_bench.py [--runs 100] [--clients 1,4]
        [--database-url postgres://postgres@127.0.0.1:5432/postgres]
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
from pathlib import Path

import httpx
from elements_bench import database_for, summary
from harness import APPROVE, BASE_DIR, REVIEW_LOOP, free_port, manage, server_env
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

G = {"global": True}


async def client_loop(url: str, token: str, runs: int, starts: list[float], advances: list[float]) -> None:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, streamable_http_client(url, http_client=http) as (read, write, _), \
            ClientSession(read, write) as session:
        await session.initialize()
        for _ in range(runs):
            began = time.perf_counter()
            started = await session.call_tool("start_workflow", {"workflow_id": "bench", "context": {"topic": "x"},
                                                                 **G})
            starts.append(time.perf_counter() - began)
            run_id = json.loads(started.content[0].text)["runId"]
            for answer in ("A draft", APPROVE):
                began = time.perf_counter()
                result = await session.call_tool("advance_run", {"run_id": run_id, "response": answer, **G})
                advances.append(time.perf_counter() - began)
                assert not result.isError, result.content[0].text
            assert json.loads(result.content[0].text)["status"] == "completed"


async def measure(url: str, token: str, clients: int, runs: int) -> dict:
    starts: list[float] = []
    advances: list[float] = []
    began = time.perf_counter()
    await asyncio.gather(*(client_loop(url, token, runs, starts, advances) for _ in range(clients)))
    elapsed = time.perf_counter() - began
    return {"clients": clients, "runs": clients * runs, "start_workflow": summary(starts),
            "advance_run": summary(advances), "runs_completed_per_s": round(clients * runs / elapsed, 1),
            "calls_per_s": round(clients * runs * 3 / elapsed, 1)}


def serve(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi"],
                              cwd=BASE_DIR, env={**env, "PORT": str(port), "ATRIUM_PUBLIC_URL": url},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return server, f"{url}/mcp"
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("the server did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100, help="runs per client")
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--database-url")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=BASE_DIR / "var"))
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "database": "postgresql" if args.database_url else "sqlite", "results": []}
    url, drop = database_for(args.database_url, 0, workdir)
    env = server_env(url)
    try:
        manage(env, "migrate", "--no-input")
        token = manage(env, "issue_token", "bench", "--create-user").strip().splitlines()[-1]
        config = workdir / "bench.yaml"
        config.write_text(REVIEW_LOOP)
        manage(env, "sync_workflows", str(workdir), "--global", "--user", "bench")
        server, mcp_url = serve(env)
        try:
            for clients in (int(c) for c in args.clients.split(",")):
                result = asyncio.run(measure(mcp_url, token, clients, args.runs))
                report["results"].append(result)
                print(json.dumps(result), file=sys.stderr)
        finally:
            server.terminate()
            server.wait(timeout=20)
    finally:
        drop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
