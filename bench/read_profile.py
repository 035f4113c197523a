"""Where one read's time goes, in process: each statement's share, and the rest.

Seeds N skills (bench/elements_bench.py's portfolio) on a fresh database, then, in a process of its
own, calls get_element, list_elements page 1 and search_elements through /mcp with Django's test
client (2026-07-28, stateless: no transport, no client SDK) 300 times each after warm-up, and prints
for each: the p50 of the whole call, the p50 of each SQL statement it ran, and what is left for
Python (argument checks, the tool, output schema check, JSON).

    .venv/bin/python bench/read_profile.py [--size 10000] [--database-url postgres://...]

With PROFILE_CASE=get_element (or list_page_1, search) set, it also prints cProfile's 60 costliest
functions of that read, by cumulative time, to stderr.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from elements_bench import seeded
from harness import BASE_DIR

PROFILE = r"""
import json, os, statistics, sys, time
sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django
django.setup()
from django.db import connection
from django.test import Client
sys.path.insert(0, "bench")
from protocol_bench import MIX, cases

size, token = int(sys.argv[1]), sys.argv[2]
client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_MCP_PROTOCOL_VERSION="2026-07-28",
                HTTP_ACCEPT="application/json, text/event-stream", HTTP_MCP_METHOD="tools/call")
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "profile", "version": "1"}}


def caller_of(tool, arguments):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": META}})

    def call():
        response = client.post("/mcp", body, content_type="application/json", HTTP_MCP_NAME=tool)
        assert response.status_code == 200 and b'"isError": false' in response.content, response.content[:300]
    return call


report = {}
for name in MIX:
    call = caller_of(*cases(size)[name])
    for _ in range(20):
        call()
    totals, statements = [], {}

    def timed(execute, sql, params, many, context):
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements.setdefault(sql[:70], []).append(time.perf_counter() - began)

    for _ in range(300):
        with connection.execute_wrapper(timed):
            began = time.perf_counter()
            call()
            totals.append(time.perf_counter() - began)
    p50 = statistics.median(totals) * 1000
    # A statement seen in fewer calls than all (the token, once a second) is left out of the sum.
    sql = {text: round(statistics.median(times) * 1000, 3) for text, times in statements.items() if len(times) >= 300}
    report[name] = {"call_p50_ms": round(p50, 3), "sql_p50_ms": sql,
                    "python_ms": round(p50 - sum(sql.values()), 3)}
if os.environ.get("PROFILE_CASE"):
    import cProfile, pstats
    call = caller_of(*cases(size)[os.environ["PROFILE_CASE"]])
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(300):
        call()
    profile.disable()
    pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(60)
print(json.dumps(report, indent=2))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=BASE_DIR / "var"))
    try:
        with seeded(args.database_url, args.size, workdir) as (env, token, _):
            done = subprocess.run([sys.executable, "-c", PROFILE, str(args.size), token], cwd=BASE_DIR,
                                  env={**env, "DEBUG": "1"}, capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            if os.environ.get("PROFILE_CASE"):
                print(done.stderr, file=sys.stderr)
            print(json.dumps({"size": args.size, "database": "postgresql" if args.database_url else "sqlite",
                              **json.loads(done.stdout)}, indent=2))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
