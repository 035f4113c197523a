"""capabilities_search at 1,000 and 10,000 capabilities, per mode, in process and over stdio.

For each size it seeds a synthetic catalogue on a fresh database: integrations of 45 actions each
and skills (a fifth of them the bench user's own, some another user's), their names and text drawn
from a vocabulary of verbs, nouns and qualifiers so that keyword queries match from a few rows to
a few hundred; 2% of the integrations are disabled. It times index_refresh: the first sync (every
vector computed), a second with nothing changed, and one after an integration's description
changed (its actions' documents change too). Then it calls capabilities_search with a rotating set
of queries (operators and plain questions), `limit` 20, per mode:

- in process: the function itself, with the SQL statements one call runs;
- over stdio: the `capabilities_search` tool through the official SDK client and
  `manage.py mcp_stdio` (skipped, with a note, if the server does not list the tool), and, for
  the floor, a bare SDK server (FastMCP, one echo tool) over stdio, with the ratio of the two.

With stdio it also measures quality, on one more database holding the shipped catalogue as
`sync_catalogue` writes it: each query of the evaluation set (tests/fixtures/capabilities_eval.yaml)
through the tool over stdio in each mode with `limit` 3, counting the queries with an expected
capability among the three hits, and timing those calls.

    .venv/bin/python bench/capabilities_bench.py [--sizes 1000,10000] [--calls 200]
        [--database-url postgres://postgres@127.0.0.1:5432/postgres] [--transports inprocess,stdio]

With a PostgreSQL URL it creates and drops one database per size (and one for the evaluation)
next to the one named.
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
from pathlib import Path

from elements_bench import database_for, summary
from harness import BASE_DIR, manage, server_env
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

MODES = ("keyword", "semantic", "hybrid")
EVALUATION_SET = BASE_DIR / "tests" / "fixtures" / "capabilities_eval.yaml"
ACTIONS_PER_INTEGRATION = 45
# The words the catalogue's names and text are made of.
VOCABULARY = {
    "verbs": "create update delete list get search archive send sync export import assign close merge approve "
             "schedule cancel refund publish share",
    "nouns": "invoice customer ticket repository calendar event contact message channel file folder payment "
             "subscription order product lead deal campaign report dashboard user team project task comment label "
             "webhook record document spreadsheet meeting note issue release build deployment alert incident survey "
             "form shipment",
    "qualifiers": "recurring draft shared archived pending public private scheduled urgent internal external "
                  "monthly weekly overdue signed",
    "categories": "crm developer communication finance productivity marketing storage analytics support hr",
    "filler": "with for from in by the a of to and its their all new every each",
    "syllables": "ac me ze nith lu ma ra po ve xo ti ka do ri sa fu bel cor",
}
VERBS, NOUNS, QUALIFIERS, CATEGORIES, FILLER, SYLLABLES = (words.split() for words in VOCABULARY.values())
QUERIES = [
    "invoice", "create customer", "refund payment", "sched*", '"recurring subscription"', "ticket | incident",
    "export report -draft", "send message channel", "cancel subscription", "archive* -shared",
    "give a customer their money back", "post an update in the team chat", "find overdue invoices",
    "merge release | deployment",
]
BARE_SERVER = """\
from mcp.server.fastmcp import FastMCP

server = FastMCP("bare", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    return text


server.run(transport="stdio")
"""


def evaluation_set() -> list[dict]:
    sys.path.insert(0, str(BASE_DIR))
    import safeyaml

    return safeyaml.load(EVALUATION_SET.read_text(), schema=safeyaml.CORE, bounds=safeyaml.Bounds())


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(NOUNS + QUALIFIERS + FILLER + VERBS) for _ in range(words))


def seed(size: int) -> dict:
    """The catalogue, then the three syncs' times (child process)."""
    from django.utils import timezone

    from accounts.models import User
    from integrations.models import Action, Connection, Integration, Skill
    from integrations.search import index_refresh

    rng = random.Random(7)
    bench = User.objects.get(username="bench")
    other = User.objects.create_user(username="other")
    count = size // 50
    services: set[str] = set()
    while len(services) < count:
        services.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))))
    integrations = []
    for number, service in enumerate(sorted(services)):
        category = rng.choice(CATEGORIES)
        nouns = rng.sample(NOUNS, 3)
        integrations.append(Integration(
            id=f"{service}_tools", name=service.capitalize(), category=category, enabled=number % 50 != 7,
            description=f"{service.capitalize()} is a {category} service for {nouns[0]}s, {nouns[1]}s and "
                        f"{nouns[2]}s. {sentence(rng, 12)}.",
            agent_instructions=f"Name each {nouns[0]} by its id. {sentence(rng, 20)}."))
    Integration.objects.bulk_create(integrations)
    actions = []
    for integration in integrations:
        pairs = rng.sample([(verb, noun) for verb in VERBS for noun in NOUNS], ACTIONS_PER_INTEGRATION)
        for verb, noun in pairs:
            qualifier = rng.choice(QUALIFIERS)
            actions.append(Action(integration=integration, name=f"{verb}_{noun}", executor="http",
                                  description=f"{verb.capitalize()} a {qualifier} {noun} in {integration.name}. "
                                              f"{sentence(rng, rng.randint(6, 14))}."))
    Action.objects.bulk_create(actions, batch_size=2000)
    skills = []
    for number in range(size - len(integrations) * (1 + ACTIONS_PER_INTEGRATION)):
        verb, qualifier, noun = rng.choice(VERBS), rng.choice(QUALIFIERS), rng.choice(NOUNS)
        owner = bench if number % 5 == 0 else other if number % 5 == 1 else None
        skills.append(Skill(owner=owner, name=f"{verb}_{qualifier}_{noun}s_{number}", source_code="pass",
                            description=f"{verb.capitalize()} every {qualifier} {noun}, then {sentence(rng, 10)}."))
    Skill.objects.bulk_create(skills, batch_size=2000)
    Skill.integrations.through.objects.bulk_create(
        [Skill.integrations.through(skill=skill, integration=integration) for skill in skills
         for integration in rng.sample(integrations, rng.randint(1, 2))], batch_size=2000)
    Connection.objects.bulk_create([Connection(user=bench, integration=integration, connected_at=timezone.now())
                                    for integration in integrations[::7]])

    def timed() -> float:
        began = time.perf_counter()
        index_refresh(integrations=Integration.objects.all(), skills=Skill.objects.all())
        return round(time.perf_counter() - began, 2)

    first, unchanged = timed(), timed()
    Integration.objects.filter(pk=integrations[0].pk).update(description="A rewritten description of the service.")
    return {"index_first_s": first, "index_unchanged_s": unchanged, "index_one_integration_changed_s": timed()}


def in_process(calls: int) -> dict:
    """capabilities_search p50/p95 and SQL statements per call, per mode (child process)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from accounts.models import User
    from core.caller import Caller
    from integrations.models import Capability
    from integrations.search import capabilities_search

    caller = Caller.trusted(User.objects.get(username="bench"), via="command")

    def call(mode: str, query: str, limit: int = 20) -> list[dict]:
        return capabilities_search(caller=caller, query=query, types=None, integration_id=None, category=None,
                                   mode=mode, limit=limit)

    results: dict = {"rows": Capability.objects.count(),
                     "keyword_hits_of_50": {query: len(call("keyword", query, 50)) for query in QUERIES}}
    for mode in MODES:
        for query in QUERIES:
            call(mode, query)  # warm up: the model, the vectors, the statement caches
        with CaptureQueriesContext(connection) as queries:
            call(mode, QUERIES[0])
        samples = []
        for number in range(calls):
            began = time.perf_counter()
            call(mode, QUERIES[number % len(QUERIES)])
            samples.append(time.perf_counter() - began)
        results[mode] = {**summary(samples), "sql_per_call": len(queries)}
    return results


async def over_stdio(env: dict[str, str], calls: int) -> dict:
    params = StdioServerParameters(command=sys.executable, args=["manage.py", "mcp_stdio", "--user", "bench"],
                                   cwd=str(BASE_DIR), env=env)
    results: dict = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        if "capabilities_search" not in {tool.name for tool in (await session.list_tools()).tools}:
            print("note: this server lists no capabilities_search tool; stdio figures skipped", file=sys.stderr)
            return {"skipped": "no capabilities_search tool"}
        for mode in MODES:
            async def call(query: str, mode: str = mode) -> None:
                result = await session.call_tool("capabilities_search", {"query": query, "mode": mode, "limit": 20})
                assert not result.isError, result
            for query in QUERIES:
                await call(query)
            samples = []
            for number in range(calls):
                began = time.perf_counter()
                await call(QUERIES[number % len(QUERIES)])
                samples.append(time.perf_counter() - began)
            results[mode] = summary(samples)
    return results


async def evaluation(env: dict[str, str]) -> dict:
    """Per mode, how many of the evaluation set's queries have an expected capability in the tool's
    first three hits, and the latency of those calls (the shipped catalogue, over stdio)."""
    queries = evaluation_set()
    params = StdioServerParameters(command=sys.executable, args=["manage.py", "mcp_stdio", "--user", "bench"],
                                   cwd=str(BASE_DIR), env=env)
    results: dict = {"queries": len(queries)}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for mode in MODES:
            found, samples = 0, []
            for query in queries:
                began = time.perf_counter()
                result = await session.call_tool("capabilities_search",
                                                 {"query": query["query"], "mode": mode, "limit": 3})
                samples.append(time.perf_counter() - began)
                assert not result.isError, result
                found += any(hit["name"] in query["expected"] for hit in result.structuredContent["results"])
            results[mode] = {"top3": found, "top3_rate": round(found / len(queries), 3), **summary(samples)}
    return results


async def bare_floor(workdir: Path, calls: int) -> dict:
    script = workdir / "bare_server.py"
    script.write_text(BARE_SERVER)
    params = StdioServerParameters(command=sys.executable, args=[str(script)], cwd=str(BASE_DIR))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for query in QUERIES:
            await session.call_tool("echo", {"text": query})
        samples = []
        for number in range(calls):
            began = time.perf_counter()
            await session.call_tool("echo", {"text": QUERIES[number % len(QUERIES)]})
            samples.append(time.perf_counter() - began)
    return summary(samples)


def child(part: str) -> dict:
    sys.path.insert(0, str(BASE_DIR))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    if part == "seed":
        return seed(int(os.environ["BENCH_SIZE"]))
    return in_process(int(os.environ["BENCH_CALLS"]))


def run_child(env: dict[str, str], part: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", part], cwd=BASE_DIR, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--database-url")
    parser.add_argument("--transports", default="inprocess,stdio")
    parser.add_argument("--child", choices=["seed", "measure"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return

    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=BASE_DIR / "var"))
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "database": "postgresql" if args.database_url else "sqlite", "sizes": {}}
    try:
        if "stdio" in args.transports:
            report["bare_sdk_stdio_echo"] = asyncio.run(bare_floor(workdir, args.calls))
        for size in (int(s) for s in args.sizes.split(",")):
            url, drop = database_for(args.database_url, f"capabilities_{size}", workdir)
            env = server_env(url, BENCH_SIZE=str(size), BENCH_CALLS=str(args.calls))
            try:
                manage(env, "migrate", "--no-input")
                manage(env, "issue_token", "bench", "--create-user")
                entry = run_child(env, "seed")
                if args.database_url:
                    subprocess.run(["psql", url, "-qc", "VACUUM ANALYZE"], check=True)
                if "inprocess" in args.transports:
                    entry["in_process"] = run_child(env, "measure")
                if "stdio" in args.transports:
                    entry["stdio"] = asyncio.run(over_stdio(env, args.calls))
                    if "skipped" not in entry["stdio"]:
                        floor = report["bare_sdk_stdio_echo"]["p50_ms"]
                        entry["stdio_p50_to_bare"] = {mode: round(entry["stdio"][mode]["p50_ms"] / floor, 1)
                                                      for mode in MODES}
                report["sizes"][size] = entry
                print(json.dumps({size: entry}), file=sys.stderr)
            finally:
                drop()
        if "stdio" in args.transports:
            url, drop = database_for(args.database_url, "capabilities_eval", workdir)
            env = server_env(url)
            try:
                manage(env, "migrate", "--no-input")
                manage(env, "sync_catalogue")
                manage(env, "issue_token", "bench", "--create-user")
                report["evaluation"] = asyncio.run(evaluation(env))
                print(json.dumps({"evaluation": report["evaluation"]}), file=sys.stderr)
            finally:
                drop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
