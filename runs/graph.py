"""Where each node of a workflow goes on the run page (and on a workflow's page in admin), worked
out on the server so the page needs no layout library: nodes in rows by their BFS distance from
`start` (top-down), forward edges as curves from one row down to a later one, and edges that go back
up (loops) or sideways drawn through a gutter on the right, so they never run through the rows
between. graph_context() is what templates/runs/_graph.html draws."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

NODE_W, NODE_H = 184, 64
GAP_X, GAP_Y = 40, 84
MARGIN = 24
# How far out each further back edge bends, so loops stay apart.
LOOP_REACH, LOOP_STEP = 44, 22
CHAR_W = 7  # an edge label's width per character at the page's 12px label size
TITLE_MAX, SUBTITLE_MAX = 20, 24  # characters that fit a box's bold title and its monospace id line


@dataclass(frozen=True)
class NodeBox:
    id: str
    type: str
    label: str
    x: int
    y: int
    layer: int
    transitions: tuple[tuple[str, str], ...]

    @property
    def title(self) -> str:
        return _clip(self.label or self.id, TITLE_MAX)

    @property
    def subtitle(self) -> str:
        """The id under a label; nothing when the title already is the id."""
        return _clip(self.id, SUBTITLE_MAX) if self.label else ""

    @property
    def width(self) -> int:
        return NODE_W

    @property
    def height(self) -> int:
        return NODE_H

    @property
    def cx(self) -> int:
        return self.x + NODE_W // 2

    # Baselines of the box's lines: the title, the id under a label, and the type and status.
    @property
    def title_y(self) -> int:
        return self.y + (22 if self.label else 27)

    @property
    def subtitle_y(self) -> int:
        return self.y + 39

    @property
    def meta_y(self) -> int:
        return self.y + (56 if self.label else 47)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    label: str  # the events that lead this way, comma-separated
    path: str  # SVG path data
    label_x: int
    label_y: int
    back: bool


@dataclass(frozen=True)
class Graph:
    nodes: list[NodeBox]
    edges: list[Edge]
    width: int
    height: int


NOT_REACHED = "not-reached"
RUN_LEGEND = [*((status, status) for status in ("completed", "running", "paused", "failed", "cancelled")),
              (NOT_REACHED, "not reached")]


def graph_context(definition: dict[str, Any], *, statuses: dict[str, str] | None = None,
                  current: str = "") -> dict[str, Any]:
    """The context of templates/runs/_graph.html. With `statuses` (node id -> the status of its latest
    visit), a run's graph: a node without one is not reached, `current` is marked, and the legend
    says what the colours mean. Without, the workflow alone: its nodes and moves, no status, no legend."""
    graph = layout(definition)
    if statuses is None:
        return {"graph": graph, "graph_nodes": [_graph_node(box) for box in graph.nodes], "legend": []}
    return {"graph": graph, "legend": RUN_LEGEND,
            "graph_nodes": [_graph_node(box, statuses.get(box.id, NOT_REACHED), box.id == current)
                            for box in graph.nodes]}


def _graph_node(box: NodeBox, status: str = "", current: bool = False) -> dict[str, Any]:
    shown = "not reached" if status == NOT_REACHED else status
    moves = "; ".join(f"on {event} go to {target}" for event, target in box.transitions)
    spoken = f"{box.label or box.id}: {box.type} node {box.id}{f', {shown}' if shown else ''}" \
             f"{', current step' if current else ''}"
    return {"box": box, "status": status, "shown": shown, "current": current,
            "spoken": f"{spoken}. {moves[0].upper() + moves[1:]}." if moves else f"{spoken}."}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _transitions(node: dict[str, Any], nodes: dict[str, Any]) -> list[tuple[str, str]]:
    return [(str(event), target) for event, target in (node.get("transitions") or {}).items()
            if isinstance(target, str) and target in nodes]


def layers(definition: dict[str, Any]) -> tuple[dict[str, int], list[str]]:
    """Each node's BFS distance from `start`, and the order BFS met the nodes in. Nodes that
    `start` cannot reach are laid out below, from the first of them in definition order."""
    nodes = definition.get("nodes") or {}
    layer: dict[str, int] = {}
    order: list[str] = []
    for seed in [definition.get("start"), *nodes]:
        if seed not in nodes or seed in layer:
            continue
        layer[seed] = max(layer.values()) + 1 if layer else 0
        queue = deque([seed])
        while queue:
            node_id = queue.popleft()
            order.append(node_id)
            for _, target in _transitions(nodes[node_id], nodes):
                if target not in layer:
                    layer[target] = layer[node_id] + 1
                    queue.append(target)
    return layer, order


def _grouped(box: NodeBox) -> list[tuple[str, str]]:
    """(target, "event, event") per target, in transition order: two events to one node are one arrow."""
    events: dict[str, list[str]] = {}
    for event, target in box.transitions:
        events.setdefault(target, []).append(event)
    return [(target, ", ".join(names)) for target, names in events.items()]


def layout(definition: dict[str, Any]) -> Graph:
    nodes = definition.get("nodes") or {}
    layer, order = layers(definition)
    rows: dict[int, list[str]] = {}
    for node_id in order:
        rows.setdefault(layer[node_id], []).append(node_id)
    widest = max((len(row) for row in rows.values()), default=0)
    content_w = widest * NODE_W + max(widest - 1, 0) * GAP_X

    boxes: dict[str, NodeBox] = {}
    for depth, row in sorted(rows.items()):
        row_w = len(row) * NODE_W + (len(row) - 1) * GAP_X
        left = MARGIN + (content_w - row_w) // 2
        for i, node_id in enumerate(row):
            node = nodes[node_id]
            boxes[node_id] = NodeBox(
                id=node_id, type=str(node.get("type", "")), label=str(node.get("label") or ""),
                x=left + i * (NODE_W + GAP_X), y=MARGIN + depth * (NODE_H + GAP_Y), layer=depth,
                transitions=tuple(_transitions(node, nodes)),
            )

    edges, right, bottom = _edges(boxes, MARGIN + content_w)
    height = MARGIN * 2 + len(rows) * NODE_H + max(len(rows) - 1, 0) * GAP_Y
    return Graph(nodes=[boxes[n] for n in order], edges=edges,
                 width=math.ceil(max(right, MARGIN + content_w)) + MARGIN,
                 height=max(height, math.ceil(bottom) + MARGIN))


def _edges(boxes: dict[str, NodeBox], content_right: float) -> tuple[list[Edge], float, float]:
    """Every edge, and the rightmost and lowest points any of them (or their labels) reach."""
    forward: list[tuple[NodeBox, NodeBox, str]] = []
    backward: list[tuple[NodeBox, NodeBox, str]] = []
    for box in boxes.values():
        for target, label in _grouped(box):
            (forward if boxes[target].layer > box.layer else backward).append((box, boxes[target], label))

    # Spread the ends of a node's arrows along its bottom (out) and top (in) edges.
    outs: dict[str, list[str]] = {}
    ins: dict[str, list[str]] = {}
    for source, target, _ in sorted(forward, key=lambda e: (e[0].id, e[1].x)):
        outs.setdefault(source.id, []).append(target.id)
    for source, target, _ in sorted(forward, key=lambda e: (e[1].id, e[0].x)):
        ins.setdefault(target.id, []).append(source.id)

    def spread(box: NodeBox, others: list[str], other: str) -> float:
        return box.x + NODE_W * (others.index(other) + 1) / (len(others) + 1)

    edges: list[Edge] = []
    right = content_right
    for source, target, label in forward:
        sx, sy = spread(source, outs[source.id], target.id), source.y + NODE_H
        tx, ty = spread(target, ins[target.id], source.id), target.y
        bend = (ty - sy) / 2
        # A symmetric S-curve: its midpoint is the midpoint of its ends.
        path = f"M{sx:.1f},{sy:.1f} C{sx:.1f},{sy + bend:.1f} {tx:.1f},{ty - bend:.1f} {tx:.1f},{ty:.1f}"
        edges.append(Edge(source.id, target.id, label, path, round((sx + tx) / 2), round((sy + ty) / 2), back=False))

    row_right: dict[int, int] = {}
    for box in boxes.values():
        row_right[box.layer] = max(row_right.get(box.layer, 0), box.x + NODE_W)
    bottom = 0.0
    for i, (source, target, label) in enumerate(backward):
        if source.id == target.id:
            # A small loop on the right, between where detours leave (low) and arrive (high).
            x, y = source.x + NODE_W, source.y
            path = (f"M{x:.1f},{y + NODE_H * 0.35:.1f} C{x + 40:.1f},{y + NODE_H * 0.1:.1f} "
                    f"{x + 40:.1f},{y + NODE_H * 0.9:.1f} {x:.1f},{y + NODE_H * 0.65:.1f}")
            label_x, label_y = x + 34 + len(label) * CHAR_W / 2, y + NODE_H / 2
            reach = x + 40
        else:
            points, label_x, label_y = _detour(source, target, row_right, i)
            path = _rounded(points)
            reach = label_x
            bottom = max(bottom, *(y for _, y in points))
        edges.append(Edge(source.id, target.id, label, path, round(label_x), round(label_y), back=True))
        right = max(right, reach, label_x + len(label) * CHAR_W / 2 + 4)
    return edges, right, bottom


def _detour(source: NodeBox, target: NodeBox, row_right: dict[int, int],
            index: int) -> tuple[list[tuple[float, float]], float, float]:
    """The way back up (or across): out of the source, right past every row between, up, and into
    the target. A node with others to its right is left through its bottom and entered through its
    top, so the line runs in the gaps between rows and never through a box. Answers the corner
    points and where the label goes (the middle of the upright stretch)."""
    low, high = sorted((source.layer, target.layer))
    gx = max(row_right.get(depth, 0) for depth in range(low, high + 1)) + LOOP_REACH + index * LOOP_STEP
    lane = GAP_Y * 0.3 + (index % 3) * 8  # how far into the gap between rows the line runs

    if source.x + NODE_W == row_right[source.layer]:
        points = [(float(source.x + NODE_W), source.y + NODE_H * 0.8)]
    else:
        out_x = source.x + NODE_W * 0.85
        points = [(out_x, float(source.y + NODE_H)), (out_x, source.y + NODE_H + lane)]
    points.append((gx, points[-1][1]))
    if target.x + NODE_W == row_right[target.layer]:
        end = [(float(target.x + NODE_W), target.y + NODE_H * 0.2)]
    else:
        in_x = target.x + NODE_W * 0.85
        end = [(in_x, target.y - lane), (in_x, float(target.y))]
    points.append((gx, end[0][1]))
    label_y = (points[-2][1] + points[-1][1]) / 2
    return [*points, *end], gx, label_y


def _rounded(points: list[tuple[float, float]], radius: float = 10) -> str:
    """An SVG path through `points` with its corners rounded."""
    path = [f"M{points[0][0]:.1f},{points[0][1]:.1f}"]
    for (px, py), (cx, cy), (nx, ny) in zip(points, points[1:], points[2:], strict=False):
        before = min(radius, math.dist((px, py), (cx, cy)) / 2)
        after = min(radius, math.dist((cx, cy), (nx, ny)) / 2)
        ax, ay = _towards((cx, cy), (px, py), before)
        bx, by = _towards((cx, cy), (nx, ny), after)
        path.append(f"L{ax:.1f},{ay:.1f} Q{cx:.1f},{cy:.1f} {bx:.1f},{by:.1f}")
    path.append(f"L{points[-1][0]:.1f},{points[-1][1]:.1f}")
    return " ".join(path)


def _towards(start: tuple[float, float], end: tuple[float, float], distance: float) -> tuple[float, float]:
    length = math.dist(start, end) or 1
    return (start[0] + (end[0] - start[0]) * distance / length, start[1] + (end[1] - start[1]) * distance / length)

