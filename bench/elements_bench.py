"""Element operations at 1k, 10k and 100k elements, through the official MCP SDK client.

For each portfolio size it seeds one user's elements on a fresh database, then measures
get_element, list_elements (first page and a deep page) and search_elements (a word in about 1%
of the elements): p50/p95 and calls per second, over HTTP (gunicorn, /mcp on loopback) and over
stdio (manage.py mcp_stdio); plus the time from starting the server process to the first
tools/list answer, and the server's peak resident memory.

    .venv/bin/python bench/elements_bench.py [--sizes 1000,10000,100000] [--calls 200]
        [--database-url postgres://postgres@127.0.0.1:5432/postgres] [--transports http,stdio]

With a PostgreSQL URL it creates and drops one database per size next to the one named.
"""

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from harness import BASE_DIR, free_port, manage, memory_mib, server_env
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

NEEDLE = "zephyr"

SEED = """
import os, random, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from django.utils import timezone
from accounts.models import User
from elements.models import Element
size = int(os.environ["BENCH_SIZE"])
user = User.objects.get(username="bench")
words = "alpha beta gamma delta review debug deploy refactor test python rust sql cache queue".split()
rng = random.Random(7)
now = timezone.now()
batch = []
for i in range(size):
    text = " ".join(rng.choice(words) for _ in range(60))
    if i % 100 == 0:
        text += " NEEDLE"
    batch.append(Element(owner=user, element_type="skill", name=f"skill-{i:06d}", unique_id=f"skill_{i}",
                         description=f"Skill number {i}", content=text, tags=[rng.choice(words)],
                         version="1.0.0", version_key="000001.000000.000000~", created=now, modified=now))
    if len(batch) == 2000:
        Element.objects.bulk_create(batch)
        batch = []
Element.objects.bulk_create(batch)
print(Element.objects.filter(owner=user).count())
""".replace("NEEDLE", NEEDLE)








def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {"p50_ms": round(ms[len(ms) // 2], 2), "p95_ms": round(ms[max(0, int(len(ms) * 0.95) - 1)], 2),
            "calls_per_s": round(len(ms) / (sum(ms) / 1000), 1)}


async def measure(session: ClientSession, size: int, calls: int) -> dict[str, dict[str, float]]:
    rng = random.Random(11)
    deep_page = max(1, size // 20 - 1)

    async def read(params: dict, element_type: str | None = "skill") -> dict:
        arguments = {"operation": params.pop("operation"), "params": params}
        if element_type:
            arguments["element_type"] = element_type
        result = await session.call_tool("mcp_aql_read", arguments)
        envelope = json.loads(result.content[0].text)
        assert envelope["success"], envelope
        return envelope["data"]

    cases = {
        "get_element": lambda: read({"operation": "get_element", "element_name": f"skill-{rng.randrange(size):06d}"}),
        "list_first_page": lambda: read({"operation": "list_elements", "page": 1}),
        "list_deep_page": lambda: read({"operation": "list_elements", "page": deep_page}),
        "search_1pct": lambda: read({"operation": "search_elements", "query": NEEDLE}, None),
    }
    first = await cases["search_1pct"]()
    assert first["pagination"]["totalItems"] == -(-size // 100), first["pagination"]
    listed = await cases["list_first_page"]()
    assert listed["pagination"]["totalItems"] == size
    results = {}
    for name, case in cases.items():
        for _ in range(10):
            await case()
        samples = []
        for _ in range(calls):
            started = time.perf_counter()
            await case()
            samples.append(time.perf_counter() - started)
        results[name] = summary(samples)
    return results


async def over_http(env: dict[str, str], token: str, size: int, calls: int) -> dict:
    port = free_port()
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi",
                               "--bind", f"127.0.0.1:{port}"], cwd=BASE_DIR, env=env)
    try:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        async with http:
            while True:
                try:
                    async with streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w, _), \
                            ClientSession(r, w) as session:
                        await session.initialize()
                        await session.list_tools()
                        startup = time.perf_counter() - started
                        results = await measure(session, size, calls)
                        break
                except Exception:
                    if server.poll() is not None or time.perf_counter() - started > 60:
                        raise
                    await asyncio.sleep(0.05)
        results["startup_s"] = round(startup, 2)
        results["peak_rss_mib"] = round(memory_mib(server.pid, "VmHWM"), 1)
        return results
    finally:
        server.terminate()
        server.wait(timeout=20)


async def over_stdio(env: dict[str, str], size: int, calls: int) -> dict:
    params = StdioServerParameters(command=sys.executable, args=["manage.py", "mcp_stdio", "--user", "bench"],
                                   cwd=str(BASE_DIR), env=env)
    started = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        startup = time.perf_counter() - started
        results = await measure(session, size, calls)
        pids = subprocess.run(["pgrep", "-f", "mcp_stdio --user bench"], capture_output=True, text=True).stdout
        results["peak_rss_mib"] = round(max(memory_mib(int(p), "VmHWM") for p in pids.split()), 1)
    results["startup_s"] = round(startup, 2)
    return results


def database_for(base_url: str | None, size: int, workdir: Path) -> tuple[str, callable]:
    if not base_url:
        return f"sqlite:///{workdir / f'bench-{size}.sqlite3'}", lambda: None
    name = f"atrium_bench_{size}"
    server = base_url.rsplit("/", 1)[0]
    subprocess.run(["psql", base_url, "-qc", f"DROP DATABASE IF EXISTS {name}"], check=True)
    subprocess.run(["psql", base_url, "-qc", f"CREATE DATABASE {name}"], check=True)
    return f"{server}/{name}", lambda: subprocess.run(["psql", base_url, "-qc", f"DROP DATABASE {name}"])


@contextmanager
def seeded(base_url: str | None, size: int, workdir: Path) -> Iterator[tuple[dict[str, str], str, float]]:
    """A fresh database holding `size` of the user bench's skills: (server environment, bench's
    token, seconds the seeding took). Dropped afterwards."""
    url, drop = database_for(base_url, size, workdir)
    env = server_env(url, BENCH_SIZE=str(size))
    try:
        manage(env, "migrate", "--no-input")
        token = manage(env, "issue_token", "bench", "--create-user").strip().splitlines()[-1]
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", SEED], cwd=BASE_DIR, env=env, check=True, capture_output=True)
        if base_url:
            subprocess.run(["psql", url, "-qc", "VACUUM ANALYZE"], check=True)
        yield env, token, round(time.perf_counter() - started, 1)
    finally:
        drop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--database-url")
    parser.add_argument("--transports", default="http,stdio")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=BASE_DIR / "var"))
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "database": "postgresql" if args.database_url else "sqlite", "sizes": {}}
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            with seeded(args.database_url, size, workdir) as (env, token, seconds):
                entry = {"seed_s": seconds}
                if "http" in args.transports:
                    entry["http"] = asyncio.run(over_http(env, token, size, args.calls))
                if "stdio" in args.transports:
                    entry["stdio"] = asyncio.run(over_stdio(env, size, args.calls))
                report["sizes"][size] = entry
                print(json.dumps({size: entry}), file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
