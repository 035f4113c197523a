"""Handoff blocks: an execution's progress as copy-pasteable text that resume_from_handoff takes
back in another session or client.

A block is a human-readable box, then the state as base64 of gzip of its canonical JSON between
two marker lines. The state carries a SHA-256 of its canonical JSON (every level's keys sorted,
the checksum itself left out), not of its top-level keys alone as the original hashes. The
encoding is deterministic, so a block whose payload differs in any byte from what this module
writes for its state is refused too, even where base64 or gzip would have ignored the change.

The checksum shows a block was not damaged or edited by hand; anyone can compute one, so a
decoded state is still untrusted input, bounded here and validated where it is used.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import hmac
import json
import math
import re
import zlib
from typing import Any

from core.errors import InvalidInput
from core.input_bounds import first_text_problem

VERSION = "1.0.0"
START = "--- HANDOFF PAYLOAD START ---"
END = "--- HANDOFF PAYLOAD END ---"
BOX_WIDTH = 60
MAX_GOAL_IN_HEADER = 80
MAX_NEXT_STEPS = 5
MAX_BLOCK_CHARS = 1_000_000
MAX_STATE_BYTES = 1_000_000  # decompressed: a small payload must not inflate past this (gzip bombs)
MAX_STATE_DEPTH = 20
LINE = 76


class HandoffRefused(InvalidInput):
    code = "invalid_handoff"


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def checksum(state: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of the whole state, without its checksum field."""
    return hashlib.sha256(canonical({k: v for k, v in state.items() if k != "checksum"}).encode()).hexdigest()


def sealed(state: dict[str, Any]) -> dict[str, Any]:
    return {**{k: v for k, v in state.items() if k != "checksum"}, "checksum": checksum(state)}


def _payload(state: dict[str, Any]) -> str:
    # mtime=0 and a fixed level: the same state always gives the same bytes.
    compressed = gzip.compress(canonical(state).encode(), compresslevel=9, mtime=0)
    return base64.b64encode(compressed).decode("ascii")


def _one_line(text: object, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def header(state: dict[str, Any], next_steps: list[str]) -> list[str]:
    progress = state.get("goalProgress") or {}
    summary = (state.get("gatheredDataSummary") or {}).get("summary") or {}
    confidence = summary.get("averageConfidence")
    lines = [
        "╔" + "═" * BOX_WIDTH + "╗",
        f"║ AGENT HANDOFF — {_one_line(state.get('agentName', ''), BOX_WIDTH)}",
        f"║ Goal: {_one_line(progress.get('description', ''), MAX_GOAL_IN_HEADER)}",
        f"║ Status: {progress.get('status', '')} | Steps: {progress.get('stepsCompleted', 0)} | Confidence: "
        f"{'n/a' if confidence is None else f'{confidence:.2f}'}",
        "║",
        "║ Next Steps:",
        *(f"║   {_one_line(step, BOX_WIDTH - 4)}" for step in next_steps[:MAX_NEXT_STEPS]),
        "╚" + "═" * BOX_WIDTH + "╝",
    ]
    return lines


def encode(state: dict[str, Any], next_steps: list[str]) -> str:
    """The block for a sealed state."""
    payload = _payload(state)
    wrapped = [payload[i:i + LINE] for i in range(0, len(payload), LINE)]
    return "\n".join([*header(state, next_steps), START, *wrapped, END])


# What nesting depends on: escapes (so an escaped quote is not a string's end), quotes, brackets.
# Each match is one or two characters long, so the scan is linear in the text.
_STRUCTURE = re.compile(r'\\.|["\[\]{}]', re.DOTALL)


def _too_deep(text: str) -> bool:
    """Whether arrays and objects nest past MAX_STATE_DEPTH, counted before anything is parsed."""
    depth = 0
    in_string = False
    for token in _STRUCTURE.finditer(text):
        char = token.group()
        if char == '"':
            in_string = not in_string
        elif in_string or len(char) == 2:
            continue
        elif char in "[{":
            depth += 1
            if depth > MAX_STATE_DEPTH:
                return True
        else:
            depth -= 1
    return False


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text[:20]} is not a finite number")
    return number


def _not_restored(why: str) -> HandoffRefused:
    return HandoffRefused(f"Invalid handoff block: payload could not be restored ({why}).")


def decode(block: object) -> dict[str, Any]:
    """The state of a block, checked in this order: size, markers, payload, restoring it, integrity."""
    if not isinstance(block, str):
        raise HandoffRefused("Invalid handoff block: handoffBlock must be the block's text.")
    if len(block) > MAX_BLOCK_CHARS:
        raise HandoffRefused(f"Invalid handoff block: it is longer than {MAX_BLOCK_CHARS:,} characters.")
    # The last start marker: a goal quoted in the header cannot pose as the payload's beginning.
    start = block.rfind(START)
    end = block.find(END, start + len(START)) if start >= 0 else -1
    if start < 0 or end < 0:
        raise HandoffRefused("Invalid handoff block: missing payload markers")
    payload = "".join(block[start + len(START):end].split())
    if not payload:
        raise HandoffRefused("Invalid handoff block: empty payload")
    try:
        compressed = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _not_restored("it is not base64") from exc
    inflater = zlib.decompressobj(wbits=31)  # gzip framing only
    try:
        text = inflater.decompress(compressed, MAX_STATE_BYTES + 1)
    except zlib.error as exc:
        raise _not_restored("it is not gzip data") from exc
    if len(text) > MAX_STATE_BYTES:
        raise _not_restored(f"it inflates past {MAX_STATE_BYTES:,} bytes")
    if not inflater.eof:
        raise _not_restored("the gzip data is cut short")
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_restored("it is not UTF-8 text") from exc
    if _too_deep(decoded):
        raise _not_restored(f"it nests past {MAX_STATE_DEPTH} levels")
    try:
        state = json.loads(decoded, parse_constant=_no_constant, parse_float=_finite)
    except ValueError as exc:
        raise _not_restored("it is not JSON") from exc
    if not isinstance(state, dict) or not isinstance(state.get("checksum"), str):
        raise _not_restored("it holds no handoff state")
    problem = first_text_problem(state, "state")
    if problem is not None:
        raise _not_restored(f"{problem[0][:80]} {problem[1]}")
    if not hmac.compare_digest(state["checksum"].encode(), checksum(state).encode()) or _payload(state) != payload:
        raise HandoffRefused("Invalid handoff block: integrity check failed")
    if state.get("version") != VERSION:
        raise _not_restored(f"version {str(state.get('version'))[:20]!r} is not {VERSION}")
    for key in ("agentName", "goalId", "preparedAt"):
        if not isinstance(state.get(key), str):
            raise _not_restored(f"{key} is missing")
    if not isinstance(state.get("goalProgress"), dict):
        raise _not_restored("goalProgress is missing")
    return state
