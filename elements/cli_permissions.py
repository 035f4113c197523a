"""CLI permissions: whether a tool call of the MCP client's own (Claude Code's Bash, Edit, Read...)
may run, for `permission_prompt` (Claude Code's `--permission-prompt-tool`).

The first half is pure: `classify` gives a request its risk level (safe, moderate, dangerous,
blocked) by static rules, and `evaluate` puts that together with the `externalRestrictions` of the
session's active elements. The decision, in this order, stops at the first stage that decides:

 1. rate limit (per MCP session)                      -> deny
 2. input validation (empty or oversized input)       -> deny
 3. static BLOCKED (disk wipes, fork bombs)            -> deny; nothing overrides it
 4. element denyPatterns                              -> deny
 5. static DANGEROUS (rm -rf, sudo, pipe to a shell)   -> deny
 6. an existing decision of this session              -> allow (or deny, once, if the user denied it)
 7. element confirmPatterns                           -> deny with a pending approval request
 8. element allowPatterns                             -> allow
 9. static SAFE (Read, git status...)                  -> allow
10. allowPatterns defined but none matched            -> deny
11. approvalPolicy.requireApproval                    -> deny with a pending approval request
12. default (moderate)                                -> allow

Unlike the original, element deny patterns come before the static SAFE list, so an element can
block Read. Atrium's own gatekeeper operations (confirm_operation and the like, called through
mcp__<server>__mcp_aql_*) are never blocked by element patterns, as in the original.

Commands are read by a small quote-aware scanner rather than regular expressions: it splits a
command at `;`, `&&`, `||`, `|`, `&` and newlines, and pulls out `$(...)`, backticks, subshells
and expanding here-documents, so a compound command is as risky as its riskiest part. Patterns are
fnmatch globs, whose compiled form does not backtrack. Inputs are bounded before any of this.

`permission_decide`, at the end, adds what is not pure: the rate limit, the session's approvals
(elements.approvals) and the pending request a person answers on their approvals page.
"""

from __future__ import annotations

import json
import posixpath
import shlex
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from accounts.ratelimit import permission_prompt_retry_after
from core.caller import Caller
from core.input_bounds import json_depth
from elements import approvals, selectors
from elements.gatekeeper import Policy
from elements.mcpaql import ROUTES, Endpoint
from elements.models import CliApproval

SAFE, MODERATE, DANGEROUS, BLOCKED = "safe", "moderate", "dangerous", "blocked"
RISK_ORDER = (SAFE, MODERATE, DANGEROUS, BLOCKED)

# Far past any real tool call (a Write of a large file, a long heredoc), and small enough that
# scanning, hashing and storing one stays cheap.
MAX_TOOL_NAME = 200
MAX_INPUT_CHARS = 2_000_000
MAX_INPUT_DEPTH = 16
MAX_COMMAND_CHARS = 50_000
MAX_NESTING = 32
MAX_PARTS = 256

# --- static rules ---------------------------------------------------------------------------

# Read-only, no side effects (Task* also covers the sub-agent launcher: its own calls are asked
# about one by one).
SAFE_TOOLS = ("Read", "Grep", "Glob", "LS", "WebFetch", "WebSearch", "Task*", "TodoRead", "TodoWrite",
              "NotebookRead", "BashOutput", "AskUserQuestion", "EnterPlanMode", "ExitPlanMode",
              "ListMcpResourcesTool", "ReadMcpResourceTool")
MODIFYING_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit", "Agent", "KillShell", "KillBash"})
# The input key that names what a tool acts on, matched by patterns such as `Edit:/etc/*`.
ARGUMENT_KEYS = {"Bash": "command", "Read": "file_path", "Edit": "file_path", "MultiEdit": "file_path",
                 "Write": "file_path", "NotebookRead": "notebook_path", "NotebookEdit": "notebook_path",
                 "LS": "path", "Grep": "path", "Glob": "path", "WebFetch": "url"}
PATH_TOOLS = frozenset({"Read", "Edit", "MultiEdit", "Write", "NotebookRead", "NotebookEdit", "LS", "Grep", "Glob"})

# Atrium's own gatekeeper flow: blocking these would leave the model no way to ask for a
# confirmation, so element patterns never block them.
ESSENTIAL_OPERATIONS = frozenset({"confirm_operation", "verify_challenge", "permission_prompt", "introspect",
                                  "get_active_elements", "get_execution_state", "get_gathered_data",
                                  "get_effective_cli_policies", "get_pending_cli_approvals",
                                  "approve_cli_permission"})
# Read-endpoint operations that change the session or the user's settings: not "safe".
STATEFUL_READS = frozenset({"activate_element", "deactivate_element", "dollhouse_config"})

# Simple commands, words joined by single spaces and quotes removed.
SAFE_COMMANDS = (
    "git status*", "git diff*", "git log*", "git show*", "git branch*", "git remote", "git remote -v*",
    "git remote show*", "git remote get-url*", "git stash list*", "git rev-parse*", "git blame*", "git ls-files*",
    "git describe*", "ls*", "pwd", "cat *", "head", "head *", "tail", "tail *", "wc", "wc *", "echo", "echo *",
    "which *", "type *", "whoami", "date", "uname*", "grep *", "rg *", "npm test*", "npm run test*",
    "npm run lint*", "npm run build*", "npm run check*", "npm run typecheck*", "npm ls*", "npm info*",
    "npm outdated*", "npx jest*", "npx tsc --noEmit*", "node --version*", "python --version*", "python3 --version*",
    "pytest*", "python -m pytest*", "python3 -m pytest*", "cargo test*", "go test*", "make test*", "gh issue list*",
    "gh issue view*", "gh pr list*", "gh pr view*", "gh pr checks*", "gh pr diff*",
)
DANGEROUS_COMMANDS = (
    "git reset --hard*", "git checkout -- *", "git branch -D *", "chmod +s *", "chmod u+s *", "chown root*",
    "chown -R root*", "sudo", "sudo *", "doas *", "pkexec *", "su", "su *", "eval *",
    "npm install", "npm install *", "npm i", "npm i *", "npm ci*", "yarn add *", "yarn install*",
    "pnpm add *", "pnpm install*", "pip install *", "pip3 install *", "python -m pip install *",
    "python3 -m pip install *", "gem install *", "cargo install *", "export PATH=*", "export LD_PRELOAD=*",
    "export LD_LIBRARY_PATH=*", "env -i *", "unset *", "kill *", "pkill *", "killall *", "nc *", "netcat *",
    "ncat *", "socat *", "telnet *", "shutdown*", "reboot*", "halt*", "poweroff*",
)
BLOCKED_COMMANDS = ("mkfs*", "dd if=*", "format *", "wipefs*")
BLOCK_DEVICES = ("/dev/sd*", "/dev/hd*", "/dev/vd*", "/dev/xvd*", "/dev/nvme*", "/dev/mmcblk*", "/dev/disk*")
HARMLESS_REDIRECTS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish", "csh", "tcsh"})
INTERPRETERS = SHELLS | {"python", "python3", "perl", "ruby", "node", "php", "lua", "osascript"}
INLINE_CODE_FLAGS = frozenset({"-c", "-e", "-E", "--eval"})
# Words that run the rest of the command line as a command of its own.
WRAPPERS = frozenset({"command", "builtin", "exec", "nohup", "nice", "time", "env", "stdbuf", "ionice",
                      "timeout", "xargs", "watch", "chronic", "unbuffer", "setsid", "strace"})
SHELL_KEYWORDS = frozenset({"{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until",
                            "for", "case", "esac", "select", "function", "coproc", "[[", "]]"})
POISONED_VARIABLES = ("PATH=", "LD_PRELOAD=", "LD_LIBRARY_PATH=", "DYLD_INSERT_LIBRARIES=")


@dataclass(frozen=True)
class Classification:
    risk_level: str
    reason: str
    essential: bool = False  # one of Atrium's gatekeeper operations, which element patterns never block


def matches(text: str, patterns: tuple[str, ...]) -> str | None:
    """The first of `patterns` (fnmatch globs, case-sensitive) that `text` matches."""
    return next((p for p in patterns if fnmatchcase(text, p)), None)


# --- reading a Bash command -----------------------------------------------------------------

@dataclass(frozen=True)
class CommandPart:
    """One simple command of a command line."""

    raw: str  # as written, whitespace collapsed
    words: tuple[str, ...]  # shell words, quotes removed
    piped: bool  # reads the previous command's output
    pipes_out: bool  # its output goes to the next command
    writes: tuple[str, ...]  # files its output is redirected to

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass
class ParsedCommand:
    parts: list[CommandPart] = field(default_factory=list)
    balanced: bool = True
    too_complex: bool = False
    process_substitution: bool = False
    functions: list[str] = field(default_factory=list)  # names of shell functions it defines


class _Frame:
    """What the scanner is inside: the command line, a $(...) or `...` substitution, a subshell, or
    the body of an expanding here-document (`data`: text, not commands)."""

    def __init__(self, closer: str, *, data: bool = False) -> None:
        self.closer = closer
        self.data = data
        self.quote = '"' if data else ""
        self.buf: list[str] = []
        self.piped = False
        self.redirects: list[int] = []  # positions in buf where a redirect's target starts


def _collapse(text: str) -> str:
    return " ".join(text.split())


class _Scanner:
    def __init__(self) -> None:
        self.parsed = ParsedCommand()
        self.frames: list[_Frame] = [_Frame("")]
        self.heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, expands, strips tabs)

    def end_part(self, frame: _Frame, *, pipes_out: bool = False) -> None:
        text = "".join(frame.buf)
        if not frame.data and text.strip():
            writes = []
            for start in frame.redirects:
                target = "".join(frame.buf[start:]).split(maxsplit=1)
                if target:
                    writes.append(target[0].strip("'\""))
            try:
                words = shlex.split(text)
            except ValueError:  # an unbalanced quote at the very end of the command
                words = text.split()
            self.parsed.parts.append(CommandPart(raw=_collapse(text), words=tuple(words), piped=frame.piped,
                                                 pipes_out=pipes_out, writes=tuple(writes)))
            if len(self.parsed.parts) > MAX_PARTS:
                self.parsed.too_complex = True
        frame.buf, frame.redirects, frame.piped = [], [], pipes_out

    def push(self, closer: str) -> None:
        self.frames.append(_Frame(closer))
        if len(self.frames) > MAX_NESTING:
            self.parsed.too_complex = True

    def pop(self) -> None:
        self.end_part(self.frames.pop())

    def scan(self, text: str) -> None:
        """Read `text` into parts; bounded by its length (every step consumes at least one character)."""
        i, n = 0, len(text)
        while i < n and not self.parsed.too_complex:
            frame = self.frames[-1]
            c = text[i]
            if frame.quote == "'":
                frame.buf.append(c)
                frame.quote = "" if c == "'" else "'"
                i += 1
            elif c == "\\":
                frame.buf.append(text[i:i + 2])
                i += 2
            elif text.startswith("$(", i) or (not frame.quote and text.startswith(("<(", ">("), i)):
                self.parsed.process_substitution |= c != "$"
                frame.buf.append("$(…)")
                self.push(")")
                i += 2
            elif c == "`":
                if frame.closer == "`":
                    self.pop()
                else:
                    frame.buf.append("$(…)")
                    self.push("`")
                i += 1
            elif frame.quote == '"':
                frame.buf.append(c)
                if c == '"' and not frame.data:
                    frame.quote = ""
                i += 1
            else:
                i = self.unquoted(text, i, frame)

    def unquoted(self, text: str, i: int, frame: _Frame) -> int:
        c = text[i]
        if c in "'\"":
            frame.quote = c
            frame.buf.append(c)
            return i + 1
        if c == "#" and (not frame.buf or frame.buf[-1][-1:].isspace()):
            end = text.find("\n", i)
            return len(text) if end == -1 else end
        if c == "(":
            if text.startswith("()", i):
                self.parsed.functions.append("".join(frame.buf).split()[-1] if "".join(frame.buf).split() else "")
                frame.buf.append("()")
                return i + 2
            self.push(")")
            return i + 1
        if c == ")":
            if frame.closer == ")":
                self.pop()
            else:
                self.end_part(frame)
            return i + 1
        if c == "|":
            if text.startswith("||", i):
                self.end_part(frame)
                return i + 2
            self.end_part(frame, pipes_out=True)
            return i + (2 if text.startswith("|&", i) else 1)
        if c == "&" and not text.startswith("&>", i):
            self.end_part(frame)
            return i + (2 if text.startswith("&&", i) else 1)
        if c == ";":
            self.end_part(frame)
            return i + 1
        if c == "\n":
            self.end_part(frame)
            return self.heredoc_bodies(text, i + 1)
        if text.startswith("<<", i) and not text.startswith("<<<", i):
            return self.heredoc(text, i, frame)
        if c == ">" or text.startswith("&>", i):
            start = i
            while i < len(text) and text[i] in "&>|":
                i += 1
            operator = text[start:i]
            frame.buf.append(operator)
            # `>&2` and `2>&-` point one descriptor at another; `>&file` and `&>file` write a file.
            duplicates = operator.endswith("&") and text[i:i + 1] in ("-", *"0123456789")
            if not duplicates:
                frame.redirects.append(len(frame.buf))
            return i
        frame.buf.append(c)
        return i + 1

    def heredoc(self, text: str, i: int, frame: _Frame) -> int:
        i += 2
        strips_tabs = text.startswith("-", i)
        i += strips_tabs
        while i < len(text) and text[i] in " \t":
            i += 1
        start = i
        while i < len(text) and not text[i].isspace() and text[i] not in ";&|()<>":
            i += 1
        word = text[start:i]
        delimiter = word.replace("'", "").replace('"', "").replace("\\", "")
        frame.buf.append(f"<<{word}")
        if delimiter:
            self.heredocs.append((delimiter, word == delimiter, strips_tabs))
        return i

    def heredoc_bodies(self, text: str, i: int) -> int:
        """Skip the bodies of the here-documents opened on the line just ended; an expanding one
        (unquoted delimiter) still runs its $(...) and backticks, so those are read as commands."""
        pending, self.heredocs = self.heredocs, []
        for delimiter, expands, strips_tabs in pending:
            lines = []
            while i < len(text):
                end = text.find("\n", i)
                end = len(text) if end == -1 else end
                line = text[i:end]
                i = end + 1
                if (line.lstrip("\t") if strips_tabs else line) == delimiter:
                    break
                lines.append(line)
            if expands and lines:
                outer, self.frames = self.frames, [_Frame("", data=True)]
                self.scan("\n".join(lines))
                while self.frames:
                    self.pop()
                self.frames = outer
        return min(i, len(text))


def parse_command(command: str) -> ParsedCommand:
    """A command line read into its simple commands (bounded by MAX_NESTING and MAX_PARTS)."""
    scanner = _Scanner()
    scanner.scan(command)
    scanner.parsed.balanced = len(scanner.frames) == 1 and not scanner.frames[0].quote
    while scanner.frames:
        scanner.pop()
    return scanner.parsed


def _command_forms(words: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The command itself, then every command it may run through a wrapper (`nohup X`, `env A=1 X`,
    `timeout 5 X`, `find -exec X`): each is checked against the dangerous rules."""
    forms: list[tuple[str, ...]] = []
    pending = [words]
    while pending and len(forms) < 32:
        current = list(pending.pop())
        while current and (current[0] in SHELL_KEYWORDS or _assignment(current[0])):
            current.pop(0)
        if not current:
            continue
        current[0] = posixpath.basename(current[0].lstrip("\\")) or current[0]
        forms.append(tuple(current))
        if current[0] in WRAPPERS:
            # Options of wrappers take values (`nice -n 10`, `timeout 5`): try each of the next
            # few words as the start of the wrapped command.
            pending.extend(tuple(current[k:]) for k in range(1, min(len(current), 6)))
        if current[0] == "find":
            for k, word in enumerate(current):
                if word in ("-exec", "-execdir", "-ok", "-okdir") and k + 1 < len(current):
                    pending.append(tuple(w for w in current[k + 1:] if w not in (";", "+", "{}")))
    return forms


def _assignment(word: str) -> bool:
    name, equals, _ = word.partition("=")
    return bool(equals) and name.replace("_", "a").isalnum() and not name[:1].isdigit()


def _flags(words: tuple[str, ...]) -> set[str]:
    """The single-letter flags in the words' option clusters (`-rf` gives r and f), plus the long ones."""
    found: set[str] = set()
    for word in words:
        if word.startswith("--"):
            found.add(word)
        elif word.startswith("-") and len(word) > 1:
            found.update(word[1:])
    return found


def _git_subcommand(args: tuple[str, ...]) -> tuple[str, ...]:
    """git's arguments from its subcommand on, past global options (`git -C dir push -f`)."""
    k = 0
    while k < len(args) and args[k].startswith("-"):
        k += 2 if args[k] in ("-C", "-c") else 1
    return args[k:]


def _dangerous_form(form: tuple[str, ...]) -> str | None:
    """Why one simple command is dangerous (the rule it matches), or None."""
    name, args = form[0], form[1:]
    if name == "git":
        args = _git_subcommand(args)
        form = (name, *args)
    flags = _flags(args)
    if name == "rm" and ({"r", "R", "--recursive"} & flags) and ({"f", "--force"} & flags):
        return "rm -rf *"
    if name == "git" and args[:1] == ("push",) and (
            {"f", "--force"} & _flags(args[1:]) or any(a.startswith("+") for a in args[1:])):
        return "git push --force*"
    if name == "git" and args[:1] == ("clean",) and {"f", "--force"} & _flags(args[1:]):
        return "git clean -f*"
    if name == "chmod" and any(a in ("777", "a+rwx", "ugo+rwx", "0777") for a in args):
        return "chmod 777*"
    if name == "tar" and args and ("x" in args[0].lstrip("-") and not args[0].startswith("--")):
        return "tar -xf *"
    if name in SHELLS and "c" in flags:
        return f"{name} -c *"
    if name in INTERPRETERS - SHELLS and INLINE_CODE_FLAGS & {f"-{f}" if len(f) == 1 else f for f in flags}:
        return f"{name} -c *" if "c" in flags else f"{name} -e *"
    return matches(" ".join(form), DANGEROUS_COMMANDS)


def _part_risk(part: CommandPart) -> tuple[str, str]:
    """(risk level, reason) of one simple command."""
    for target in part.writes:
        if matches(target, BLOCK_DEVICES):
            return BLOCKED, f"Blocked command pattern: > {target} (writes to a disk device)"
    if any(word.startswith(POISONED_VARIABLES) for word in part.words if _assignment(word)):
        return DANGEROUS, "Dangerous command pattern: PATH= / LD_PRELOAD= (environment poisoning)"
    forms = _command_forms(part.words)
    for form in forms:
        blocked = matches(" ".join(form), BLOCKED_COMMANDS)
        if blocked:
            return BLOCKED, f"Blocked command pattern: {blocked}"
        if form[0] == "dd" and any(a.startswith("of=") and matches(a[3:], BLOCK_DEVICES) for a in form[1:]):
            return BLOCKED, "Blocked command pattern: dd of=/dev/sd* (writes to a disk device)"
    for form in forms:
        dangerous = _dangerous_form(form)
        if dangerous:
            return DANGEROUS, f"Dangerous command pattern: {dangerous}"
    if forms and part.piped and forms[0][0] in INTERPRETERS | {"sudo"}:
        return DANGEROUS, f"Dangerous command pattern: … | {forms[0][0]} (output piped into a shell or interpreter)"
    if forms and part.pipes_out and forms[0][0] in ("curl", "wget"):
        return DANGEROUS, f"Dangerous command pattern: {forms[0][0]} * | * (a download piped into another command)"
    if not forms:
        return SAFE, "Nothing to run"
    safe = matches(" ".join(forms[0]), SAFE_COMMANDS)
    writes = [w for w in part.writes if w not in HARMLESS_REDIRECTS]
    if safe and not writes:
        return SAFE, f"Safe command pattern: {safe}"
    if writes:
        return MODERATE, f"Bash command writes to {writes[0]}"
    return MODERATE, "Bash command not statically classified"


def _fork_bomb(command: str, functions: list[str]) -> bool:
    squeezed = "".join(command.split())
    return any(name and f"{name}|{name}" in squeezed for name in functions)


def classify_command(command: str, parsed: ParsedCommand) -> Classification:
    """A command line is as risky as its riskiest simple command."""
    if _fork_bomb(command, parsed.functions):
        return Classification(BLOCKED, "Blocked command pattern: :(){ :|:& };: (a fork bomb)")
    if parsed.too_complex:
        return Classification(DANGEROUS, f"Bash command nested more than {MAX_NESTING} deep or made of more than "
                                         f"{MAX_PARTS} commands: too complex to classify")
    if parsed.functions:
        return Classification(DANGEROUS, "Dangerous command pattern: *(){ * (defines a shell function, which static "
                                         "rules cannot follow)")
    if parsed.process_substitution:
        return Classification(DANGEROUS, "Dangerous command pattern: *<(* (process substitution)")
    if not parsed.parts:
        return Classification(MODERATE, "Bash command runs nothing that static rules can classify")
    risks = [(_part_risk(part), part) for part in parsed.parts]
    (level, reason), part = max(risks, key=lambda risk: RISK_ORDER.index(risk[0][0]))
    if len(risks) > 1:
        reason = f"Every command is safe ({len(risks)} commands)" if level == SAFE else \
            f"{reason} (in: {part.raw[:200]})"
    if level == SAFE and not parsed.balanced:
        return Classification(MODERATE, "Bash command has an unclosed quote or parenthesis")
    return Classification(level, reason)


# --- classifying a request ------------------------------------------------------------------

def _mcp_operation(tool_name: str, tool_input: dict[str, Any]) -> tuple[str, str]:
    """(tool, MCP-AQL operation) of an `mcp__<server>__<tool>` call."""
    tool = tool_name.removeprefix("mcp__").rpartition("__")[2]
    operation = tool_input.get("operation")
    return tool, operation if isinstance(operation, str) else ""


def classify(tool_name: str, tool_input: dict[str, Any], parsed: ParsedCommand | None = None) -> Classification:
    """The request's risk by static rules alone."""
    if tool_name == "Bash":
        command = tool_input.get("command")
        return classify_command(command, parsed if parsed is not None else parse_command(command))
    if matches(tool_name, SAFE_TOOLS):
        return Classification(SAFE, f"{tool_name} is a read-only tool")
    if tool_name.startswith("mcp__"):
        tool, operation = _mcp_operation(tool_name, tool_input)
        ours = tool.startswith("mcp_aql_") or tool == "permission_prompt"
        if ours and (operation in ESSENTIAL_OPERATIONS or (tool == "permission_prompt" and not operation)):
            name = operation or "permission_prompt"
            return Classification(SAFE, f"Gatekeeper-essential operation '{name}': never blocked by element "
                                        "patterns", essential=True)
        route = ROUTES.get(operation)
        if tool == "mcp_aql_read" and route is not None and route.endpoint is Endpoint.READ \
                and operation not in STATEFUL_READS:
            return Classification(SAFE, f"Read-only MCP operation '{operation}'")
        return Classification(MODERATE, "MCP tool call requires policy evaluation")
    if tool_name in MODIFYING_TOOLS:
        return Classification(MODERATE, f"{tool_name} modifies state, requires policy evaluation")
    return Classification(MODERATE, f"Unknown tool '{tool_name}', requires policy evaluation")


def input_problem(tool_name: str, tool_input: object) -> str | None:
    """Why a request cannot be evaluated at all (it is then denied), or None."""
    if not tool_name.strip() or len(tool_name) > MAX_TOOL_NAME:
        return f"tool_name must be 1 to {MAX_TOOL_NAME} characters"
    if not isinstance(tool_input, dict):
        return "input must be an object"
    if json_depth(tool_input, MAX_INPUT_DEPTH) > MAX_INPUT_DEPTH:
        return f"input is nested more than {MAX_INPUT_DEPTH} levels deep"
    size = len(json.dumps(tool_input, ensure_ascii=False, default=str))
    if size > MAX_INPUT_CHARS:
        return f"input is {size:,} characters of JSON; the limit is {MAX_INPUT_CHARS:,}"
    if tool_name == "Bash":
        command = tool_input.get("command")
        if not isinstance(command, str) or not command.strip():
            return 'Missing required "command" in input for Bash tool. Cannot evaluate an empty command.'
        if len(command) > MAX_COMMAND_CHARS:
            return (f"the Bash command is {len(command):,} characters long; the limit is {MAX_COMMAND_CHARS:,} "
                    "(write long content with the Write tool instead)")
    return None


# --- element patterns -----------------------------------------------------------------------

def _clean(text: str) -> str:
    """Text as patterns see it: NFC-normalised, without control characters (which a pattern
    could not spell, and which could split a word a pattern looks for)."""
    normal = unicodedata.normalize("NFC", text)
    return "".join(ch if ch >= " " or ch == "\t" else " " for ch in normal if ch != "\x7f")


@dataclass(frozen=True)
class Targets:
    """What element patterns are matched against: the tool's name, and `Tool:<argument>` strings.
    `units` are what allow patterns must each match (every part of a compound command)."""

    name: str
    arguments: tuple[str, ...] = ()
    units: tuple[tuple[str, ...], ...] = ()


def targets_of(tool_name: str, tool_input: dict[str, Any], parsed: ParsedCommand | None) -> Targets:
    # An MCP-AQL call is named by its operation, so `mcp__atrium__mcp_aql_read:deactivate_element`
    # can keep the model from lifting the element's own restrictions.
    key = ARGUMENT_KEYS.get(tool_name) or ("operation" if tool_name.startswith("mcp__") else None)
    value = tool_input.get(key) if key else None
    if not isinstance(value, str) or not value:
        return Targets(tool_name)
    if tool_name == "Bash" and parsed is not None:
        whole = f"Bash:{_collapse(_clean(value))}"
        units = tuple((f"Bash:{_clean(p.raw)}", f"Bash:{_clean(p.text)}") for p in parsed.parts)
        if len(units) == 1:
            units = ((whole, *units[0]),)
        return Targets(tool_name, (whole, *(t for unit in units for t in unit)), units)
    argument = _clean(value)
    if tool_name in PATH_TOOLS:
        # A path that climbs out (`/repo/../etc/passwd`) is matched where it lands.
        argument = posixpath.normpath(argument)
    target = f"{tool_name}:{argument}"
    return Targets(tool_name, (target,), ((target,),))


@dataclass(frozen=True)
class PatternMatch:
    policy: Policy
    list_name: str  # denyPatterns, confirmPatterns, allowPatterns or requireApproval
    pattern: str
    target: str

    @property
    def source(self) -> str:
        return f"{self.policy.element_type} '{self.policy.element_name}'"


def _first_match(policies: Sequence[Policy], list_name: str, targets: Targets) -> PatternMatch | None:
    for policy in policies:
        patterns = _patterns(policy, list_name)
        for target in (targets.name, *targets.arguments):
            pattern = matches(target, patterns)
            if pattern:
                return PatternMatch(policy, list_name, pattern, target)
    return None


def _patterns(policy: Policy, list_name: str) -> tuple[str, ...]:
    external = policy.external
    if external is None:
        return ()
    return {"denyPatterns": external.deny, "confirmPatterns": external.confirm, "allowPatterns": external.allow,
            "requireApproval": external.require_approval}[list_name]


def _allowed(policies: Sequence[Policy], targets: Targets) -> PatternMatch | None:
    """The allow pattern that lets the request through: one matching the tool's name, or (with
    allow patterns from any element) one for every part of the command."""
    allow = tuple(p for policy in policies for p in _patterns(policy, "allowPatterns"))
    by_name = _first_match(policies, "allowPatterns", Targets(targets.name))
    if by_name is not None or not targets.units:
        return by_name
    first: PatternMatch | None = None
    for unit in targets.units:
        found = next(((t, p) for t in unit if (p := matches(t, allow))), None)
        if found is None:
            return None
        if first is None:
            policy = next(pol for pol in policies if found[1] in _patterns(pol, "allowPatterns"))
            first = PatternMatch(policy, "allowPatterns", found[1], found[0])
    return first


# --- the decision ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Decision:
    behavior: str  # allow or deny
    classification: Classification
    stage: str  # rate_limit, input_validation, static_classification, element_policy, cli_approval,
    #            approval_required or default
    message: str = ""
    matched: PatternMatch | None = None
    consulted: tuple[Policy, ...] = ()
    approval: CliApproval | None = None  # the existing decision that answered, at stage cli_approval
    needs_approval: bool = False  # a person must approve: a pending request is made or reused
    ttl_seconds: int = approvals.APPROVAL_TTL_SECONDS

    def policy_context(self) -> dict[str, Any] | None:
        if not self.consulted:
            return None
        context: dict[str, Any] = {"evaluatedElements": [{"type": p.element_type, "name": p.element_name}
                                                         for p in self.consulted]}
        if self.matched is not None:
            context.update(matchedList=self.matched.list_name, matchedPattern=self.matched.pattern,
                           matchedTarget=self.matched.target[:500],
                           source={"type": self.matched.policy.element_type,
                                   "name": self.matched.policy.element_name})
        return context


def evaluate(
    *, tool_name: str, tool_input: dict[str, Any], policies: list[Policy],
    held: Callable[[], CliApproval | None] = lambda: None,
) -> Decision:
    """Stages 2-12 of the module docstring. `held` looks up (or claims) this session's existing
    decision on the request; it is called only when the stages before it let the request on."""
    problem = input_problem(tool_name, tool_input)
    if problem is not None:
        reason = problem[:1].upper() + problem[1:]
        classification = Classification(DANGEROUS, "Empty Bash command — denied by default for safety"
                                        if problem.startswith("Missing") else reason)
        return Decision("deny", classification, "input_validation", message=reason)
    parsed = parse_command(tool_input["command"]) if tool_name == "Bash" else None
    classification = classify(tool_name, tool_input, parsed)
    if classification.essential:
        return Decision("allow", classification, "static_classification")
    consulted = tuple(sorted((p for p in policies if p.external is not None),
                             key=lambda p: (p.element_type, p.element_name)))
    targets = targets_of(tool_name, tool_input, parsed)

    def deny(stage: str, message: str, matched: PatternMatch | None = None) -> Decision:
        return Decision("deny", classification, stage, message=message, matched=matched, consulted=consulted)

    if classification.risk_level == BLOCKED:
        return deny("static_classification", classification.reason)
    denied = _first_match(consulted, "denyPatterns", targets)
    if denied is not None:
        return deny("element_policy", f"Denied by {denied.source} policy: pattern '{denied.pattern}' matches "
                                      f"'{denied.target[:200]}'", denied)
    if classification.risk_level == DANGEROUS:
        return deny("static_classification", f"{classification.reason}. Dangerous commands are denied; run it "
                                             "yourself if you mean it.")
    existing = held()
    if existing is not None:
        if existing.status == CliApproval.Status.DENIED:
            return Decision("deny", classification, "cli_approval", consulted=consulted, approval=existing,
                            message=f"The user denied this request ({existing.pk}). Do not retry it.")
        return Decision("allow", classification, "cli_approval", consulted=consulted, approval=existing)
    ttl = min((p.external.ttl_seconds for p in consulted if p.external.ttl_seconds), default=None) \
        or approvals.APPROVAL_TTL_SECONDS
    confirm = _first_match(consulted, "confirmPatterns", targets)
    if confirm is not None:
        return Decision("deny", classification, "approval_required", matched=confirm, consulted=consulted,
                        needs_approval=True, ttl_seconds=ttl,
                        message=f"Requires approval: {confirm.source} policy requires confirmation for pattern "
                                f"'{confirm.pattern}'")
    allowed = _allowed(consulted, targets)
    if allowed is not None:
        return Decision("allow", classification, "element_policy", matched=allowed, consulted=consulted)
    if classification.risk_level == SAFE:
        return Decision("allow", classification, "static_classification", consulted=consulted)
    allowlists = [p for p in consulted if p.external.allow]
    if allowlists:
        names = ", ".join(f"{p.element_type} '{p.element_name}'" for p in allowlists)
        return deny("element_policy", f"Tool '{tool_name}' not permitted by allowlists defined in: {names}. Either "
                                      "deactivate these elements or add allowPatterns to match this tool.")
    required = _first_match(consulted, "requireApproval", targets)
    if required is None and classification.risk_level == MODERATE:
        levels = [p for p in consulted if MODERATE in p.external.require_approval]
        required = PatternMatch(levels[0], "requireApproval", MODERATE, classification.risk_level) if levels else None
    if required is not None:
        return Decision("deny", classification, "approval_required", matched=required, consulted=consulted,
                        needs_approval=True, ttl_seconds=ttl,
                        message=f"Requires approval: {required.source} approvalPolicy requires approval for "
                                f"'{required.pattern}'")
    return Decision("allow", classification, "default", consulted=consulted)


def answer(decision: Decision, tool_input: Any, request: CliApproval | None = None) -> dict[str, Any]:
    """The decision as Claude Code reads it: `{behavior: "allow", updatedInput}` or
    `{behavior: "deny", message}`, with what led to it."""
    result: dict[str, Any] = {"behavior": decision.behavior}
    if decision.behavior == "allow":
        result["updatedInput"] = tool_input
    else:
        result["message"] = decision.message
    result["classification"] = {"riskLevel": decision.classification.risk_level,
                                "reason": decision.classification.reason, "stage": decision.stage}
    if decision.approval is not None:
        result["approvalContext"] = {"requestId": decision.approval.pk, "scope": decision.approval.scope or None,
                                     "status": decision.approval.status}
    if request is not None:
        result["approvalRequest"] = request_summary(request)
    context = decision.policy_context()
    if context is not None:
        result["policyContext"] = context
    return result


def request_summary(request: CliApproval) -> dict[str, Any]:
    return {"requestId": request.pk, "toolName": request.tool_name,
            "riskLevel": request.classification.get("riskLevel"), "reason": request.reason,
            "expiresAt": request.expires_at.isoformat(), "url": approvals.approvals_url(),
            "message": f"Ask the user to approve {request.pk} on {approvals.approvals_url()} before "
                       f"{request.expires_at.isoformat()}, then retry the same tool call."}


def _rate_limited(caller: Caller) -> Decision | None:
    ident = f"session:{caller.session.pk}" if caller.session is not None else f"user:{caller.user.pk}"
    retry_after = permission_prompt_retry_after(ident)
    if retry_after is None:
        return None
    return Decision("deny", Classification(BLOCKED, "Rate limit exceeded"), "rate_limit",
                    message=f"Rate limit exceeded for permission_prompt. Retry after {retry_after * 1000}ms.")


def permission_decide(*, caller: Caller, tool_name: str, tool_input: Any, agent_identity: str = "") -> dict[str, Any]:
    """permission_prompt: decide one request of the caller's MCP session, spending a single
    approval that lets it through, and making (or reusing) the pending request a person answers."""
    limited = _rate_limited(caller)
    if limited is not None:
        return answer(limited, tool_input)

    def claim() -> CliApproval | None:
        # A plain read first: most requests have no decision waiting, and the locked claim takes
        # SQLite's write lock.
        if approvals.cli_approval_held(caller=caller, tool_name=tool_name, tool_input=tool_input) is None:
            return None
        return approvals.cli_approval_claim(caller=caller, tool_name=tool_name, tool_input=tool_input)

    policies = selectors.session_policies(caller=caller)
    decision = evaluate(tool_name=tool_name, tool_input=tool_input, policies=policies, held=claim)
    if not decision.needs_approval:
        return answer(decision, tool_input)
    if caller.session is None:
        no_session = Decision("deny", decision.classification, decision.stage, matched=decision.matched,
                              consulted=decision.consulted,
                              message=f"{decision.message}. Approvals belong to an MCP session, and this connection "
                                      "has none, so this request cannot be approved.")
        return answer(no_session, tool_input)
    classification = {"riskLevel": decision.classification.risk_level, "reason": decision.classification.reason,
                      "stage": decision.stage}
    request = approvals.cli_approval_request(caller=caller, tool_name=tool_name, tool_input=tool_input,
                                             classification=classification, reason=decision.message,
                                             agent_identity=agent_identity, ttl_seconds=decision.ttl_seconds)
    pending = Decision("deny", decision.classification, decision.stage, matched=decision.matched,
                       consulted=decision.consulted,
                       message=f"Requires human approval. Request ID: {request.pk}. The user approves it on "
                               f"{approvals.approvals_url()} (or a bridge relays it from another MCP session with "
                               f"approve_cli_permission); then retry the same tool call. {decision.message}.")
    return answer(pending, tool_input, request)


def permission_preview(*, caller: Caller, tool_name: str, tool_input: Any) -> dict[str, Any]:
    """What permission_prompt would answer now, without counting against the rate limit, spending
    an approval or making a request (get_effective_cli_policies)."""

    def peek() -> CliApproval | None:
        return approvals.cli_approval_held(caller=caller, tool_name=tool_name, tool_input=tool_input)

    decision = evaluate(tool_name=tool_name, tool_input=tool_input,
                        policies=selectors.session_policies(caller=caller), held=peek)
    result = answer(decision, tool_input)
    if decision.needs_approval:
        result["message"] = f"{decision.message}. permission_prompt would ask the user to approve it."
    return result
