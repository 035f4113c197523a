"""Every node type that hands a step back, in one table: the engine pauses at them and applies
their answers, the answer tools and test_workflow's mocks reach them through each handler's
`tool`, and the engine's runners (runs.engine.RUNNERS) add the types it runs itself."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from runs.fanout import Consensus, Map, RoundRobin
from runs.nodes import AiAgent, AiJudge, Handler, Human

HANDLERS: dict[str, Handler] = {
    "ai_agent": AiAgent(),
    "ai_judge": AiJudge(),
    "human": Human(),
    "consensus": Consensus(),
    "round_robin": RoundRobin(),
    "map": Map(),
}


def node_types_check(runners: dict[str, object]) -> None:
    """Execution (the engine's runners, these handlers among them) and validation (the
    definition's NODE_TYPES) must know the same node types: a type one of them lacks would pass
    validation and then stop every run that reaches it, or run unvalidated."""
    from workflows.definition import NODE_TYPES

    if set(runners) != set(NODE_TYPES):
        raise ImproperlyConfigured(f"Node types differ: the definition has {sorted(NODE_TYPES)}, the engine runs "
                                   f"{sorted(runners)}.")
