"""Atrium's MCP calls beside the SDK's own floor, in one run on one machine.

The floor is bench/floor_server.py: a bare server of the SDK version Atrium runs, answering a fixed
element. Both are driven by the official SDK client of the current major version (bench/sdk_load.py
in the venv of tests/live/sdk/requirements.txt): get_element, list_elements page 1 and
search_elements (a word in 1% of the elements) one at a time (p50, p95), then a read mix of the
three from 1, 8 and 32 concurrent clients (calls per second), over stdio and over HTTP (gunicorn
with one process, and with two). Every figure is also given as a ratio to the floor's.

    .venv/bin/python bench/protocol_bench.py [--sizes 1000,10000] [--calls 300] [--mix-seconds 10]
        [--database-url postgres://postgres@127.0.0.1:5432/postgres] [--clients 1,8,32] [--processes 1,2]
"""

import argparse
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
from elements_bench import NEEDLE, seeded
from harness import BASE_DIR, free_port, processes_stop

sys.path.insert(0, str(BASE_DIR))
from tests.live.sdk_current import current_sdk_python


def cases(size: int) -> dict[str, list]:
    read = "mcp_aql_read"
    return {
        "get_element": [read, {"operation": "get_element", "element_type": "skill",
                               "params": {"element_name": f"skill-{size // 2:06d}"}}],
        "list_page_1": [read, {"operation": "list_elements", "element_type": "skill", "params": {"page": 1}}],
        "search": [read, {"operation": "search_elements", "params": {"query": NEEDLE}}],
    }


def load(python: Path, spec: dict) -> dict:
    done = subprocess.run([str(python), str(BASE_DIR / "bench" / "sdk_load.py")], input=json.dumps(spec),
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout)


def wait_until_up(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited")
        try:
            httpx.post(url, json={}, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not start")


def floor(python: Path, args: argparse.Namespace) -> dict:
    script = str(BASE_DIR / "bench" / "floor_server.py")
    spec = {"cases": cases(10_000), "calls": args.calls, "clients": args.client_counts, "mix_seconds": args.mix_seconds}
    result = {"stdio": load(python, {**spec, "server": {"command": [sys.executable, script, "stdio"],
                                                          "env": dict(os.environ)}})}
    port = free_port()
    server = subprocess.Popen([sys.executable, script, "http", str(port)], cwd=BASE_DIR)
    try:
        wait_until_up(f"http://127.0.0.1:{port}/mcp", server)
        result["http"] = load(python, {**spec, "server": {"url": f"http://127.0.0.1:{port}/mcp", "token": "none"}})
    finally:
        processes_stop([server])
    return result


def atrium(python: Path, env: dict[str, str], token: str, size: int, args: argparse.Namespace) -> dict:
    spec = {"cases": cases(size), "calls": args.calls, "clients": args.client_counts, "mix_seconds": args.mix_seconds}
    result = {"stdio": load(python, {**spec, "server": {
        "command": [sys.executable, str(BASE_DIR / "manage.py"), "mcp_stdio", "--user", "bench"], "env": env}})}
    for processes in args.process_counts:
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi",
                                   "--bind", f"127.0.0.1:{port}"], cwd=BASE_DIR,
                                  env={**env, "WEB_CONCURRENCY": str(processes)})
        try:
            wait_until_up(f"http://127.0.0.1:{port}/mcp", server)
            result[f"http_{processes}p"] = load(python, {**spec, "server": {"url": f"http://127.0.0.1:{port}/mcp",
                                                                             "token": token}})
        finally:
            processes_stop([server])
    return result


def ratios(figures: dict, floor_figures: dict) -> dict:
    """Each latency as a multiple of the floor's; each throughput as a fraction of it."""
    out = {"latency": {}, "throughput": {}}
    for name, latency in figures["latency"].items():
        out["latency"][name] = round(latency["p50_ms"] / floor_figures["latency"][name]["p50_ms"], 2)
    for clients, rate in figures.get("throughput", {}).items():
        out["throughput"][clients] = round(rate / floor_figures["throughput"][clients], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--mix-seconds", type=float, default=10)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--database-url")
    args = parser.parse_args()
    args.client_counts = [int(c) for c in args.clients.split(",")]
    args.process_counts = [int(p) for p in args.processes.split(",")]

    python = current_sdk_python()
    sdk = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    from importlib.metadata import version

    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "server_sdk": version("mcp"), "client_sdk": sdk,
              "database": "postgresql" if args.database_url else "sqlite", "floor": floor(python, args), "sizes": {}}
    print(json.dumps({"floor": report["floor"]}), file=sys.stderr)
    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=BASE_DIR / "var"))
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            with seeded(args.database_url, size, workdir) as (env, token, _):
                figures = atrium(python, env, token, size, args)
            entry = {kind: {**measured, "vs_floor": ratios(measured, report["floor"][kind.split("_")[0]])}
                     for kind, measured in figures.items()}
            report["sizes"][size] = entry
            print(json.dumps({size: entry}), file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
