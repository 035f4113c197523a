"""Calls through the official MCP SDK client of the current major version (run with the python of
tests/live/sdk/requirements.txt's venv; bench/protocol_bench.py starts it). Reads a JSON spec on
stdin, prints a JSON report.

spec: {"server": {"url": URL, "token": TOKEN} or {"command": [...], "env": {...}},
       "cases": {NAME: [TOOL, ARGUMENTS]}, "calls": N, "clients": [1, 8, 32], "mix_seconds": S,
       "mix": [NAME, ...]   (optional: the cases of the read mix; all of them by default)
       "runs": {"workflow_id": ID, "clients": [1, 8], "seconds": S}   (optional)}

Each case is called `calls` times by one client (p50, p95); then the mix's cases in turn, as a read mix,
by each number of concurrent clients for `mix_seconds` (calls per second). With "runs", each
number of clients then runs the workflow again and again for `seconds`: start_workflow and an
advance_run for each pending step, until the run completes (runs completed per second, and the
p50 of each tool).
"""

import asyncio
import json
import sys
import time
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


class Http:
    def __init__(self, url: str, http: httpx2.AsyncClient) -> None:
        self.url, self.http, self.opened = url, http, None

    async def __aenter__(self):
        self.opened = streamable_http_client(self.url, http_client=self.http)
        return await self.opened.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.opened.__aexit__(*exc)


def target(server: dict[str, Any], http: httpx2.AsyncClient | None) -> Any:
    if "url" in server:
        return Http(server["url"], http)
    return StdioServerParameters(command=server["command"][0], args=server["command"][1:], env=server["env"])


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> None:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content[0].text[:300]}")


async def throughput(server: dict[str, Any], http: httpx2.AsyncClient, mix: list, clients: int,
                     seconds: float) -> float:
    """Calls per second of `clients` connected clients calling the mix in turn for `seconds`."""
    connected = 0
    go = asyncio.Event()
    window: dict[str, float] = {}
    done = 0

    async def worker(offset: int) -> None:
        nonlocal connected, done
        async with Client(target(server, http)) as client:
            connected += 1
            await go.wait()
            turn = offset
            while time.perf_counter() < window["end"]:
                tool, arguments = mix[turn % len(mix)]
                await call(client, tool, arguments)
                done += 1
                turn += 1

    async with asyncio.TaskGroup() as group:
        for offset in range(clients):
            group.create_task(worker(offset))
        while connected < clients:
            await asyncio.sleep(0.01)
        window["start"] = time.perf_counter()
        window["end"] = window["start"] + seconds
        go.set()
    return round(done / (time.perf_counter() - window["start"]), 1)


async def runs_completed(server: dict[str, Any], http: httpx2.AsyncClient | None, spec: dict[str, Any],
                         clients: int) -> dict[str, Any]:
    """Runs completed per second by `clients` connected clients, each starting the workflow and
    answering its steps (a draft, then an approving verdict) for spec["seconds"]."""
    connected, completed = 0, 0
    go = asyncio.Event()
    window: dict[str, float] = {}
    timings: dict[str, list[float]] = {"start_workflow": [], "advance_run": []}

    async def timed(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        result = await client.call_tool(tool, {**arguments, "global": True})
        timings[tool].append(time.perf_counter() - started)
        payload = json.loads(result.content[0].text)
        if result.is_error or "code" in payload:
            raise RuntimeError(f"{tool} failed: {result.content[0].text[:300]}")
        return payload

    async def worker() -> None:
        nonlocal connected, completed
        async with Client(target(server, http)) as client:
            connected += 1
            await go.wait()
            while time.perf_counter() < window["end"]:
                run = await timed(client, "start_workflow", {"workflow_id": spec["workflow_id"], "context": {
                    "topic": "tea"}})
                while run["status"] == "paused":
                    step = run["pendingStep"]
                    answer = ('{"verdict": "approve", "reasoning": "fine"}' if step["nodeType"] == "ai_judge"
                              else "A draft")
                    run = await timed(client, "advance_run", {"run_id": run["runId"], "response": answer,
                                                              "step_id": step["stepId"]})
                if run["status"] != "completed":
                    raise RuntimeError(f"the run ended {run['status']}: {run.get('error')}")
                completed += 1

    async with asyncio.TaskGroup() as group:
        for _ in range(clients):
            group.create_task(worker())
        while connected < clients:
            await asyncio.sleep(0.01)
        window["start"] = time.perf_counter()
        window["end"] = window["start"] + spec["seconds"]
        go.set()
    elapsed = time.perf_counter() - window["start"]
    return {"runs_per_s": round(completed / elapsed, 1),
            **{f"{tool}_p50_ms": percentile(samples, 0.5) for tool, samples in timings.items()}}


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000, 3)


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    server, cases = spec["server"], spec["cases"]
    headers = {"Authorization": f"Bearer {server['token']}"} if "token" in server else {}
    report: dict[str, Any] = {"latency": {}, "throughput": {}}
    async with httpx2.AsyncClient(headers=headers, timeout=120,
                                  limits=httpx2.Limits(max_connections=200)) as http:
        async with Client(target(server, http)) as client:
            report["protocol_version"] = client.protocol_version
            await client.list_tools()
            for name, (tool, arguments) in cases.items():
                for _ in range(10):
                    await call(client, tool, arguments)
                samples = []
                for _ in range(spec["calls"]):
                    started = time.perf_counter()
                    await call(client, tool, arguments)
                    samples.append(time.perf_counter() - started)
                report["latency"][name] = {"p50_ms": percentile(samples, 0.5), "p95_ms": percentile(samples, 0.95)}
        runs = spec.get("runs")
        if "url" not in server:
            # stdio is one client per process: no concurrency to measure
            if runs:
                report["runs"] = {"1": await runs_completed(server, None, runs, 1)}
            return report
        mix = [cases[name] for name in spec.get("mix", cases)]
        for clients in spec["clients"]:
            report["throughput"][str(clients)] = await throughput(server, http, mix, clients, spec["mix_seconds"])
        if runs:
            report["runs"] = {str(clients): await runs_completed(server, http, runs, clients)
                              for clients in runs["clients"]}
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.loads(sys.stdin.read())))))
