"""Ensembles: which members an activation brings in, in which order, within the limits."""

from __future__ import annotations

from graphlib import CycleError, TopologicalSorter

from core.caller import Caller
from core.errors import InvalidInput
from elements.fields import MAX_ENSEMBLE_MEMBERS
from elements.models import Element
from elements.similarity import ElementCard
from elements.types import ElementType


def _ordered(ensemble: Element) -> list[dict]:
    members = list(ensemble.metadata.get("elements") or [])
    strategy = ensemble.metadata.get("activationStrategy", "sequential")
    if strategy == "priority":
        return sorted(members, key=lambda m: -m.get("priority", 50))
    if strategy == "sequential":
        graph = {m["element_name"]: set(m.get("dependencies") or []) for m in members}
        try:
            order = list(TopologicalSorter(graph).static_order())
        except CycleError as exc:
            cycle = " -> ".join(exc.args[1])
            raise InvalidInput(f"Ensemble '{ensemble.name}' has a dependency cycle: {cycle}.",
                               code="ensemble_cycle") from exc
        position = {name: index for index, name in enumerate(order)}
        return sorted(members, key=lambda m: position[m["element_name"]])
    return members


def resolve(*, caller: Caller, ensemble: Element) -> tuple[list[Element], list[str]]:
    """The members to activate with `ensemble`, nested ensembles expanded, and warnings."""
    activated: list[Element] = []
    warnings: list[str] = []
    seen: set[int] = set()

    def visit(current: Element, path: tuple[str, ...]) -> None:
        depth_limit = current.metadata.get("maxNestingDepth", 5)
        for member in _ordered(current):
            if member.get("activation") == "on-demand":
                continue
            if member.get("activation") == "conditional" and member.get("condition"):
                # Conditions would be code; user code never runs in the web process.
                warnings.append(f"{member['element_name']} was not activated: conditions are not evaluated.")
                continue
            element = Element.objects.filter(owner=caller.user, element_type=member["element_type"],
                                             name=member["element_name"]).first()
            if element is None:
                warnings.append(f"{member['element_type']} '{member['element_name']}' of ensemble "
                                f"'{current.name}' does not exist and was skipped.")
                continue
            if element.pk in seen:
                continue
            if element.element_type == ElementType.ENSEMBLE:
                if element.name in path:
                    raise InvalidInput(f"Ensemble nesting cycle: {' -> '.join((*path, element.name))}.",
                                       code="ensemble_cycle")
                if not current.metadata.get("allowNested", True) or len(path) >= depth_limit:
                    warnings.append(f"Nested ensemble '{element.name}' was skipped: nesting is off or deeper than "
                                    f"{depth_limit}.")
                    continue
                seen.add(element.pk)
                activated.append(element)
                visit(element, (*path, element.name))
                continue
            if len(activated) >= MAX_ENSEMBLE_MEMBERS:
                warnings.append(f"Stopped at {MAX_ENSEMBLE_MEMBERS} elements, the most one activation brings in.")
                return
            seen.add(element.pk)
            activated.append(element)

    visit(ensemble, (ensemble.name,))
    return activated, warnings


def card(element: Element) -> ElementCard:
    """What similarity and relationship scoring needs to know of an element."""
    references: list[tuple[str, str]] = []
    if element.element_type == ElementType.ENSEMBLE:
        references = [(m["element_type"], m["element_name"]) for m in element.metadata.get("elements") or []]
    elif element.element_type == ElementType.AGENT:
        for kind, names in (element.metadata.get("activates") or {}).items():
            plural = {t.plural: t.value for t in ElementType}
            if kind in plural and isinstance(names, list):
                references += [(plural[kind], str(n)) for n in names]
    return ElementCard(element_type=element.element_type, name=element.name, description=element.description,
                       text=f"{element.instructions}\n{element.content}", tags=tuple(element.tags),
                       triggers=tuple(element.triggers), references=tuple(references))
