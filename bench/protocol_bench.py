"""Atrium's MCP calls beside the SDK's own floor, in one run on one machine.

The floor is bench/floor_server.py: a bare server of the SDK version Atrium runs, answering a fixed
element. Both are driven by the official SDK client of the current major version (bench/sdk_load.py
in the venv of tests/live/sdk/requirements.txt): get_element, list_elements page 1 and
search_elements (a word in 1% of the elements) one at a time (p50, p95), and the middle page of
the list by its number and by the cursor of the page before; then a read mix of the first
three from 1, 8 and 32 concurrent clients (calls per second), over stdio and over HTTP (gunicorn
with one process, and with two). At the first size it also runs a three-step workflow again and
again (start_workflow, then advance_run for a draft and a verdict) from 1 and 8 clients: runs
completed per second. Every figure is also given as a ratio to the floor's: a latency as a
multiple of it, a throughput as a fraction of it, and runs as the calls they took per second
(three a run) over the floor's calls per second with as many clients.

Each database named in --databases (`sqlite`, or a PostgreSQL URL) gets its own pass, the floor
measured again at its start. With --previous, a report this script wrote before, each figure is
also given as a ratio to the same figure there. The report is printed, and written to --out.

    .venv/bin/python bench/protocol_bench.py [--sizes 1000,10000,100000] [--calls 300] [--mix-seconds 8]
        [--databases sqlite,postgres://postgres@127.0.0.1:5432/postgres] [--clients 1,8,32] [--processes 1,2]
        [--run-clients 1,8] [--run-seconds 10] [--previous bench/results/protocol.json] [--out FILE]
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
from harness import BASE_DIR, REVIEW_LOOP, free_port, manage, processes_stop

sys.path.insert(0, str(BASE_DIR))
from tests.live.sdk_current import current_sdk_python

# The read mix; the deep pages are timed one at a time only.
MIX = ["get_element", "list_page_1", "search"]
# The cursor of the page that follows page `page` of bench's skills (20 a page), as the server
# would give it: signed with the server's own key, so read in its environment.
CURSOR = """
from django.contrib.auth import get_user_model
from core.caller import Caller
from elements import selectors
from elements.types import ElementType
caller = Caller.trusted(get_user_model().objects.get(username="bench"), via="command")
query = selectors.ListQuery(element_type=ElementType.SKILL, page={page})
print(selectors.element_list(caller=caller, query=query)[1]["nextCursor"])
"""


def deep_page(size: int) -> int:
    """The middle page of `size` skills, 20 a page."""
    return max(2, size // 40)


def cases(size: int, cursor: str = "") -> dict[str, list]:
    """The reads timed; the deep page by cursor reads the same page as by number, given the cursor
    of the page before it (the floor, which answers anything alike, gets a dummy)."""
    read = "mcp_aql_read"

    def listing(params: dict) -> list:
        return [read, {"operation": "list_elements", "element_type": "skill", "params": params}]

    return {
        "get_element": [read, {"operation": "get_element", "element_type": "skill",
                               "params": {"element_name": f"skill-{size // 2:06d}"}}],
        "list_page_1": listing({"page": 1}),
        "search": [read, {"operation": "search_elements", "params": {"query": NEEDLE}}],
        "list_deep_page": listing({"page": deep_page(size)}),
        "list_deep_cursor": listing({"cursor": cursor or "none"}),
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
    spec = {"cases": cases(10_000), "mix": MIX, "calls": args.calls, "clients": args.client_counts,
            "mix_seconds": args.mix_seconds}
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


def atrium(python: Path, env: dict[str, str], token: str, size: int, args: argparse.Namespace, *,
           runs: bool) -> dict:
    cursor = manage(env, "shell", "-c", CURSOR.format(page=deep_page(size) - 1)).strip().splitlines()[-1]
    spec = {"cases": cases(size, cursor), "mix": MIX, "calls": args.calls, "clients": args.client_counts,
            "mix_seconds": args.mix_seconds}
    if runs:
        spec["runs"] = {"workflow_id": "bench", "clients": args.run_client_counts, "seconds": args.run_seconds}
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
    """Each latency as a multiple of the floor's; each throughput as a fraction of it; runs as the
    calls they took per second over the floor's calls per second with as many clients (over stdio,
    where the floor has one client and no throughput, over its get_element)."""
    out = {"latency": {}, "throughput": {}, "runs": {}}
    for name, latency in figures["latency"].items():
        out["latency"][name] = round(latency["p50_ms"] / floor_figures["latency"][name]["p50_ms"], 2)
    for clients, rate in figures.get("throughput", {}).items():
        out["throughput"][clients] = round(rate / floor_figures["throughput"][clients], 2)
    for clients, runs in figures.get("runs", {}).items():
        floor_rate = (floor_figures["throughput"].get(clients)
                      or 1000 / floor_figures["latency"]["get_element"]["p50_ms"])
        out["runs"][clients] = round(runs["runs_per_s"] * 3 / floor_rate, 2)
    return out


def against(figures: dict, previous: dict | None) -> dict:
    """Each figure as a ratio to the same figure of a previous report (now / then)."""
    if not previous:
        return {}
    out: dict = {}
    for name, latency in figures["latency"].items():
        if name in previous.get("latency", {}):
            out[f"{name}_p50"] = round(latency["p50_ms"] / previous["latency"][name]["p50_ms"], 2)
    for clients, rate in figures.get("throughput", {}).items():
        if clients in previous.get("throughput", {}):
            out[f"calls_per_s_{clients}"] = round(rate / previous["throughput"][clients], 2)
    for clients, runs in figures.get("runs", {}).items():
        if clients in previous.get("runs", {}):
            out[f"runs_per_s_{clients}"] = round(runs["runs_per_s"] / previous["runs"][clients]["runs_per_s"], 2)
    return out


def database_pass(python: Path, database: str, args: argparse.Namespace, previous: dict, workdir: Path) -> dict:
    """The floor, then Atrium at each size, on one database (`sqlite` or a PostgreSQL URL)."""
    base_url = None if database == "sqlite" else database
    result = {"floor": floor(python, args), "sizes": {}}
    print(json.dumps({"floor": result["floor"]}), file=sys.stderr)
    for index, size in enumerate(args.size_list):
        with seeded(base_url, size, workdir) as (env, token, _):
            flows = workdir / "flows"
            flows.mkdir(exist_ok=True)
            (flows / "bench.yaml").write_text(REVIEW_LOOP)
            manage(env, "sync_workflows", str(flows), "--global", "--user", "bench")
            figures = atrium(python, env, token, size, args, runs=index == 0)
        entry = {kind: {**measured, "vs_floor": ratios(measured, result["floor"][kind.split("_")[0]]),
                        "vs_previous": against(measured, previous.get("sizes", {}).get(str(size), {}).get(kind))}
                 for kind, measured in figures.items()}
        result["sizes"][str(size)] = entry
        print(json.dumps({size: entry}), file=sys.stderr)
    return result


def _figure(value: float, ratio: float | None) -> str:
    return f"{value:g} ({ratio:.2f})" if ratio is not None else f"{value:g}"


def tables(report: dict) -> str:
    """The report as docs/benchmarks.md shows it: per database, the floor's row, then Atrium's at
    each size and process count, each figure followed by its ratio to the floor in brackets."""
    lines = []
    for kind, result in report["databases"].items():
        floor_figures = result["floor"]
        lines += [f"{kind}:", "",
                  "| | stdio get / list / search, ms | HTTP get / list / search, ms "
                  "| HTTP calls/s at 1 / 8 / 32 clients | runs/s: stdio; HTTP 1 / 8 clients |",
                  "| --- | --- | --- | --- | --- |"]
        names = ("get_element", "list_page_1", "search")
        floor_row = ["floor", " / ".join(f"{floor_figures['stdio']['latency'][n]['p50_ms']:g}" for n in names),
                     " / ".join(f"{floor_figures['http']['latency'][n]['p50_ms']:g}" for n in names),
                     " / ".join(f"{v:g}" for v in floor_figures["http"]["throughput"].values()), ""]
        lines.append("| " + " | ".join(floor_row) + " |")
        for size, entry in result["sizes"].items():
            for kind_http in (k for k in entry if k.startswith("http_")):
                stdio = entry["stdio"] if kind_http == "http_1p" else None
                http = entry[kind_http]
                label = f"Atrium, {int(size):,}" + (f", {kind_http[5:-1]} processes" if kind_http != "http_1p" else "")
                row = [label,
                       " / ".join(_figure(stdio["latency"][n]["p50_ms"], stdio["vs_floor"]["latency"][n])
                                  for n in names) if stdio else "",
                       " / ".join(_figure(http["latency"][n]["p50_ms"], http["vs_floor"]["latency"][n]) for n in names),
                       " / ".join(_figure(rate, http["vs_floor"]["throughput"][clients])
                                  for clients, rate in http["throughput"].items()),
                       "; ".join(filter(None, [
                           " / ".join(_figure(r["runs_per_s"], (stdio or {}).get("vs_floor", {}).get("runs", {}).get(c))
                                      for c, r in (stdio or {}).get("runs", {}).items()),
                           " / ".join(_figure(r["runs_per_s"], http["vs_floor"]["runs"].get(c))
                                      for c, r in http.get("runs", {}).items())]))]
                lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        lines += deep_table(result)
    return "\n".join(lines)


def deep_table(result: dict) -> list[str]:
    """The middle page of the list by number and by cursor, beside page 1 (p50 ms, the ratio to
    the floor in brackets)."""
    names = ("list_page_1", "list_deep_page", "list_deep_cursor")
    lines = ["| | stdio page 1 / middle page by number / by cursor, ms | HTTP, ms |", "| --- | --- | --- |"]
    for size, entry in result["sizes"].items():
        measured = [entry[kind] for kind in ("stdio", "http_1p") if kind in entry]
        if not all(n in m["latency"] for m in measured for n in names):
            continue  # a report from before the deep pages were timed
        lines.append(f"| Atrium, {int(size):,} | " + " | ".join(
            " / ".join(_figure(m["latency"][n]["p50_ms"], m["vs_floor"]["latency"][n]) for n in names)
            for m in measured) + " |")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--mix-seconds", type=float, default=8)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--run-clients", default="1,8")
    parser.add_argument("--run-seconds", type=float, default=10)
    parser.add_argument("--databases", default="sqlite")
    parser.add_argument("--previous", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--table", type=Path, help="print the tables of a report written before, and stop")
    args = parser.parse_args()
    if args.table:
        print(tables(json.loads(args.table.read_text())))
        return
    args.size_list = [int(s) for s in args.sizes.split(",")]
    args.client_counts = [int(c) for c in args.clients.split(",")]
    args.process_counts = [int(p) for p in args.processes.split(",")]
    args.run_client_counts = [int(c) for c in args.run_clients.split(",")]
    previous = json.loads(args.previous.read_text())["databases"] if args.previous else {}

    python = current_sdk_python()
    sdk = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    from importlib.metadata import version

    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "date": time.strftime("%Y-%m-%d"), "server_sdk": version("mcp"), "client_sdk": sdk, "databases": {}}
    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=BASE_DIR / "var"))
    try:
        for database in args.databases.split(","):
            kind = "sqlite" if database == "sqlite" else "postgresql"
            report["databases"][kind] = database_pass(python, database, args, previous.get(kind, {}), workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
