"""Runs one skill inside the sandbox, under the system's Python (`python3 -I -B run_skill.py`).

Reads input.json, loads skill.py (the skill's source) as the module `skill`, calls its
run(input, atrium), and writes the outcome to stdout as one JSON line: {"ok": true, "output": ...}, or
{"ok": false, "error": "Type: message", "traceback": "..."} with the skill's own last frames. Anything
else the skill writes, to sys.stdout or to file descriptor 1, goes to stderr, so that line is the only
thing on stdout.
"""

import json
import os
import sys
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SKILL_FILE = "skill.py"
# The server keeps the first MiB of stdout; a longer line would be cut, and unreadable.
OUTPUT_BYTES = 1024 * 1024 - 64
FRAMES = 5


class SkillContractError(Exception):
    pass


def _run():
    with open(os.path.join(HERE, "input.json"), encoding="utf-8") as file:
        input = json.load(file)
    import atrium

    with open(os.path.join(HERE, SKILL_FILE), encoding="utf-8") as file:
        source = file.read()
    module = types.ModuleType("skill")
    module.__file__ = SKILL_FILE
    sys.modules["skill"] = module
    # Compiled under its plain name so tracebacks say "skill.py", found through sys.path for the lines.
    exec(compile(source, SKILL_FILE, "exec"), module.__dict__)
    run = getattr(module, "run", None)
    if not callable(run):
        raise SkillContractError("The skill's source defines no run(input, atrium) function.")
    return run(input, atrium)


def _failure(exc):
    """The exception's own line first, then the skill's last frames (a SyntaxError's: where it is)."""
    if isinstance(exc, SkillContractError):
        return {"ok": False, "error": str(exc)}
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == SKILL_FILE]
    *where, message = "".join(traceback.format_exception_only(type(exc), exc)).rstrip().splitlines() or [""]
    lines = "".join(traceback.format_list(frames[-FRAMES:])).rstrip().splitlines() + where
    return {"ok": False, "error": message.strip(), "traceback": "\n".join(lines)}


def _outcome():
    try:
        output = _run()
    except BaseException as exc:  # SystemExit and MemoryError too: the skill failed, and says how
        return json.dumps(_failure(exc))
    try:
        line = json.dumps({"ok": True, "output": output}, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        return json.dumps({"ok": False, "error": f"run() returned a value that is not JSON: {exc}"})
    if len(line.encode()) > OUTPUT_BYTES:
        return json.dumps({"ok": False, "error": f"run() returned {len(line.encode())} bytes of JSON; at most "
                                                 f"{OUTPUT_BYTES} are kept."})
    return line


def main():
    result = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path.insert(0, HERE)
    result.write(_outcome() + "\n")
    result.flush()


if __name__ == "__main__":
    main()
