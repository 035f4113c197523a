"""The rules every element field must meet, the injection scan, and the one safe way to read YAML.

Each refusal is an InvalidInput whose message names the field, the problem and what is allowed,
so a client can correct its request without guessing.
"""

from __future__ import annotations

import re
import string
import unicodedata
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Literal

import safeyaml
from core.errors import InvalidInput
from elements.types import (
    MAX_CONTENT_LENGTH,
    MAX_DESCRIPTION_LENGTH,
    MAX_FRONTMATTER_BYTES,
    MAX_NAME_LENGTH,
    MAX_TAG_LENGTH,
    MAX_TAGS,
    MAX_TRIGGER_LENGTH,
    MAX_TRIGGERS,
    ElementType,
)

Severity = Literal["critical", "high", "medium"]

# ---------------------------------------------------------------------------------------------
# Unicode
# ---------------------------------------------------------------------------------------------

_BIDI_OVERRIDES = range(0x202A, 0x202F)
_BIDI_ISOLATES = range(0x2066, 0x206A)
_ZERO_WIDTH = frozenset({0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF})
# U+061C (Arabic letter mark) reorders text exactly as LRM and RLM do.
_BIDI_CHARS = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# The rest of Unicode 14's Cc, Cf, Zl, Zp and Cs characters, less newline, carriage return and tab.
# Spelt out because deriving it from unicodedata at import takes half a second.
_OTHER_HIDDEN_CHARS = (
    r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\xad\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2\u180e"
    r"\u200b-\u200d\u2028\u2029\u2060-\u2064\u206a-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb"
    r"\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    r"\U000e0001\U000e0020-\U000e007f"
)
_BIDI = re.compile(f"[{_BIDI_CHARS}]")
_OTHER_HIDDEN = re.compile(f"[{_OTHER_HIDDEN_CHARS}]")
_HIDDEN = re.compile(f"[{_BIDI_CHARS}{_OTHER_HIDDEN_CHARS}]")
# Characters that render as nothing inside a word, so "ig\u200bnore" still reads as "ignore".
_INVISIBLE_IN_WORDS = re.compile(
    r"[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]"
)
# Text made of invisible characters would otherwise yield one flag per character.
_MAX_FLAGS = 20


@dataclass(frozen=True, slots=True)
class _Hidden:
    position: int
    char: str

    @property
    def code_point(self) -> str:
        return f"U+{ord(self.char):04X}"

    @property
    def kind(self) -> str:
        code = ord(self.char)
        if code in _BIDI_OVERRIDES:
            return "bidi override"
        if code in _BIDI_ISOLATES:
            return "bidi isolate"
        if _BIDI.fullmatch(self.char):
            return "bidi mark"
        return "zero-width character" if code in _ZERO_WIDTH else "non-printing character"

    @property
    def severity(self) -> Severity:
        return "high" if _BIDI.fullmatch(self.char) else "medium"

    def describe(self) -> str:
        return f"{self.kind} {self.code_point} at position {self.position}"


def _hidden_chars(text: str, pattern: re.Pattern[str] = _HIDDEN) -> Iterator[_Hidden]:
    return (_Hidden(match.start(), match.group()) for match in pattern.finditer(text))


def normalize_text(value: str) -> tuple[str, list[str]]:
    """NFC form of `value`, and a flag for each direction-changing or invisible character in it.

    Nothing is removed: the caller decides whether a flagged character is acceptable where it is.
    """
    text = unicodedata.normalize("NFC", value)
    flags = [f"{hidden.describe()} ({hidden.severity})" for hidden in islice(_hidden_chars(text), _MAX_FLAGS)]
    if len(flags) == _MAX_FLAGS:
        more = len(_HIDDEN.findall(text)) - _MAX_FLAGS
        if more:
            flags.append(f"{more} more invisible or control characters")
    return text, flags


# ---------------------------------------------------------------------------------------------
# Fields
# ---------------------------------------------------------------------------------------------

_NAME_ALLOWED = "Allowed: letters, digits, spaces, '-', '_' and '.'."
_MIN_PERSONA_NAME = 2
# The patterns are also the OpenAPI schema's (elements.api), so they keep to what JSON Schema's
# regular expressions read the same way.
CATEGORY_PATTERN = r"[A-Za-z][A-Za-z0-9_-]{0,20}"
TRIGGER_PATTERN = r"[A-Za-z0-9_@.-]+"
VERSION_PATTERN = r"[0-9]+\.[0-9]+(?:\.[0-9]+)?(?:-[0-9A-Za-z.-]+)?"
MAX_VERSION_LENGTH = 50  # what the version column holds
_CATEGORY = re.compile(CATEGORY_PATTERN)
_CATEGORY_CHARS = frozenset(string.ascii_letters + string.digits + "-_")
_TRIGGER = re.compile(TRIGGER_PATTERN)
_TRIGGER_CHARS = frozenset(string.ascii_letters + string.digits + "-_@.")
# [0-9] rather than \d, which would accept the digits of other scripts (Arabic-Indic, Devanagari...).
_VERSION = re.compile(VERSION_PATTERN)
_MAX_LISTED_CHARS = 10


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _label(field: str) -> str:
    return field[:1].upper() + field[1:]


def _show_char(char: str) -> str:
    return f"'{char}'" if char.isprintable() else f"U+{ord(char):04X}"


def _invalid_chars(text: str, allowed: Callable[[str], bool]) -> str:
    """The distinct characters of `text` that `allowed` refuses, as a readable list ("" if none)."""
    bad = list(dict.fromkeys(char for char in text if not allowed(char)))
    shown = ", ".join(_show_char(char) for char in bad[:_MAX_LISTED_CHARS])
    return shown + (", …" if len(bad) > _MAX_LISTED_CHARS else "")


def _is_letter_or_digit(char: str) -> bool:
    return unicodedata.category(char)[0] in "LN"


def _is_name_char(char: str) -> bool:
    # Only the plain space: a no-break or ideographic space would make two names look alike.
    return char in " -_." or _is_letter_or_digit(char)


def clean_name(name: object, *, element_type: ElementType) -> str:
    """The name to store: stripped, NFC, 1-100 characters (a persona's at least 2), of safe characters."""
    if not isinstance(name, str):
        raise InvalidInput(f"Name must be a string (got {_type_name(name)}).", code="invalid_name")
    text = unicodedata.normalize("NFC", name).strip()
    if not text:
        raise InvalidInput("Name is required, e.g. \"Debug Detective\".", code="invalid_name")
    if len(text) > MAX_NAME_LENGTH:
        raise InvalidInput(f"Name too long: maximum {MAX_NAME_LENGTH} characters (got {len(text)}).",
                           code="invalid_name")
    if element_type is ElementType.PERSONA and len(text) < _MIN_PERSONA_NAME:
        raise InvalidInput(f"Persona name too short: at least {_MIN_PERSONA_NAME} characters (got {len(text)}).",
                           code="invalid_name")
    hidden = list(dict.fromkeys(f"{h.code_point} {h.kind}" for h in _hidden_chars(text)))
    if hidden:
        raise InvalidInput(f"Name contains invisible characters ({', '.join(hidden)}), which can make one name "
                           f"pass for another. {_NAME_ALLOWED}", code="invalid_name")
    bad = _invalid_chars(text, _is_name_char)
    if bad:
        raise InvalidInput(f"Name contains invalid characters: {bad}. {_NAME_ALLOWED}", code="invalid_name")
    if not any(_is_letter_or_digit(char) for char in text):
        # Names of punctuation alone cannot be told apart once turned into file names.
        raise InvalidInput(f"Name needs at least one letter or digit. {_NAME_ALLOWED}", code="invalid_name")
    return text


def clean_text(value: object, *, field: str, limit: int = MAX_CONTENT_LENGTH) -> str:
    """Free text in NFC form, at most `limit` characters; no text at all is ""."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"{_label(field)} must be text (got {_type_name(value)}).", code="invalid_text")
    # Checked before normalising too, so a huge payload never reaches the normaliser; twice the
    # limit leaves room for decomposed input that NFC shortens.
    if len(value) > 2 * limit:
        raise InvalidInput(f"{_label(field)} too large: maximum {limit} characters (got {len(value)}).",
                           code="too_large")
    text = unicodedata.normalize("NFC", value)
    if len(text) > limit:
        raise InvalidInput(f"{_label(field)} too large: maximum {limit} characters (got {len(text)}).",
                           code="too_large")
    return text


def clean_description(value: object) -> str:
    # Surrounding whitespace is never meant, so it does not count against the limit.
    stripped = value.strip() if isinstance(value, str) else value
    return clean_text(stripped, field="description", limit=MAX_DESCRIPTION_LENGTH)


def clean_category(value: object) -> str:
    """A category such as "code-review", or "" for none."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"Category must be a string (got {_type_name(value)}).", code="invalid_category")
    text = value.strip()
    if not text or _CATEGORY.fullmatch(text):
        return text
    bad = _invalid_chars(text, _CATEGORY_CHARS.__contains__)
    if bad:
        problem = f"it contains {bad}"
    elif not text[0].isalpha():
        problem = f"it starts with '{text[0]}'"
    else:
        problem = f"it is {len(text)} characters long"
    raise InvalidInput(f"Invalid category: {problem}. Allowed: a letter, then up to 20 letters, digits, '-' or '_'.",
                       code="invalid_category")


def _clean_list(value: object, *, label: str, max_items: int, max_length: int, code: str,
                check: Callable[[str, int], None] | None = None) -> list[str]:
    """Strings stripped, NFC, non-empty and de-duplicated in order; at most `max_items` of them."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise InvalidInput(f"{_label(label)}s must be a list of strings (got {_type_name(value)}).", code=code)
    items: dict[str, None] = {}
    for number, item in enumerate(value, start=1):
        if not isinstance(item, str):
            raise InvalidInput(f"{_label(label)} {number} must be a string (got {_type_name(item)}).", code=code)
        text = unicodedata.normalize("NFC", item).strip()
        if not text:
            raise InvalidInput(f"{_label(label)} {number} is empty.", code=code)
        if len(text) > max_length:
            raise InvalidInput(f"{_label(label)} {number} too long: maximum {max_length} characters "
                               f"(got {len(text)}).", code=code)
        if check is not None:
            check(text, number)
        items[text] = None
    if len(items) > max_items:
        raise InvalidInput(f"Too many {label}s: maximum {max_items} (got {len(items)}).", code=code)
    return list(items)


def clean_tags(value: object) -> list[str]:
    return _clean_list(value, label="tag", max_items=MAX_TAGS, max_length=MAX_TAG_LENGTH, code="invalid_tags")


def _check_trigger(text: str, number: int) -> None:
    # Triggers reach shells and search queries in clients; no metacharacter gets through.
    if not _TRIGGER.fullmatch(text):
        bad = _invalid_chars(text, _TRIGGER_CHARS.__contains__)
        raise InvalidInput(f"Trigger {number} ({text!r}) contains invalid characters: {bad}. "
                           "Allowed: A-Z, a-z, 0-9, '-', '_', '@' and '.'.", code="invalid_triggers")


def clean_triggers(value: object) -> list[str]:
    return _clean_list(value, label="trigger", max_items=MAX_TRIGGERS, max_length=MAX_TRIGGER_LENGTH,
                       code="invalid_triggers", check=_check_trigger)


def clean_version(value: object) -> str:
    """A version such as "1.0", "1.2.3" or "2.0.0-beta.1"."""
    if not isinstance(value, str):
        # YAML reads an unquoted 1.0 as a number, which has lost any trailing zeros.
        raise InvalidInput(f"Version must be a string such as \"1.0.0\" (got {_type_name(value)}); "
                           "quote it in YAML.", code="invalid_version")
    text = value.strip()
    if len(text) <= MAX_VERSION_LENGTH and _VERSION.fullmatch(text):
        return text
    raise InvalidInput(f"Invalid version {text[:60]!r}: use MAJOR.MINOR or MAJOR.MINOR.PATCH, optionally with a "
                       f"pre-release suffix such as \"2.0.0-beta.1\" (at most {MAX_VERSION_LENGTH} characters).",
                       code="invalid_version")


# ---------------------------------------------------------------------------------------------
# Injection scan
# ---------------------------------------------------------------------------------------------

_EXCERPT = 60


@dataclass(frozen=True, slots=True)
class Threat:
    pattern: str
    severity: Severity
    excerpt: str


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: str
    severity: Severity
    find: Callable[[str], str | None]
    skip_in: frozenset[ElementType] = frozenset()


def _regex(source: str) -> Callable[[str], str | None]:
    compiled = re.compile(source, re.IGNORECASE)

    def find(text: str) -> str | None:
        match = compiled.search(text)
        return match.group() if match else None

    return find


_NUMERIC_REFERENCE = re.compile(r"&#(?:x([0-9a-f]{1,6})|([0-9]{1,7}));?", re.IGNORECASE)
_JAVASCRIPT = re.compile(r"j\s{0,3}a\s{0,3}v\s{0,3}a\s{0,3}s\s{0,3}c\s{0,3}r\s{0,3}i\s{0,3}p\s{0,3}t",
                         re.IGNORECASE)


def _decode_references(text: str) -> tuple[str, list[int]]:
    """`text` with numeric character references decoded, and where in it each decoded one is."""
    parts: list[str] = []
    decoded_at: list[int] = []
    size = last = 0
    for match in _NUMERIC_REFERENCE.finditer(text):
        plain = text[last:match.start()]
        code = int(match[1], 16) if match[1] else int(match[2])
        parts += [plain, chr(code) if code <= 0x10FFFF else "\ufffd"]
        size += len(plain)
        decoded_at.append(size)
        size += 1
        last = match.end()
    parts.append(text[last:])
    return "".join(parts), decoded_at


def _encoded_javascript(text: str) -> str | None:
    """A "javascript" spelled partly or wholly with character references, which browsers decode."""
    if "&#" not in text:
        return None
    decoded, decoded_at = _decode_references(text)
    for match in _JAVASCRIPT.finditer(decoded):
        first = bisect_left(decoded_at, match.start())
        if first < len(decoded_at) and decoded_at[first] < match.end():
            return decoded[match.start():match.start() + _EXCERPT]
    return None


# Skills, templates and agents legitimately show code and describe attacks (a pentest skill names
# /etc/passwd); injection, real tokens, exfiltration and markup stay refused everywhere.
_CODE_CONTEXTS = frozenset({ElementType.SKILL, ElementType.TEMPLATE, ElementType.AGENT})
# Templates use <script>, <object> and <embed> as section delimiters.
_TEMPLATE = frozenset({ElementType.TEMPLATE})
_DATA = r"(?:files|data|personas|tokens|credentials|api\s+keys)"
_SECRETS = r"(?:tokens|credentials|secrets|api\s+keys)"
# A shell command inside `backticks`; each run is bounded so a long unclosed span stays cheap.
_BACKTICK_COMMAND = (
    r"`[^`]{0,200}(?:rm\s+-rf?\s+[/~]|sudo\s+(?:rm|su)\b|chmod\s+777|chown\s+root|(?:cat|ls)\s+/etc/"
    r"|(?:bash|sh)\s+-c\s+['\"]|\b(?:passwd|shadow)\b|(?:nc|netcat)\s+-l|ssh\s+root@|\.ssh/id_"
    r"|(?:curl|wget)\s+[^`|]{0,200}\|\s*(?:sh|bash)\b"
    r"|(?:python|perl|ruby|php|node)\s+-[ec]\s+[^`]{0,200}?(?:exec|eval|system|subprocess))[^`]{0,200}`"
)

_RULES: tuple[_Rule, ...] = (
    _Rule("instruction_override", "critical", _regex(r"\[(?:system|admin|assistant)\s*:[^\]\n]{0,60}\]?")),
    _Rule("instruction_override", "high", _regex(r"\[user\s*:[^\]\n]{0,60}\]?")),
    _Rule("instruction_override", "critical",
          _regex(r"\b(?:ignore|disregard|forget)\s+(?:all\s+)?(?:previous|prior)\s+instructions")),
    _Rule("instruction_override", "critical", _regex(r"\bdisregard\s+everything\s+above")),
    _Rule("instruction_override", "critical", _regex(r"\bforget\s+your\s+training")),
    _Rule("instruction_override", "critical", _regex(r"\boverride\s+your\s+programming")),
    _Rule("role_escalation", "critical",
          _regex(r"\byou\s+are\s+now\s+(?:in\s+)?(?:admin|root|system|sudo|developer|debug|test|dan)\b(?:\s+mode)?")),
    _Rule("role_escalation", "critical", _regex(r"\bact\s+as\s+(?:admin|root|system|sudo|superuser|dan)\b")),
    _Rule("jailbreak", "critical", _regex(r"\bpretend\s+you\s+have\s+no\s+(?:guidelines|restrictions|rules|limits)")),
    _Rule("jailbreak", "critical", _regex(r"\b(?:jailbreak|do\s+anything\s+now|dan\s+mode)\b")),
    _Rule("data_exfiltration", "critical", _regex(rf"\bexport\s+all\s+{_DATA}")),
    _Rule("data_exfiltration", "critical", _regex(rf"\bsend\s+all\s+{_DATA}\s+to\b")),
    _Rule("data_exfiltration", "high", _regex(r"\blist\s+all\s+(?:files|tokens|credentials|secrets|api\s+keys)")),
    _Rule("data_exfiltration", "high", _regex(rf"\bshow\s+me\s+all\s+{_SECRETS}")),
    _Rule("command_execution", "critical", _regex(r"\b(?:curl|wget)\s+\S{1,60}"), _CODE_CONTEXTS),
    _Rule("command_execution", "critical", _regex(r"\$\([^()]{1,200}\)"), _CODE_CONTEXTS),
    _Rule("command_execution", "critical", _regex(_BACKTICK_COMMAND), _CODE_CONTEXTS),
    _Rule("code_execution", "critical", _regex(r"\b(?:eval|exec|os\.system)\s*\("), _CODE_CONTEXTS),
    _Rule("code_execution", "critical", _regex(r"\bsubprocess\.(?:call|run|popen)\b"), _CODE_CONTEXTS),
    _Rule("credential_token", "high", _regex(r"GITHUB_TOKEN"), _CODE_CONTEXTS),
    # Personal, OAuth, user, server and refresh tokens share this shape; only the prefix is
    # matched, so the secret itself never lands in an error message or a log.
    _Rule("credential_token", "critical", _regex(r"\bgh[pousr]_(?=[A-Za-z0-9]{36})")),
    _Rule("path_traversal", "high", _regex(r"\.\./\.\./\.\./"), _CODE_CONTEXTS),
    _Rule("path_traversal", "high", _regex(r"/etc/passwd|/\.ssh/"), _CODE_CONTEXTS),
    _Rule("script_injection", "critical", _regex(r"<script[\s/>]|</script\s*>"), _TEMPLATE),
    _Rule("script_injection", "critical", _regex(r"<iframe[\s/>]")),
    _Rule("script_injection", "high", _regex(r"<(?:object|embed)[\s/>]"), _TEMPLATE),
    # DOM event names are letters only, so on_error="..." in code samples is not mistaken for one.
    _Rule("script_injection", "critical", _regex(r"\bon[a-z]{3,30}=\s{0,10}[\"']")),
    _Rule("script_injection", "critical", _regex(r"javascript[ \t]*:[ \t]*\S")),
    _Rule("script_injection", "critical", _encoded_javascript),
)


def _unicode_threats(text: str) -> list[Threat]:
    """The first direction-changing character (high) and the first other invisible one (medium)."""
    threats = []
    for name, pattern in (("bidi_control", _BIDI), ("invisible_character", _OTHER_HIDDEN)):
        hidden = next(_hidden_chars(text, pattern), None)
        if hidden is not None:
            threats.append(Threat(name, hidden.severity, hidden.describe()))
    return threats


def scan_injection(text: str, *, element_type: ElementType) -> list[Threat]:
    """The injection patterns `text` matches, as the original's ContentValidator sees them for `element_type`.

    Matching ignores case and the characters that render as nothing, which would otherwise let
    "ig\u200bnore previous instructions" through; those characters are reported themselves.
    """
    visible = _INVISIBLE_IN_WORDS.sub("", text)
    threats = []
    for rule in _RULES:
        if element_type in rule.skip_in:
            continue
        matched = rule.find(visible)
        if matched is not None:
            threats.append(Threat(rule.pattern, rule.severity, matched[:_EXCERPT]))
    return threats + _unicode_threats(text)


def _refuse_threats(subject: str, threats: list[Threat]) -> None:
    if not threats:
        return
    names = ", ".join(dict.fromkeys(threat.pattern for threat in threats))
    found = ", ".join(dict.fromkeys(f'"{threat.excerpt}"' for threat in threats))
    raise InvalidInput(f"{subject} security threats: {names}. Found: {found}.", code="prompt_injection")


def check_persona_instructions(text: str) -> None:
    """Refuse persona instructions with any high or critical threat, as the original's create and import do."""
    threats = scan_injection(text, element_type=ElementType.PERSONA)
    _refuse_threats("Instructions contain", [threat for threat in threats if threat.severity != "medium"])


def check_body(text: str, *, element_type: ElementType, field: str) -> None:
    """Refuse a non-persona element's `field` only for critical threats, as the original's save does."""
    threats = scan_injection(text, element_type=element_type)
    verb = "contain" if field.endswith("s") else "contains"
    _refuse_threats(f"{_label(field)} {verb}", [threat for threat in threats if threat.severity == "critical"])


# ---------------------------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------------------------

_MAX_ALIASES = 10
# Well past any real element: the bounds are checked on the event stream before anything is built.
_MAX_YAML_DEPTH = 64
_MAX_YAML_VALUES = 1_000_000


def safe_yaml_load(text: str, *, max_bytes: int = MAX_FRONTMATTER_BYTES, allow_aliases: bool = False) -> object:
    """The value of a single YAML document in the core schema, refusing anything that could run code or explode.

    `allow_aliases` admits anchors and up to ten aliases (never one inside its own anchor);
    without it, as for persona import in the original, any anchor or alias is refused.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InvalidInput(f"YAML too large: maximum {max_bytes} bytes (got {size}).", code="too_large")
    bounds = safeyaml.Bounds(depth=_MAX_YAML_DEPTH, values=_MAX_YAML_VALUES, aliases=_MAX_ALIASES,
                             anchors=allow_aliases, tags=False)
    try:
        return safeyaml.load(text, schema=safeyaml.CORE, bounds=bounds)
    except safeyaml.InvalidYAML as exc:
        if exc.unsafe:
            raise InvalidInput(exc.message, code="unsafe_yaml") from exc
        raise InvalidInput(f"Invalid YAML: {exc.message}.", code="invalid_yaml") from exc
