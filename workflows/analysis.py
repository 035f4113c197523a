"""Graph rules over a well-formed definition: integrity (errors that stop a write), lint (warnings)
and audit (risk and worst-case cost). Definitions are small (at most a few hundred nodes), so the
classic simple algorithms are used: iterative dominators, DFS cycles, Tarjan's SCCs."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from workflows import expressions
from workflows.definition import (
    DEFAULT_MAP_MAX_ITEMS,
    agent_count,
    node_events,
    template_fields,
)

# Looks a subworkflow id up in the scope being validated: its config, or None when it does not exist.
Lookup = Callable[[str], dict[str, Any] | None]

ASSUMED_CANDIDATES = 8
ASSUMED_OUTPUT_TOKENS = 1000
# Text the host adds around a prompt (earlier outputs rendered into it), in tokens.
ASSUMED_CONTEXT_TOKENS = 2000


# --- the graph ---------------------------------------------------------------------------------

def successors(config: dict[str, Any]) -> dict[str, list[str]]:
    """Node -> the existing nodes its transitions lead to."""
    nodes = config["nodes"]
    return {
        node_id: [t for t in dict.fromkeys((node.get("transitions") or {}).values()) if t in nodes]
        for node_id, node in nodes.items()
    }


def _reach(start: Iterable[str], edges: dict[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(start)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(edges.get(node, ()))
    return seen


def reachable(config: dict[str, Any]) -> set[str]:
    start = config["start"]
    return _reach([start], successors(config)) if start in config["nodes"] else set()


def _reverse_postorder(start: str, edges: dict[str, list[str]]) -> list[str]:
    seen = {start}
    postorder: list[str] = []
    stack = [(start, iter(edges[start]))]
    while stack:
        node, children = stack[-1]
        child = next((c for c in children if c not in seen), None)
        if child is None:
            stack.pop()
            postorder.append(node)
        else:
            seen.add(child)
            stack.append((child, iter(edges[child])))
    return postorder[::-1]


def dominators(config: dict[str, Any]) -> dict[str, set[str]]:
    """For each node reachable from start, the nodes on every path from start to it (itself included).

    Cooper, Harvey and Kennedy's algorithm: immediate dominators refined over reverse postorder,
    which settles in a pass or two where intersecting whole sets took one pass per loop level."""
    edges = successors(config)
    start = config["start"]
    if start not in edges:
        return {}
    order = _reverse_postorder(start, edges)
    index = {node: i for i, node in enumerate(order)}
    preds: dict[str, list[str]] = {node: [] for node in order}
    for node in order:
        for target in edges[node]:
            preds[target].append(node)
    idom = {start: start}

    def common(a: str, b: str) -> str:
        while a != b:
            while index[a] > index[b]:
                a = idom[a]
            while index[b] > index[a]:
                b = idom[b]
        return a

    changed = True
    while changed:
        changed = False
        for node in order[1:]:
            settled = [p for p in preds[node] if p in idom]
            new = settled[0]
            for pred in settled[1:]:
                new = common(pred, new)
            if idom.get(node) != new:
                idom[node], changed = new, True
    dom = {start: {start}}
    for node in order[1:]:  # a node's immediate dominator comes before it in reverse postorder
        dom[node] = dom[idom[node]] | {node}
    return dom


def _find_cycle(nodes: set[str], edges: dict[str, list[str]]) -> list[str] | None:
    """One cycle among `nodes` (following only edges inside it), as a path that returns to its first node."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in edges.get(node, ()):
            if target not in nodes:
                continue
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(nodes):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _is_guard(node: dict[str, Any]) -> bool:
    return "maxIterations" in node or node["type"] == "human"


def unguarded_cycle(config: dict[str, Any]) -> list[str] | None:
    """A cycle with no node carrying maxIterations and no human node, if there is one."""
    free = {n for n, node in config["nodes"].items() if not _is_guard(node)}
    return _find_cycle(free, successors(config))


def strongly_connected(config: dict[str, Any]) -> list[set[str]]:
    """The graph's strongly connected components that hold a cycle (Tarjan's algorithm)."""
    edges = successors(config)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges[node]:
                found.append(component)

    for node in config["nodes"]:
        if node not in index:
            visit(node)
    return found


# --- integrity ---------------------------------------------------------------------------------

def _check_events(config: dict[str, Any], errors: list[str]) -> None:
    for node_id, node in config["nodes"].items():
        allowed = node_events(node)
        if allowed is None:
            continue
        for event in node.get("transitions") or {}:
            if event not in allowed:
                errors.append(f"nodes.{node_id}.transitions: {event!r} is not an event of this {node['type']} node "
                              f"(its events: {', '.join(allowed)}).")


def _check_targets(config: dict[str, Any], errors: list[str]) -> None:
    nodes = config["nodes"]
    if config["start"] not in nodes:
        errors.append(f"start: {config['start']!r} is not a node (nodes: {', '.join(nodes)}).")
    for node_id, node in nodes.items():
        for event, target in (node.get("transitions") or {}).items():
            if target not in nodes:
                errors.append(f"nodes.{node_id}.transitions.{event}: the target {target!r} is not a node.")


def _check_references(config: dict[str, Any], errors: list[str]) -> None:
    nodes = config["nodes"]
    dom = dominators(config)
    for found in template_fields(config):
        try:
            refs = (expressions.references(expressions.parse(found.text)) if found.is_expression
                    else expressions.template_references(found.text))
        except expressions.ExpressionError:
            continue  # reported by the schema check
        for ref in refs:
            root = ref.path[0]
            shown = ".".join(ref.path)
            if root == "context" or root in found.locals:
                continue
            if root not in nodes:
                local_hint = f", or one of {', '.join(found.locals)} here" if found.locals else ""
                errors.append(f"{found.where}: '{shown}' refers to {root!r}, which is not a node; references start "
                              f"with context or a node id{local_hint}.")
                continue
            if ref.guarded or found.node_id not in dom:
                continue
            if root == found.node_id or root not in dom[found.node_id]:
                errors.append(
                    f"{found.where}: '{shown}' refers to node {root!r}, which does not run on every path from start "
                    f"to {found.node_id!r} (it must dominate it). Reference a node every path passes through, or "
                    f"add a fallback: {{{{ {shown} || \"...\" }}}}."
                )


def _subworkflow_chain(workflow_id: str, start_ids: list[str], lookup: Lookup) -> list[str] | None:
    """The chain of subworkflow ids from this workflow back to itself, if its children include it."""
    seen: set[str] = set()

    def walk(current: str, chain: list[str]) -> list[str] | None:
        if current == workflow_id:
            return chain
        if current in seen:
            return None
        seen.add(current)
        child = lookup(current)
        if not isinstance(child, dict) or not isinstance(child.get("nodes"), dict):
            return None
        for node in child["nodes"].values():
            if isinstance(node, dict) and node.get("type") == "subworkflow" and isinstance(node.get("workflow"), str):
                found = walk(node["workflow"], [*chain, node["workflow"]])
                if found:
                    return found
        return None

    for child_id in start_ids:
        found = walk(child_id, [workflow_id, child_id])
        if found:
            return found
    return None


def _check_subworkflows(config: dict[str, Any], workflow_id: str | None, lookup: Lookup,
                        errors: list[str]) -> None:
    for node_id, node in config["nodes"].items():
        if node["type"] != "subworkflow":
            continue
        child_id = node["workflow"]
        where = f"nodes.{node_id}.workflow"
        if workflow_id is not None and child_id == workflow_id:
            errors.append(f"{where}: a workflow cannot run itself as a subworkflow.")
        elif lookup(child_id) is None:
            errors.append(f"{where}: there is no workflow {child_id!r} in this scope (repo or global).")
        elif workflow_id is not None:
            chain = _subworkflow_chain(workflow_id, [child_id], lookup)
            if chain:
                errors.append(f"{where}: {child_id!r} includes this workflow again ({' -> '.join(chain)}); "
                              "subworkflows cannot form a cycle.")


def integrity_check(config: dict[str, Any], *, workflow_id: str | None, lookup: Lookup) -> list[str]:
    """Graph errors in a definition that passed the schema check; [] when it is sound."""
    errors: list[str] = []
    _check_targets(config, errors)
    _check_events(config, errors)
    _check_references(config, errors)
    cycle = unguarded_cycle(config)
    if cycle:
        errors.append(f"nodes: the cycle {' -> '.join(cycle)} has no node with maxIterations and no human node; "
                      "give one of its nodes maxIterations.")
    _check_subworkflows(config, workflow_id, lookup, errors)
    return errors


# --- lint --------------------------------------------------------------------------------------

def _warning(code: str, message: str, state: str | None = None) -> dict[str, str]:
    return {"code": code, "message": message, **({"state": state} if state else {})}


def _models_named(config: dict[str, Any]) -> list[tuple[str | None, str]]:
    named: list[tuple[str | None, str]] = []
    if isinstance(config.get("model"), str):
        named.append((None, config["model"]))
    for node_id, node in config["nodes"].items():
        if isinstance(node.get("model"), str):
            named.append((node_id, node["model"]))
        if isinstance(node.get("agents"), list):
            named.extend((node_id, a["model"]) for a in node["agents"] if isinstance(a.get("model"), str))
    return named


def lint(config: dict[str, Any], *, models: set[str]) -> list[dict[str, str]]:
    """Warnings for a definition that passed the schema check: never errors."""
    warnings: list[dict[str, str]] = []
    nodes = config["nodes"]
    edges = successors(config)
    live = reachable(config)
    ends = {n for n, node in nodes.items() if node["type"] == "end"}
    if not ends:
        warnings.append(_warning("no_end_node", "The workflow has no end node, so no run can finish."))
    reverse: dict[str, list[str]] = {n: [] for n in nodes}
    for node_id, targets in edges.items():
        for target in targets:
            reverse[target].append(node_id)
    can_finish = _reach(ends, reverse)
    for node_id, node in nodes.items():
        if node_id not in live:
            warnings.append(_warning("unreachable_state", f"No path from start reaches {node_id!r}.", node_id))
        if ends and node_id not in can_finish:
            warnings.append(_warning("dead_state", f"No end node can be reached from {node_id!r}; a run that gets "
                                                   "there never finishes.", node_id))
        allowed = node_events(node)
        if allowed and node["type"] != "end":
            missing = [e for e in allowed if e not in (node.get("transitions") or {})]
            if missing:
                warnings.append(_warning(
                    "unhandled_event", f"{node_id!r} has no transition for {', '.join(missing)}; a run fails there "
                                       "if that happens.", node_id))
    for node_id, model in _models_named(config):
        if model not in models:
            known = ", ".join(sorted(models)) or "none"
            warnings.append(_warning("unknown_model", f"Model {model!r} is not a configured model (configured: "
                                                      f"{known}).", node_id))
    declared = (config.get("context") or {}).get("properties")
    if isinstance(declared, dict):
        for found in template_fields(config):
            try:
                refs = (expressions.references(expressions.parse(found.text)) if found.is_expression
                        else expressions.template_references(found.text))
            except expressions.ExpressionError:
                continue
            for ref in refs:
                if ref.path[0] == "context" and len(ref.path) > 1 and ref.path[1] not in declared \
                        and not ref.guarded:
                    warnings.append(_warning(
                        "unknown_context_key", f"{found.where} uses context.{ref.path[1]}, which the context schema "
                                               "does not declare.", found.node_id))
    return warnings


# --- audit -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pricing:
    """Prices per million tokens by model id, and the model used when a node names none."""

    prices: dict[str, tuple[Decimal, Decimal]]
    default_model: str | None


# (pattern, severity, what it does). Checked against script text and argv joined by spaces.
DANGEROUS = (
    (r"\brm\s+(-[a-zA-Z]*[rf][a-zA-Z]*\s+)+(/\*?|~/?\*?|\$HOME/?\*?|\*)([\s;&|]|$)", "error",
     "deletes the root, home or everything in the working directory"),
    (r"\bmkfs(\.\w+)?\b", "error", "formats a file system"),
    (r"\bdd\b[^\n]*\bof=/dev/", "error", "writes straight to a device"),
    (r":\(\)\s*\{\s*:\|:&\s*\};:", "error", "is a fork bomb"),
    (r"\b(curl|wget)\b[^\n|]*\|\s*(sudo\s+)?(ba|z)?sh\b", "error", "pipes a download into a shell"),
    (r"\bsudo\b", "warning", "runs as root"),
    (r"\brm\s+-[a-zA-Z]*r[a-zA-Z]*f|\brm\s+-[a-zA-Z]*f[a-zA-Z]*r", "warning", "deletes recursively without asking"),
    (r"\bgit\s+push\b[^\n]*(--force\b|-f\b)", "warning", "force-pushes"),
    (r"\bchmod\s+(-R\s+)?777\b", "warning", "makes files writable by everyone"),
    (r"\b(shutdown|reboot|halt)\b", "warning", "stops the machine"),
    (r"\beval\b", "warning", "evaluates text as code"),
    (r">\s*/dev/sd[a-z]", "error", "writes straight to a disk"),
)


def _script_findings(node_id: str, node: dict[str, Any], findings: list[dict[str, Any]]) -> None:
    if "timeout" not in node:
        findings.append({"severity": "info", "code": "script_without_timeout", "state": node_id,
                         "message": f"{node_id!r} sets no timeout, so it may run for the default 60 seconds."})
    text = node.get("script") or " ".join(node.get("command") or [])
    for pattern, severity, what in DANGEROUS:
        if re.search(pattern, text):
            findings.append({"severity": severity, "code": "dangerous_command", "state": node_id,
                             "message": f"{node_id!r} runs a command that {what}."})


def _visits(config: dict[str, Any]) -> tuple[dict[str, int], list[set[str]]]:
    """How many times each node can run in one run at worst, and the loops only a person bounds.

    Each SCC is entered at most once (the SCCs form a DAG), and every way back to a node passes a
    guard, so a node inside a loop runs at most once plus the guards' maxIterations; a guard runs at
    most its own maxIterations."""
    visits = dict.fromkeys(config["nodes"], 1)
    human_bounded: list[set[str]] = []
    edges = successors(config)
    for component in strongly_connected(config):
        counted = {n for n in component if "maxIterations" in config["nodes"][n]}
        if _find_cycle(component - counted, edges):
            human_bounded.append(component)
            continue
        total = sum(config["nodes"][n]["maxIterations"] for n in counted)
        for node_id in component:
            visits[node_id] = config["nodes"][node_id].get("maxIterations", 1 + total)
    return visits, human_bounded


def _calls_per_visit(node: dict[str, Any], findings: list[dict[str, Any]], node_id: str) -> int:
    kind = node["type"]
    if kind in ("ai_agent", "ai_judge"):
        return 1
    if kind == "consensus":
        agents = agent_count(node)
        # vote: one round plus, at worst, a retry of every agent; usc: generate plus one aggregator.
        return agents + 1 if node.get("mode") == "usc" else 2 * agents
    if kind == "round_robin":
        candidates = node.get("candidates")
        count = len(candidates) if isinstance(candidates, list) else ASSUMED_CANDIDATES
        if not isinstance(candidates, list):
            findings.append({"severity": "info", "code": "assumed_count", "state": node_id,
                             "message": f"{node_id!r} gets its candidates at run time; the worst case assumes "
                                        f"{ASSUMED_CANDIDATES}."})
        matchups = count * (count - 1) // 2 * (2 if node.get("mode") == "contested" else 1)
        return matchups + (1 if "resolve" in node else 0)
    if kind == "map":
        limit = node.get("maxItems", DEFAULT_MAP_MAX_ITEMS)
        items = node.get("items")
        count = min(len(items), limit) if isinstance(items, list) else limit
        if not isinstance(items, list):
            findings.append({"severity": "info", "code": "assumed_count", "state": node_id,
                             "message": f"{node_id!r} gets its items at run time; the worst case assumes maxItems "
                                        f"({limit})."})
        return count + (1 if "extract" in node else 0) + (1 if "reduce" in node else 0)
    return 0


def _call_cost(node: dict[str, Any], config: dict[str, Any], pricing: Pricing) -> Decimal:
    model = node.get("model") or config.get("model") or pricing.default_model
    price_in, price_out = pricing.prices.get(model or "", (Decimal(0), Decimal(0)))
    prompt_tokens = len(str(node.get("prompt") or node.get("criterion") or "")) // 4 + ASSUMED_CONTEXT_TOKENS
    return (price_in * prompt_tokens + price_out * ASSUMED_OUTPUT_TOKENS) / Decimal(1_000_000)


def audit(config: dict[str, Any], *, pricing: Pricing, lookup: Lookup,
          _seen: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Risk and cost review: {findings, worstCase: {modelCalls, costUsd, bounded}}."""
    findings: list[dict[str, Any]] = []
    visits, human_bounded = _visits(config)
    cycle = unguarded_cycle(config)
    for component in human_bounded:
        if not any(config["nodes"][n]["type"] == "human" for n in component):
            continue  # no person bounds it: an unguarded cycle, the error below
        findings.append({"severity": "warning", "code": "unbounded_loop", "state": sorted(component)[0],
                         "message": f"The loop through {', '.join(sorted(component))} is bounded only by a person "
                                    "choosing to leave it; the worst case counts one pass."})
    if cycle:
        findings.append({"severity": "error", "code": "unbounded_loop", "state": cycle[0],
                         "message": f"The cycle {' -> '.join(cycle)} has no maxIterations and no human node: it may "
                                    "never end."})
    calls = 0
    cost = Decimal(0)
    bounded = not human_bounded and not cycle
    for node_id, node in config["nodes"].items():
        kind = node["type"]
        if kind == "script":
            _script_findings(node_id, node, findings)
        if kind == "subworkflow":
            child_id = node["workflow"]
            child = lookup(child_id) if child_id not in _seen else None
            if child is not None:
                child_audit = audit(child, pricing=pricing, lookup=lookup, _seen=_seen | {child_id})
                calls += visits[node_id] * child_audit["worstCase"]["modelCalls"]
                cost += visits[node_id] * Decimal(str(child_audit["worstCase"]["costUsd"]))
                bounded = bounded and child_audit["worstCase"]["bounded"]
            continue
        per_visit = _calls_per_visit(node, findings, node_id)
        if kind == "consensus" and agent_count(node) >= 5:
            findings.append({"severity": "info", "code": "wide_fanout", "state": node_id,
                             "message": f"{node_id!r} runs 5 agents per visit."})
        calls += visits[node_id] * per_visit
        cost += visits[node_id] * per_visit * _call_cost(node, config, pricing)
    if visits and max(visits.values()) > 1:
        looping = sorted(n for n, v in visits.items() if v > 1)
        findings.append({"severity": "info", "code": "loop_multiplier",
                         "message": f"Loops let {', '.join(looping)} run more than once; the worst case counts every "
                                    "allowed iteration."})
    findings.append({"severity": "info", "code": "cost_estimate",
                     "message": f"Costs assume {ASSUMED_CONTEXT_TOKENS} tokens of context plus the prompt in, and "
                                f"{ASSUMED_OUTPUT_TOKENS} tokens out, per model call, at the configured prices."})
    return {"findings": findings,
            "worstCase": {"modelCalls": calls, "costUsd": float(round(cost, 4)), "bounded": bounded}}

