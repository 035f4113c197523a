"""The docs tools over the evaluation set (tests/fixtures/docs_eval.yaml), through the official MCP
SDK client over stdio: how often the answering section is in ask_docs' first three, and the
latency of search_docs and ask_docs per question.

    .venv/bin/python bench/docs_bench.py [--database-url postgres://postgres@127.0.0.1:5432/postgres]
"""

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from elements_bench import database_for, summary
from harness import BASE_DIR, manage, server_env
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(BASE_DIR))


def evaluation_set() -> list[dict]:
    import safeyaml

    return safeyaml.load((BASE_DIR / "tests" / "fixtures" / "docs_eval.yaml").read_text(), schema=safeyaml.CORE,
                         bounds=safeyaml.Bounds())


EVAL = evaluation_set()


def expected_markdown(question: dict) -> str:
    """The answering section's text, as the server cuts it (tests/test_docs_eval.py counts the same way:
    the section itself, or a returned parent section holding it)."""
    from docs_kb.parsing import page_parse

    page = page_parse((BASE_DIR / "docs" / f"{question['slug']}.md").read_text(), fallback_title=question["slug"])
    return next(s.markdown for s in page.sections if s.heading_id == question["headingId"])


async def measure(env: dict[str, str]) -> dict:
    params = StdioServerParameters(command=sys.executable, args=["manage.py", "mcp_stdio", "--user", "bench"],
                                   cwd=str(BASE_DIR), env=env)
    searches, asks, found = [], [], 0
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for question in EVAL:
            began = time.perf_counter()
            await session.call_tool("search_docs", {"query": question["question"]})
            searches.append(time.perf_counter() - began)
            began = time.perf_counter()
            result = await session.call_tool("ask_docs", {"question": question["question"], "maxSections": 3,
                                                          "maxChars": 20000})
            asks.append(time.perf_counter() - began)
            sections = json.loads(result.content[0].text)["sections"]
            wanted = expected_markdown(question)
            found += any(s["slug"] == question["slug"] and wanted in s["text"] for s in sections)
    return {"questions": len(EVAL), "answered_in_top3": found, "search_docs": summary(searches),
            "ask_docs": summary(asks)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=BASE_DIR / "var"))
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "database": "postgresql" if args.database_url else "sqlite"}
    url, drop = database_for(args.database_url, 1, workdir)
    env = server_env(url)
    try:
        manage(env, "migrate", "--no-input")
        manage(env, "import_docs")
        manage(env, "issue_token", "bench", "--create-user")
        report.update(asyncio.run(measure(env)))
    finally:
        drop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
