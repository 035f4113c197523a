"""Workflow tools through the official MCP SDK client over stdio (manage.py mcp_stdio).

For each store size (workflows in one user's global store) it seeds a fresh database, then
measures p50/p95 of list_workflows, get_workflow, validate_workflow and lint_workflow and
audit_workflow on a small workflow and on a 200-node one, and the write path (create_workflow
then delete_workflow, each validating and keeping a revision).

    .venv/bin/python bench/workflows_bench.py [--sizes 10,1000] [--calls 100]
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

from elements_bench import database_for, summary
from harness import BASE_DIR, REVIEW_LOOP, manage, server_env
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SEED = """
import os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from django.utils import timezone
from accounts.models import User
from workflows.models import Workflow
from workflows.selectors import definition_parse
user = User.objects.get(username="bench")
text, config = definition_parse(os.environ["BENCH_SMALL"])
now = timezone.now()
Workflow.objects.bulk_create(
    Workflow(owner=user, workflow_id=f"flow-{i:05d}", name=f"Flow {i}", yaml_text=text, config=config,
             created=now, modified=now)
    for i in range(int(os.environ["BENCH_SIZE"])))
"""



def large(nodes: int = 200) -> dict:
    """A chain of judges, each able to send the run back two steps, every one referring to the last."""
    graph: dict = {}
    for i in range(nodes - 1):
        previous = f"{{{{ n{i - 1}.output || 'start' }}}}" if i else "{{ context.topic }}"
        graph[f"n{i}"] = {"type": "ai_judge", "prompt": f"Step {i}: {previous}", "verdicts": ["go", "back"],
                          "maxIterations": 2,
                          "transitions": {"go": f"n{i + 1}" if i < nodes - 2 else "end",
                                          "back": f"n{max(i - 2, 0)}"}}
    graph["end"] = {"type": "end"}
    return {"name": "Large", "start": "n0", "nodes": graph}


async def timed(session: ClientSession, calls: int, tool: str, arguments: dict) -> dict[str, float]:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        result = await session.call_tool(tool, arguments)
        samples.append(time.perf_counter() - started)
        assert not result.isError, result.content[0].text
    return summary(samples)


async def measure(env: dict[str, str], size: int, calls: int) -> dict:
    params = StdioServerParameters(command=sys.executable, args=["manage.py", "mcp_stdio", "--user", "bench"],
                                   cwd=str(BASE_DIR), env=env)
    g = {"global": True}
    big = large()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = json.loads((await session.call_tool("list_workflows", g)).content[0].text)
        assert len(listed) == size, len(listed)
        results = {
            "list_workflows": await timed(session, calls, "list_workflows", g),
            "get_workflow": await timed(session, calls, "get_workflow", {"workflow_id": "flow-00001", **g}),
            "validate_small": await timed(session, calls, "validate_workflow", {"config": REVIEW_LOOP, **g}),
            "validate_200_nodes": await timed(session, calls, "validate_workflow", {"config": big, **g}),
            "lint_200_nodes": await timed(session, calls, "lint_workflow", {"config": big, **g}),
            "audit_200_nodes": await timed(session, calls, "audit_workflow", {"config": big, **g}),
        }
        writes = []
        for i in range(calls):
            started = time.perf_counter()
            created = await session.call_tool("create_workflow", {"id": f"bench-{i}", "config": REVIEW_LOOP, **g})
            deleted = await session.call_tool("delete_workflow", {"id": f"bench-{i}", "confirm": True, **g})
            writes.append(time.perf_counter() - started)
            assert not created.isError and not deleted.isError
        results["create_then_delete"] = summary(writes)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,1000")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--database-url")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=BASE_DIR / "var"))
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "database": "postgresql" if args.database_url else "sqlite", "sizes": {}}
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            url, drop = database_for(args.database_url, size, workdir)
            env = server_env(url, BENCH_SIZE=str(size), BENCH_SMALL=REVIEW_LOOP)
            try:
                manage(env, "migrate", "--no-input")
                manage(env, "issue_token", "bench", "--create-user")
                subprocess.run([sys.executable, "-c", SEED], cwd=BASE_DIR, env=env, check=True, capture_output=True)
                report["sizes"][size] = asyncio.run(measure(env, size, args.calls))
                print(json.dumps({size: report["sizes"][size]}), file=sys.stderr)
            finally:
                drop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
