"""The expression and template language of workflow definitions.

Prompts use `{{ expr }}` templates and condition nodes use `if:` expressions; one hand-written
tokenizer and recursive-descent parser serves both. Values are plain JSON-like data (dict, list,
str, int, float, bool, None) reached by path. There is no arithmetic and no function but `len`, so
evaluating an expression can neither run code nor reach into Python objects.

Grammar, lowest precedence first:

    expr         := fallback
    fallback     := or_expr ( '||' or_expr )*
    or_expr      := and_expr ( 'or' and_expr )*
    and_expr     := not_expr ( 'and' not_expr )*
    not_expr     := 'not' not_expr | comparison
    comparison   := primary ( ('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not' 'in') primary )?
    primary      := literal | list_literal | 'len' '(' expr ')' | '(' expr ')' | path
    path         := IDENT ( '.' (IDENT|INT) | '[' (INT|STRING) ']' )*
    list_literal := '[' (expr (',' expr)*)? ','? ']'

A path that cannot be followed evaluates to MISSING instead of failing, and `a || b` is `a` unless
`a` is missing, null, "", [] or {}.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from operator import ge, gt, le, lt
from typing import Any, Final, Literal, TypeAlias

__all__ = [
    "MISSING",
    "And",
    "Comparison",
    "Constant",
    "EvaluationError",
    "Expr",
    "ExpressionError",
    "Fallback",
    "Length",
    "ListExpr",
    "Not",
    "Or",
    "Path",
    "Reference",
    "Template",
    "evaluate",
    "is_template",
    "parse",
    "references",
    "template_parse",
    "template_references",
    "template_render",
    "template_value",
]

# Deep enough for any real condition, shallow enough that parsing never hits Python's recursion limit.
MAX_NESTING: Final = 40
_CACHE_SIZE: Final = 1024

_KEYWORDS: Final = frozenset({"and", "or", "not", "in", "len", "true", "false", "null"})
_CONSTANTS: Final[dict[str, bool | None]] = {"true": True, "false": False, "null": None}
_ORDERINGS: Final[dict[str, Callable[[Any, Any], bool]]] = {"<": lt, "<=": le, ">": gt, ">=": ge}
_COMPARISONS: Final = ("==", "!=", *_ORDERINGS)
# Longest first, so '<=' is not read as '<' followed by '='.
_OPERATORS: Final = ("||", "==", "!=", "<=", ">=", "<", ">", "(", ")", "[", "]", ",", ".")
_ESCAPES: Final = {'"': '"', "'": "'", "\\": "\\", "n": "\n", "t": "\t"}

# ASCII only, and a '-' only between word characters, so `fetch-data` is one name but `-1` is a number.
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*")
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
# After a '.', digits are a list index: `results.0.5` is results[0][5], not results followed by 0.5.
_INDEX = re.compile(r"[0-9]+")
_MAX_EXCERPT = 60


class ExpressionError(ValueError):
    """An expression or template that does not parse; says what is wrong and at which character (0-based)."""

    def __init__(self, reason: str, text: str, position: int) -> None:
        self.reason = reason
        self.text = text
        self.position = position
        super().__init__(f"{reason} at position {position} in {_excerpt(text, position)}")

    def __reduce__(self) -> tuple[type[ExpressionError], tuple[str, str, int]]:
        # Errors may cross a Celery boundary; the default pickling would call __init__ with the message only.
        return (type(self), (self.reason, self.text, self.position))


class EvaluationError(ValueError):
    """An expression that parsed but cannot be evaluated on these values, e.g. `'a' < 3`."""


class _Missing(Enum):
    # An enum member stays a singleton through copy and pickle, so `is MISSING` is always safe.
    MISSING = "MISSING"

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing.MISSING


def _excerpt(text: str, position: int) -> str:
    """The text for an error message: whole when short, else the part around position."""
    if len(text) <= _MAX_EXCERPT:
        return repr(text)
    start = max(0, position - _MAX_EXCERPT // 2)
    end = min(len(text), position + _MAX_EXCERPT // 2)
    return repr(("…" if start else "") + text[start:end] + ("…" if end < len(text) else ""))


# Syntax tree


@dataclass(frozen=True)
class Constant:
    value: str | int | float | bool | None
    position: int


@dataclass(frozen=True)
class ListExpr:
    items: tuple[Expr, ...]
    position: int


@dataclass(frozen=True)
class Path:
    segments: tuple[str | int, ...]  # int: a list index written as `.0` or `[0]`
    position: int


@dataclass(frozen=True)
class Length:
    argument: Expr
    position: int


@dataclass(frozen=True)
class Not:
    operand: Expr
    position: int


@dataclass(frozen=True)
class Comparison:
    operator: str  # one of _COMPARISONS, "in" or "not in"
    left: Expr
    right: Expr
    position: int


@dataclass(frozen=True)
class And:
    operands: tuple[Expr, ...]
    position: int


@dataclass(frozen=True)
class Or:
    operands: tuple[Expr, ...]
    position: int


@dataclass(frozen=True)
class Fallback:
    operands: tuple[Expr, ...]
    position: int


Expr: TypeAlias = Constant | ListExpr | Path | Length | Not | Comparison | And | Or | Fallback
_Build: TypeAlias = Callable[[tuple[Expr, ...], int], Expr]


@dataclass(frozen=True)
class Reference:
    """A path an expression reads. guarded: it has a fallback (it is left of a `||`), so it may be missing."""

    path: tuple[str, ...]
    guarded: bool


# Tokenizer


@dataclass(frozen=True)
class _Token:
    kind: Literal["word", "number", "string", "operator", "end"]
    text: str  # as written, quotes and escapes included
    value: Any  # the word, the number or the unescaped string
    position: int

    def is_(self, text: str) -> bool:
        """Whether this is the keyword or operator `text` (a quoted string never is)."""
        return self.kind in ("word", "operator") and self.text == text

    def shown(self) -> str:
        return "end of expression" if self.kind == "end" else repr(self.text)


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            tokens.append(_Token("end", "", None, position))
            return tokens
        after_dot = bool(tokens) and tokens[-1].is_(".")
        token = _next_token(text, position, after_dot)
        tokens.append(token)
        position += len(token.text)


def _next_token(text: str, position: int, after_dot: bool) -> _Token:
    if text[position] in "\"'":
        return _string_token(text, position)
    number = (_INDEX if after_dot else _NUMBER).match(text, position)
    if number:
        written = number.group()
        return _Token("number", written, float(written) if "." in written else int(written), position)
    word = _WORD.match(text, position)
    if word:
        return _Token("word", word.group(), word.group(), position)
    for operator in _OPERATORS:
        if text.startswith(operator, position):
            return _Token("operator", operator, operator, position)
    raise ExpressionError(f"Unexpected character {text[position]!r}", text, position)


def _string_token(text: str, start: int) -> _Token:
    quote = text[start]
    chars: list[str] = []
    position = start + 1
    while position < len(text):
        char = text[position]
        if char == quote:
            return _Token("string", text[start : position + 1], "".join(chars), start)
        if char == "\\" and position + 1 < len(text):
            escape = text[position + 1]
            if escape not in _ESCAPES:
                raise ExpressionError(f"Unknown escape {char + escape!r}", text, position)
            chars.append(_ESCAPES[escape])
            position += 2
            continue
        chars.append(char)
        position += 1
    raise ExpressionError("Unterminated string", text, start)


# Parser


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.index = 0
        self.depth = 0

    def parse(self) -> Expr:
        if self.peek().kind == "end":
            raise self.error("Empty expression", self.peek())
        expr = self.fallback()
        token = self.peek()
        if token.kind != "end":
            raise self.error(f"Unexpected {token.text!r}", token)
        return expr

    # Token helpers

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        token = self.peek()
        self.index += 1
        return token

    def accept(self, text: str) -> bool:
        if self.peek().is_(text):
            self.index += 1
            return True
        return False

    def expect(self, text: str) -> None:
        token = self.peek()
        if not self.accept(text):
            raise self.error(f"Expected {text!r} but found {token.shown()}", token)

    def error(self, reason: str, token: _Token) -> ExpressionError:
        return ExpressionError(reason, self.text, token.position)

    @contextmanager
    def nested(self, token: _Token) -> Iterator[None]:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"Expression nested more than {MAX_NESTING} levels deep", token)
        try:
            yield
        finally:
            self.depth -= 1

    # Grammar rules, lowest precedence first

    def fallback(self) -> Expr:
        return self.chain(self.or_expr, "||", Fallback)

    def or_expr(self) -> Expr:
        return self.chain(self.and_expr, "or", Or)

    def and_expr(self) -> Expr:
        return self.chain(self.not_expr, "and", And)

    def chain(self, operand: Callable[[], Expr], separator: str, build: _Build) -> Expr:
        start = self.peek().position
        operands = [operand()]
        while self.accept(separator):
            operands.append(operand())
        return operands[0] if len(operands) == 1 else build(tuple(operands), start)

    def not_expr(self) -> Expr:
        token = self.peek()
        if not token.is_("not"):
            return self.comparison()
        self.advance()
        with self.nested(token):
            return Not(self.not_expr(), token.position)

    def comparison(self) -> Expr:
        left = self.primary()
        found = self.comparison_operator()
        if found is None:
            return left
        operator, token = found
        right = self.primary()
        chained = self.comparison_operator()
        if chained is not None:
            raise self.error("Comparisons cannot be chained; join them with 'and'", chained[1])
        return Comparison(operator, left, right, token.position)

    def comparison_operator(self) -> tuple[str, _Token] | None:
        token = self.peek()
        if (token.kind == "operator" and token.text in _COMPARISONS) or token.is_("in"):
            self.advance()
            return token.text, token
        if token.is_("not") and self.peek(1).is_("in"):
            self.index += 2
            return "not in", token
        return None

    def primary(self) -> Expr:
        token = self.peek()
        if token.kind in ("number", "string"):
            self.advance()
            return Constant(token.value, token.position)
        if token.is_("("):
            return self.group()
        if token.is_("["):
            return self.list_literal()
        if token.kind == "word" and token.text in _CONSTANTS:
            self.advance()
            return Constant(_CONSTANTS[token.text], token.position)
        if token.is_("len"):
            return self.length()
        if token.kind == "word" and token.text not in _KEYWORDS:
            return self.path()
        raise self.error(f"Expected a value but found {token.shown()}", token)

    def group(self) -> Expr:
        opening = self.advance()
        with self.nested(opening):
            inner = self.fallback()
        self.expect(")")
        return inner

    def list_literal(self) -> ListExpr:
        opening = self.advance()
        items: list[Expr] = []
        with self.nested(opening):
            while not self.peek().is_("]"):
                items.append(self.fallback())
                if not self.accept(","):
                    break
        self.expect("]")
        return ListExpr(tuple(items), opening.position)

    def length(self) -> Length:
        keyword = self.advance()
        self.expect("(")
        with self.nested(keyword):
            argument = self.fallback()
        self.expect(")")
        return Length(argument, keyword.position)

    def path(self) -> Path:
        head = self.advance()
        segments: list[str | int] = [head.text]
        while True:
            if self.accept("."):
                segments.append(self.dotted_segment())
            elif self.accept("["):
                segments.append(self.bracketed_segment())
            else:
                return Path(tuple(segments), head.position)

    def dotted_segment(self) -> str | int:
        token = self.advance()
        # Keywords are fine after a '.': `item.in` can only mean the key "in".
        if token.kind == "word" or token.kind == "number":
            return token.value
        raise self.error(f"Expected a name or index after '.' but found {token.shown()}", token)

    def bracketed_segment(self) -> str | int:
        token = self.advance()
        is_index = token.kind == "number" and isinstance(token.value, int) and not token.text.startswith("-")
        if not (is_index or token.kind == "string"):
            raise self.error(f"Expected an index or a quoted key inside '[ ]' but found {token.shown()}", token)
        self.expect("]")
        return token.value


@lru_cache(maxsize=_CACHE_SIZE)
def parse(text: str) -> Expr:
    """The syntax tree of an expression; raises ExpressionError. Trees are immutable, so the cache may share them."""
    return _Parser(text).parse()


# References


def references(expr: Expr) -> list[Reference]:
    """Every path the expression reads, in source order, each marked guarded when a `||` gives it a fallback."""
    found: list[Reference] = []
    _collect(expr, False, found)
    return found


def _collect(expr: Expr, guarded: bool, found: list[Reference]) -> None:
    match expr:
        case Path(segments=segments):
            found.append(Reference(tuple(str(segment) for segment in segments), guarded))
        case Fallback(operands=operands):
            # Only the last alternative has no fallback of its own; it inherits whatever guards the chain.
            for operand in operands[:-1]:
                _collect(operand, True, found)
            _collect(operands[-1], guarded, found)
        case _:
            for child in _children(expr):
                _collect(child, guarded, found)


def _children(expr: Expr) -> tuple[Expr, ...]:
    match expr:
        case ListExpr(items=items):
            return items
        case Length(argument=argument):
            return (argument,)
        case Not(operand=operand):
            return (operand,)
        case Comparison(left=left, right=right):
            return (left, right)
        case And(operands=operands) | Or(operands=operands) | Fallback(operands=operands):
            return operands
    return ()


# Evaluation


def evaluate(expr: Expr, scope: Mapping[str, Any]) -> Any:
    """The value of expr with its paths looked up in scope; may be MISSING. Raises EvaluationError."""
    match expr:
        case Constant(value=value):
            return value
        case Path(segments=segments):
            return _lookup(scope, segments)
        case ListExpr(items=items):
            # MISSING stays inside the language: a list literal holds null in its place.
            return [_none_if_missing(evaluate(item, scope)) for item in items]
        case Length(argument=argument):
            return _length(evaluate(argument, scope))
        case Not(operand=operand):
            return not evaluate(operand, scope)
        case And(operands=operands):
            return all(evaluate(operand, scope) for operand in operands)
        case Or(operands=operands):
            return any(evaluate(operand, scope) for operand in operands)
        case Fallback(operands=operands):
            return _first_present(operands, scope)
        case Comparison():
            return _compare(expr, scope)
    raise TypeError(f"Not an expression: {expr!r}")


def _lookup(scope: Mapping[str, Any], segments: tuple[str | int, ...]) -> Any:
    value: Any = scope
    for segment in segments:
        value = _step(value, segment)
        if value is MISSING:
            break
    return value


def _step(container: Any, segment: str | int) -> Any:
    if isinstance(container, Mapping):
        # JSON objects have string keys: `results.0` on an object means the key "0".
        return container.get(str(segment), MISSING)
    if isinstance(container, list | tuple) and isinstance(segment, int) and segment < len(container):
        return container[segment]
    return MISSING


def _none_if_missing(value: Any) -> Any:
    return None if value is MISSING else value


def _present(value: Any) -> bool:
    """What `||` keeps: 0 and false are answers, an empty string or collection is not."""
    if value is MISSING or value is None:
        return False
    return not (isinstance(value, str | list | tuple | Mapping) and len(value) == 0)


def _first_present(operands: tuple[Expr, ...], scope: Mapping[str, Any]) -> Any:
    value: Any = MISSING
    for operand in operands:
        value = evaluate(operand, scope)
        if _present(value):
            return value
    return value


def _length(value: Any) -> int:
    if value is MISSING or value is None:
        return 0
    if isinstance(value, str | list | tuple | Mapping):
        return len(value)
    raise EvaluationError(f"len() needs a string, list or object, not {_describe(value)}")


def _compare(node: Comparison, scope: Mapping[str, Any]) -> bool:
    left = evaluate(node.left, scope)
    right = evaluate(node.right, scope)
    if node.operator == "==":
        return _equal(left, right)
    if node.operator == "!=":
        return not _equal(left, right)
    if node.operator == "in":
        return _contains(node, left, right)
    if node.operator == "not in":
        return not _contains(node, left, right)
    return _ordered(node, left, right)


def _equal(left: Any, right: Any) -> bool:
    """Equality of JSON values: a missing value equals null, and true is not 1."""
    left, right = _none_if_missing(left), _none_if_missing(right)
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(_equal(value, right[key]) for key, value in left.items())
    return bool(left == right)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _ordered(node: Comparison, left: Any, right: Any) -> bool:
    if (_is_number(left) and _is_number(right)) or (isinstance(left, str) and isinstance(right, str)):
        return _ORDERINGS[node.operator](left, right)
    left_shown, right_shown = _operand(node.left, left), _operand(node.right, right)
    raise EvaluationError(f"Cannot compare {left_shown} with {right_shown} using {node.operator!r}")


def _contains(node: Comparison, item: Any, container: Any) -> bool:
    if container is MISSING or container is None:
        return False
    if isinstance(container, list | tuple):
        return any(_equal(item, element) for element in container)
    if isinstance(container, Mapping):
        return isinstance(item, str) and item in container
    if isinstance(container, str):
        if isinstance(item, str):
            return item in container
        if item is MISSING or item is None:
            return False
        why = "a string can only contain strings"
    else:
        why = "the right side must be a list, string or object"
    item_shown, container_shown = _operand(node.left, item), _operand(node.right, container)
    raise EvaluationError(f"Cannot use {node.operator!r} with {item_shown} and {container_shown}: {why}")


def _operand(node: Expr, value: Any) -> str:
    """A value for an error message, with the path it came from so the author can find it."""
    shown = _describe(value)
    return f"{shown} from {_path_text(node.segments)}" if isinstance(node, Path) else shown


def _describe(value: Any) -> str:
    if value is MISSING:
        return "a missing value"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"bool {'true' if value else 'false'}"
    shown = repr(value)
    if len(shown) > _MAX_EXCERPT:
        shown = shown[: _MAX_EXCERPT - 1] + "…"
    return f"{type(value).__name__} {shown}"


def _path_text(segments: tuple[str | int, ...]) -> str:
    text = str(segments[0])
    for segment in segments[1:]:
        if isinstance(segment, int) or _WORD.fullmatch(segment):
            text += f".{segment}"
        else:
            text += f"[{json.dumps(segment, ensure_ascii=False)}]"
    return text


# Templates


@dataclass(frozen=True)
class Template:
    """A template's literal text and `{{ }}` expressions, in order."""

    parts: tuple[str | Expr, ...]

    @property
    def expressions(self) -> tuple[Expr, ...]:
        return tuple(part for part in self.parts if not isinstance(part, str))


def is_template(text: str) -> bool:
    return "{{" in text


@lru_cache(maxsize=_CACHE_SIZE)
def template_parse(text: str) -> Template:
    """Splits text into literal parts and parsed `{{ expr }}` parts; error positions count from the template's start."""
    parts: list[str | Expr] = []
    position = 0
    while (opening := text.find("{{", position)) != -1:
        if opening > position:
            parts.append(text[position:opening])
        closing = _closing_braces(text, opening + 2)
        parts.append(_template_expression(text, opening, closing))
        position = closing + 2
    if position < len(text):
        parts.append(text[position:])
    return Template(tuple(parts))


def _closing_braces(text: str, start: int) -> int:
    """Where the '}}' ending an expression that starts at start is, or -1; a '}}' inside quotes does not end it."""
    quote = ""
    position = start
    while position < len(text):
        char = text[position]
        if quote:
            if char == "\\":
                position += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif text.startswith("}}", position):
            return position
        position += 1
    return -1


def _template_expression(text: str, opening: int, closing: int) -> Expr:
    if closing == -1:
        # An unclosed quote may have swallowed the '}}'; parsing up to the first '}}' names the quote instead.
        first = text.find("}}", opening + 2)
        if first != -1:
            _parse_within(text, opening + 2, first)
        raise ExpressionError("Unterminated '{{'", text, opening)
    if not text[opening + 2 : closing].strip():
        raise ExpressionError("Empty '{{ }}'", text, opening)
    return _parse_within(text, opening + 2, closing)


def _parse_within(text: str, start: int, end: int) -> Expr:
    try:
        return parse(text[start:end])
    except ExpressionError as error:
        raise ExpressionError(error.reason, text, start + error.position) from None


def template_references(text: str) -> list[Reference]:
    return [reference for expr in template_parse(text).expressions for reference in references(expr)]


def template_render(text: str, scope: Mapping[str, Any]) -> str:
    return _render(template_parse(text), scope)


def template_value(text: str, scope: Mapping[str, Any]) -> Any:
    """The raw value when text is a single `{{ expr }}` (so a template can yield a list or object), else the string."""
    template = template_parse(text)
    meaningful = [part for part in template.parts if not isinstance(part, str) or part.strip()]
    if len(meaningful) == 1 and not isinstance(meaningful[0], str):
        return _none_if_missing(evaluate(meaningful[0], scope))
    return _render(template, scope)


def _render(template: Template, scope: Mapping[str, Any]) -> str:
    return "".join(part if isinstance(part, str) else _rendered(evaluate(part, scope)) for part in template.parts)


def _rendered(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is MISSING or value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
