"""Latency, throughput, SQL per call and server memory of /mcp tools/call.

Starts a real server (one gunicorn process with 8 threads, or one uvicorn process) on a fresh
database, then times `auth_status` calls sequentially and from concurrent clients, and counts the
SQL one call runs in-process.

    .venv/bin/python bench/mcp_roundtrip.py [--calls 500] [--concurrency 8] [--database-url URL]
                                            [--server gunicorn|uvicorn]

Without --database-url it uses a throwaway SQLite file under var/.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from harness import BASE_DIR, free_port, manage, memory_mib, server_env

ACCEPT = "application/json, text/event-stream"








class Session:
    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(headers={"Authorization": f"Bearer {token}", "Accept": ACCEPT}, timeout=30)
        self.url = url
        init = self.http.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
        init.raise_for_status()
        self.http.headers["Mcp-Session-Id"] = init.headers["Mcp-Session-Id"]
        self.http.headers["MCP-Protocol-Version"] = "2025-11-25"

    def call(self) -> float:
        started = time.perf_counter()
        response = self.http.post(self.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                  "params": {"name": "auth_status", "arguments": {}}})
        elapsed = time.perf_counter() - started
        assert response.status_code == 200 and response.json()["result"]["isError"] is False, response.text
        return elapsed


def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {"mean_ms": round(statistics.fmean(ms), 2), "p50_ms": round(ms[len(ms) // 2], 2),
            "p95_ms": round(ms[int(len(ms) * 0.95) - 1], 2), "max_ms": round(ms[-1], 2)}


def sql_per_call(env: dict[str, str]) -> int:
    """Statements one tools/call runs, counted in-process (bench/sql_per_call.py)."""
    out = subprocess.run([sys.executable, "bench/sql_per_call.py"], cwd=BASE_DIR, env=env, check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--database-url")
    parser.add_argument("--server", choices=["gunicorn", "uvicorn"], default="gunicorn",
                        help="uvicorn serves config.asgi; install it first (pip install uvicorn)")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=BASE_DIR / "var"))
    port = free_port()
    env = server_env(args.database_url or f"sqlite:///{workdir / 'bench.sqlite3'}",
                     ATRIUM_PUBLIC_URL=f"http://127.0.0.1:{port}")
    manage(env, "migrate", "--no-input")
    token = manage(env, "issue_token", "bench", "--create-user", "--label", "bench").strip().splitlines()[-1]

    commands = {
        "gunicorn": ["gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi", "--bind", f"127.0.0.1:{port}"],
        "uvicorn": ["uvicorn", "config.asgi:application", "--host", "127.0.0.1", "--port", str(port),
                    "--no-access-log", "--log-level", "warning"],
    }
    server = subprocess.Popen([sys.executable, "-m", *commands[args.server]], cwd=BASE_DIR, env=env)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(100):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        rss_idle = memory_mib(server.pid)
        session = Session(url, token)
        for _ in range(20):
            session.call()  # warm up
        started = time.perf_counter()
        sequential = [session.call() for _ in range(args.calls)]
        sequential_rps = args.calls / (time.perf_counter() - started)

        sessions = [Session(url, token) for _ in range(args.concurrency)]
        per_client = args.calls // args.concurrency
        started = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            runs = list(pool.map(lambda s: [s.call() for _ in range(per_client)], sessions))
        concurrent_rps = per_client * args.concurrency / (time.perf_counter() - started)
        rss_after = memory_mib(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=10)

    report = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "server": args.server,
        "database": env["DATABASE_URL"].split(":", 1)[0],
        "sequential": {**summary(sequential), "calls_per_s": round(sequential_rps, 1)},
        f"concurrent_{args.concurrency}": {**summary([s for r in runs for s in r]),
                                            "calls_per_s": round(concurrent_rps, 1)},
        "sql_statements_per_call": sql_per_call(env),
        "server_rss_mib": {"idle": round(rss_idle, 1), "after": round(rss_after, 1)},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
