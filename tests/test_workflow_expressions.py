"""The workflow expression and template language: grammar, references, evaluation, templates and errors."""

import copy
import pickle
from typing import Any

import pytest

from workflows.expressions import (
    MAX_NESTING,
    MISSING,
    And,
    Comparison,
    Constant,
    EvaluationError,
    ExpressionError,
    Fallback,
    Length,
    ListExpr,
    Not,
    Or,
    Path,
    Reference,
    evaluate,
    is_template,
    parse,
    references,
    template_parse,
    template_references,
    template_render,
    template_value,
)

SCOPE: dict[str, Any] = {
    "context": {"topic": "tides", "env": "prod", "tags": ["x", "y"], "skip": False, "empty": "", "nothing": None},
    "draft": {"output": "A draft"},
    "review": {"verdict": "approve", "reasoning": "", "score": 0.7},
    "fetch-data": {"output": "fetched"},
    "snake_case": {"value": 1},
    "results": [{"output": "first"}, {"output": "second"}],
    "list": [10, 20, 30],
    "obj": {"some key": "spaced", "in": "keyword key", "0": "zero key"},
    "item": "the item",
    "items": [1, 2, 3, 4],
    "tests": {"exitCode": 0},
    "a": {"b": {"c": "deep"}, "score": 0.4},
    "b": {"ok": True},
    "c": {"n": 3},
}


def value(text: str, scope: dict[str, Any] | None = None) -> Any:
    return evaluate(parse(text), SCOPE if scope is None else scope)


def parse_error(text: str) -> ExpressionError:
    with pytest.raises(ExpressionError) as caught:
        parse(text)
    return caught.value


def evaluation_error(text: str, scope: dict[str, Any] | None = None) -> EvaluationError:
    with pytest.raises(EvaluationError) as caught:
        value(text, scope)
    return caught.value


# Paths


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("context.topic", "tides"),
        ("draft.output", "A draft"),
        ("a.b.c", "deep"),
        ("fetch-data.output", "fetched"),
        ("snake_case.value", 1),
        ("item", "the item"),
        ("results.0.output", "first"),
        ("results.1.output", "second"),
        ("results[1].output", "second"),
        ("list[0]", 10),
        ("list[2]", 30),
        ('obj["some key"]', "spaced"),
        ("obj['some key']", "spaced"),
        ("tests.exitCode", 0),
        ("  context . topic  ", "tides"),
    ],
)
def test_a_path_reads_through_objects_by_key_and_lists_by_index(text: str, expected: Any) -> None:
    assert value(text) == expected


def test_a_path_parses_into_its_segments_with_indexes_as_integers() -> None:
    assert parse('results.0["some key"][2].x') == Path(("results", 0, "some key", 2, "x"), 0)


def test_a_keyword_after_a_dot_is_an_ordinary_key() -> None:
    assert value("obj.in") == "keyword key"


def test_a_digit_segment_on_an_object_reads_the_string_key() -> None:
    assert value("obj.0") == "zero key"


def test_digits_after_a_dot_are_indexes_not_a_decimal_number() -> None:
    assert parse("m.0.5") == Path(("m", 0, 5), 0)
    assert value("m.0.5", {"m": [[0, 1, 2, 3, 4, "five"]]}) == "five"


@pytest.mark.parametrize(
    "text",
    [
        "nope",
        "context.nope",
        "context.topic.deeper",
        "context.nothing.deeper",
        "list[3]",
        "list.x",
        "results.9.output",
        'list["0"]',
        "context.0",
        "item.0",
    ],
)
def test_a_path_that_cannot_be_followed_is_missing_rather_than_an_error(text: str) -> None:
    assert value(text) is MISSING


def test_a_null_at_the_end_of_a_path_stays_null() -> None:
    assert value("context.nothing") is None


# Literals


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("false", False),
        ("null", None),
        ("0", 0),
        ("42", 42),
        ("-1", -1),
        ("3.25", 3.25),
        ("-0.5", -0.5),
        ('"double"', "double"),
        ("'single'", "single"),
        ('""', ""),
        (r'"say \"hi\""', 'say "hi"'),
        (r"'it\'s'", "it's"),
        (r'"back\\slash"', "back\\slash"),
        (r'"line\nbreak\ttab"', "line\nbreak\ttab"),
        ('"it\'s"', "it's"),
        ("'\"quoted\"'", '"quoted"'),
        ('"and or not in len"', "and or not in len"),
    ],
)
def test_literals_evaluate_to_their_json_values(text: str, expected: Any) -> None:
    result = value(text)

    assert result == expected
    assert type(result) is type(expected)


def test_a_list_literal_evaluates_each_item_and_allows_a_trailing_comma() -> None:
    assert value("[]") == []
    assert value("[1, 'two', context.topic, [true],]") == [1, "two", "tides", [True]]


def test_a_missing_value_inside_a_list_literal_becomes_null() -> None:
    assert value("[context.nope, 1]") == [None, 1]


# Operators


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('review.verdict == "approve"', True),
        ('review.verdict == "reject"', False),
        ('review.verdict != "reject"', True),
        ("tests.exitCode == 0", True),
        ("1 == 1.0", True),
        ("true == 1", False),
        ("false == 0", False),
        ("[1, true] == [1, true]", True),
        ("[1, true] == [1, 1]", False),
        ("context.nothing == null", True),
        ("context.missing == null", True),
        ("context.missing != null", False),
        ("context.missing == context.other_missing", True),
        ("context.missing == ''", False),
        ("context.empty == ''", True),
        ("'1' == 1", False),
    ],
)
def test_equality_compares_json_values_and_treats_missing_as_null(text: str, expected: bool) -> None:
    assert value(text) is expected


def test_equality_compares_objects_deeply() -> None:
    scope = {"x": {"a": [1, {"b": True}]}, "y": {"a": [1, {"b": True}]}, "z": {"a": [1, {"b": 1}]}}

    assert value("x == y", scope) is True
    assert value("x == z", scope) is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3 < 4", True),
        ("4 <= 4", True),
        ("4 > 4", False),
        ("5 >= 4.5", True),
        ("review.score >= 0.5", True),
        ("len(items) > 3", True),
        ("'apple' < 'banana'", True),
        ("'b' >= 'a'", True),
        ("-1 < 0", True),
    ],
)
def test_ordering_compares_numbers_with_numbers_and_strings_with_strings(text: str, expected: bool) -> None:
    assert value(text) is expected


def test_ordering_a_string_against_a_number_names_both_values_and_the_operator() -> None:
    assert str(evaluation_error("'a' < 3")) == "Cannot compare str 'a' with int 3 using '<'"


def test_ordering_a_missing_value_fails_and_names_the_path_it_came_from() -> None:
    error = evaluation_error("a.nope > 0.5")

    assert str(error) == "Cannot compare a missing value from a.nope with float 0.5 using '>'"


@pytest.mark.parametrize("text", ["true > 0", "null < 1", "[1] < [2]", "context.tags >= 'x'"])
def test_ordering_booleans_nulls_and_collections_is_an_evaluation_error(text: str) -> None:
    with pytest.raises(EvaluationError, match="Cannot compare"):
        value(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('context.env in ["prod", "staging"]', True),
        ("context.env in ['dev']", False),
        ("context.env not in ['dev']", True),
        ('"x" in context.tags', True),
        ('"z" in context.tags', False),
        ("'ide' in context.topic", True),
        ("'IDE' in context.topic", False),
        ("'some key' in obj", True),
        ("'other' in obj", False),
        ("1 in obj", False),
        ("1 in [true]", False),
        ("'x' in context.missing", False),
        ("'x' not in context.missing", True),
        ("'x' in context.nothing", False),
        ("context.missing in 'abc'", False),
        ("context.missing in [null]", True),
        ("[1] in [[1], [2]]", True),
    ],
)
def test_in_tests_list_membership_substrings_and_object_keys(text: str, expected: bool) -> None:
    assert value(text) is expected


def test_in_on_a_number_is_an_evaluation_error() -> None:
    error = evaluation_error("1 in tests.exitCode")

    assert "Cannot use 'in' with int 1 and int 0 from tests.exitCode" in str(error)


def test_in_with_a_non_string_inside_a_string_is_an_evaluation_error() -> None:
    assert "a string can only contain strings" in str(evaluation_error("3 not in 'abc3'"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("len(items)", 4),
        ("len(context.topic)", 5),
        ("len(obj)", 3),
        ("len([])", 0),
        ("len(context.missing)", 0),
        ("len(context.nothing)", 0),
        ("len(context.missing || items)", 4),
    ],
)
def test_len_counts_strings_lists_and_objects_and_missing_counts_as_zero(text: str, expected: int) -> None:
    assert value(text) == expected


@pytest.mark.parametrize("text", ["len(1)", "len(true)", "len(review.score)"])
def test_len_of_a_number_or_boolean_is_an_evaluation_error(text: str) -> None:
    with pytest.raises(EvaluationError, match=r"len\(\) needs a string, list or object"):
        value(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("not context.skip", True),
        ("not context.topic", False),
        ("not not context.topic", True),
        ("not context.missing", True),
        ("context.topic and items", True),
        ("context.topic and context.empty", False),
        ("context.empty or context.missing", False),
        ("context.empty or 0 or items", True),
        ("len(items) > 3 and not context.skip", True),
        ("(a.score >= 0.5 or b.ok) and c.n != 2", True),
        ("(a.score >= 0.5 or context.skip) and c.n != 2", False),
    ],
)
def test_and_or_and_not_return_booleans_by_truthiness(text: str, expected: bool) -> None:
    assert value(text) is expected


@pytest.mark.parametrize("falsy", [MISSING, None, False, 0, 0.0, "", [], {}])
def test_missing_null_false_zero_and_empty_values_are_false(falsy: Any) -> None:
    assert evaluate(parse("x or false"), {"x": falsy}) is False
    assert evaluate(parse("not x"), {"x": falsy} if falsy is not MISSING else {}) is True


def test_and_stops_at_the_first_false_operand() -> None:
    # The right side would fail to evaluate, so reaching it would raise.
    assert value("context.skip and 'a' < 1") is False


def test_or_stops_at_the_first_true_operand() -> None:
    assert value("b.ok or 'a' < 1") is True


def test_fallback_keeps_a_present_value() -> None:
    assert value('context.topic || "none"') == "tides"


def test_fallback_uses_default_when_missing() -> None:
    assert value("a.b.nope || 'x'") == "x"


@pytest.mark.parametrize("absent", ["context.nothing", "context.empty", "review.reasoning", "[]", "context.missing"])
def test_fallback_skips_null_empty_strings_and_empty_collections(absent: str) -> None:
    assert value(f'{absent} || "none"') == "none"


@pytest.mark.parametrize(("present", "expected"), [("tests.exitCode", 0), ("context.skip", False)])
def test_fallback_keeps_zero_and_false_because_they_are_answers(present: str, expected: Any) -> None:
    assert value(f'{present} || "none"') is expected


def test_fallback_chains_return_the_first_present_alternative() -> None:
    assert value("context.nope || context.empty || draft.output || 'x'") == "A draft"


def test_fallback_returns_the_last_alternative_when_none_is_present() -> None:
    assert value("context.nope || context.empty") == ""
    assert value("context.nope || context.other") is MISSING


def test_fallback_does_not_evaluate_alternatives_after_a_present_one() -> None:
    assert value("context.topic || len(1)") == "tides"


# Precedence


def test_not_binds_looser_than_a_comparison() -> None:
    assert parse("not a == b") == Not(Comparison("==", Path(("a",), 4), Path(("b",), 9), 6), 0)
    assert value("not c.n == 4") is True


def test_and_binds_tighter_than_or() -> None:
    assert parse("a or b and c") == Or((Path(("a",), 0), And((Path(("b",), 5), Path(("c",), 11)), 5)), 0)
    assert value("b.ok or context.skip and context.skip") is True


def test_fallback_binds_loosest_of_all() -> None:
    expr = parse("a || b == c")

    assert expr == Fallback((Path(("a",), 0), Comparison("==", Path(("b",), 5), Path(("c",), 10), 7)), 0)
    assert value("x || 1 == 2", {"x": ""}) is False


def test_fallback_takes_whole_or_expressions_as_operands() -> None:
    expr = parse("a or b || c and d")

    assert isinstance(expr, Fallback)
    assert [type(operand) for operand in expr.operands] == [Or, And]


def test_parentheses_override_precedence() -> None:
    assert value("(context.empty || 'x') == 'x'") is True
    assert parse("(a or b) and c") == And((Or((Path(("a",), 1), Path(("b",), 6)), 1), Path(("c",), 13)), 0)


def test_chains_of_the_same_operator_are_flattened() -> None:
    assert parse("a and b and c") == And((Path(("a",), 0), Path(("b",), 6), Path(("c",), 12)), 0)


def test_len_and_list_literals_parse_into_their_own_nodes() -> None:
    assert parse("len([1, x])") == Length(ListExpr((Constant(1, 5), Path(("x",), 8)), 4), 0)


def test_parse_results_are_cached() -> None:
    assert parse("context.topic || 'cached'") is parse("context.topic || 'cached'")


# References


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("context.topic", [Reference(("context", "topic"), False)]),
        ("fetch-data.output", [Reference(("fetch-data", "output"), False)]),
        ("results.0.output", [Reference(("results", "0", "output"), False)]),
        ('obj["some key"]', [Reference(("obj", "some key"), False)]),
        ("list[0]", [Reference(("list", "0"), False)]),
        ('review.reasoning || "none"', [Reference(("review", "reasoning"), True)]),
        ("a.b.c || 'x'", [Reference(("a", "b", "c"), True)]),
        ("a || b", [Reference(("a",), True), Reference(("b",), False)]),
        ('a || b || "x"', [Reference(("a",), True), Reference(("b",), True)]),
        ("len(a) || b", [Reference(("a",), True), Reference(("b",), False)]),
        ("(a == b) || c", [Reference(("a",), True), Reference(("b",), True), Reference(("c",), False)]),
        ("a || (b || c)", [Reference(("a",), True), Reference(("b",), True), Reference(("c",), False)]),
        ("(a || b) || c", [Reference(("a",), True), Reference(("b",), True), Reference(("c",), False)]),
        ("[a || b, c]", [Reference(("a",), True), Reference(("b",), False), Reference(("c",), False)]),
        (
            "len(items) > 3 and not context.skip",
            [Reference(("items",), False), Reference(("context", "skip"), False)],
        ),
        (
            "context.env in [prod.name, 'x']",
            [Reference(("context", "env"), False), Reference(("prod", "name"), False)],
        ),
        ("a == a", [Reference(("a",), False), Reference(("a",), False)]),
        ("'literal' == 1 or true", []),
    ],
)
def test_references_lists_paths_in_source_order_marking_those_with_a_fallback(
    text: str, expected: list[Reference]
) -> None:
    assert references(parse(text)) == expected


def test_template_references_collects_from_every_expression() -> None:
    text = "Topic {{ context.topic }}, notes {{ review.reasoning || 'none' }} and {{ results.0.output }}"

    assert template_references(text) == [
        Reference(("context", "topic"), False),
        Reference(("review", "reasoning"), True),
        Reference(("results", "0", "output"), False),
    ]


def test_references_are_hashable_and_comparable() -> None:
    assert {Reference(("a",), True), Reference(("a",), True)} == {Reference(("a",), True)}


# Templates


def test_template_parse_splits_literal_text_from_expressions() -> None:
    assert template_parse("Hi {{name}}, {{ a.b }}!").parts == (
        "Hi ",
        Path(("name",), 0),
        ", ",
        Path(("a", "b"), 1),
        "!",
    )


def test_template_parse_is_cached() -> None:
    assert template_parse("{{ cached.template }}") is template_parse("{{ cached.template }}")


def test_template_render_substitutes_values() -> None:
    text = "Write about {{ context.topic }} in {{context.env}}; first: {{ results.0.output }}."

    assert template_render(text, SCOPE) == "Write about tides in prod; first: first."


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ({"v": "text"}, "[text]"),
        ({}, "[]"),
        ({"v": None}, "[]"),
        ({"v": True}, "[true]"),
        ({"v": False}, "[false]"),
        ({"v": 0}, "[0]"),
        ({"v": 2.5}, "[2.5]"),
        ({"v": {"name": "Zoë", "n": [1, None]}}, '[{"name": "Zoë", "n": [1, null]}]'),
        ({"v": ["a", "é"]}, '[["a", "é"]]'),
    ],
)
def test_template_render_turns_each_value_into_text(scope: dict[str, Any], expected: str) -> None:
    assert template_render("[{{ v }}]", scope) == expected


def test_template_render_evaluates_full_expressions() -> None:
    text = "{{ review.reasoning || 'no reasons' }} / {{ len(items) > 3 }} / {{ [1, 'a'] }}"

    assert template_render(text, SCOPE) == 'no reasons / true / [1, "a"]'


def test_template_render_leaves_text_without_expressions_alone() -> None:
    text = "plain text }} with a lone closing brace"

    assert template_render(text, SCOPE) == text


def test_a_closing_brace_pair_inside_a_quoted_string_does_not_end_the_expression() -> None:
    assert template_render("{{ context.nope || '}}' }}!", SCOPE) == "}}!"


def test_template_value_returns_the_raw_value_of_a_lone_expression() -> None:
    assert template_value("  {{ items }}\n", SCOPE) == [1, 2, 3, 4]
    assert template_value("{{ obj }}", SCOPE) == SCOPE["obj"]
    assert template_value("{{ tests.exitCode }}", SCOPE) == 0


def test_template_value_turns_missing_into_none() -> None:
    assert template_value("{{ context.nope }}", SCOPE) is None


def test_template_value_renders_a_string_when_there_is_other_text() -> None:
    assert template_value("n={{ items }}", SCOPE) == "n=[1, 2, 3, 4]"
    assert template_value("{{ list[0] }}{{ list[1] }}", SCOPE) == "1020"
    assert template_value("no expressions", SCOPE) == "no expressions"


def test_is_template_detects_opening_braces() -> None:
    assert is_template("Hello {{ name }}") is True
    assert is_template("Hello {{") is True
    assert is_template("Hello }} {name}") is False


# Errors


@pytest.mark.parametrize(
    ("text", "position", "complaint"),
    [
        ("a ==", 4, "Expected a value but found end of expression"),
        ("a.", 2, "Expected a name or index after '.' but found end of expression"),
        ('"unterminated', 0, "Unterminated string"),
        ("'unterminated\\'", 0, "Unterminated string"),
        ("a b", 2, "Unexpected 'b'"),
        ("[1,", 3, "Expected a value but found end of expression"),
        ("[1 2]", 3, "Expected ']' but found '2'"),
        ("a == (b))", 8, "Unexpected ')'"),
        ("(a", 2, "Expected ')' but found end of expression"),
        ("", 0, "Empty expression"),
        ("   ", 3, "Empty expression"),
        ("a = b", 2, "Unexpected character '='"),
        ("a && b", 2, "Unexpected character '&'"),
        ("a | b", 2, "Unexpected character '|'"),
        ("a == b == c", 7, "Comparisons cannot be chained"),
        ("len items", 4, "Expected '(' but found 'items'"),
        ("len", 3, "Expected '(' but found end of expression"),
        ("a and", 5, "Expected a value but found end of expression"),
        ("or a", 0, "Expected a value but found 'or'"),
        ("a.-1", 2, "Unexpected character '-'"),
        ("a[-1]", 2, "Expected an index or a quoted key inside '[ ]' but found '-1'"),
        ("a[1.5]", 2, "Expected an index or a quoted key inside '[ ]' but found '1.5'"),
        ("a[b]", 2, "Expected an index or a quoted key inside '[ ]' but found 'b'"),
        ("a[0", 3, "Expected ']' but found end of expression"),
        ("x - 1", 2, "Unexpected character '-'"),
        ("f(x)", 1, "Unexpected '('"),
        (r'"bad \q escape"', 5, "Unknown escape"),
        ("a not b", 2, "Unexpected 'not'"),
        ("-x", 0, "Unexpected character '-'"),
        ("é", 0, "Unexpected character 'é'"),
    ],
)
def test_bad_expressions_raise_an_expression_error_saying_what_and_where(
    text: str, position: int, complaint: str
) -> None:
    error = parse_error(text)

    assert error.position == position
    assert error.reason.startswith(complaint)
    assert str(error) == f"{error.reason} at position {position} in {text!r}"


def test_an_expression_error_is_a_value_error() -> None:
    assert isinstance(parse_error("a =="), ValueError)
    assert isinstance(evaluation_error("'a' < 1"), ValueError)


def test_an_expression_error_on_long_text_quotes_only_the_part_around_the_position() -> None:
    text = "a.b == " + "x" * 200 + " )"

    message = str(parse_error(text))

    assert "at position 208" in message
    assert "…" in message
    assert len(message) < 150


def test_an_expression_error_survives_pickling() -> None:
    error = parse_error("a ==")

    restored = pickle.loads(pickle.dumps(error))

    assert (restored.reason, restored.text, restored.position, str(restored)) == (
        error.reason,
        error.text,
        error.position,
        str(error),
    )


def test_nesting_is_limited_so_parsing_cannot_exhaust_the_stack() -> None:
    deep_enough = "(" * MAX_NESTING + "a" + ")" * MAX_NESTING
    too_deep = "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)

    assert parse(deep_enough) == Path(("a",), MAX_NESTING)
    assert parse_error(too_deep).reason.startswith("Expression nested more than")
    assert parse_error("not " * 1000 + "a").position == 4 * MAX_NESTING


@pytest.mark.parametrize(
    ("text", "position", "complaint"),
    [
        ("{{ a", 0, "Unterminated '{{'"),
        ("Hello {{ name }} and {{ other", 21, "Unterminated '{{'"),
        ("{{ }}", 0, "Empty '{{ }}'"),
        ("x {{}} y", 2, "Empty '{{ }}'"),
        ("Hi {{ a == }}", 11, "Expected a value but found end of expression"),
        ("Hi {{ a b }}", 8, "Unexpected 'b'"),
        ('{{ "a }}', 3, "Unterminated string"),
    ],
)
def test_bad_templates_raise_an_expression_error_positioned_in_the_template(
    text: str, position: int, complaint: str
) -> None:
    with pytest.raises(ExpressionError) as caught:
        template_parse(text)

    assert caught.value.position == position
    assert caught.value.reason.startswith(complaint)
    assert caught.value.text == text
    assert f"at position {position}" in str(caught.value)


@pytest.mark.parametrize("render", [template_render, template_value, lambda text, _: template_references(text)])
def test_every_template_function_rejects_a_bad_template(render: Any) -> None:
    with pytest.raises(ExpressionError, match="Unterminated"):
        render("{{ a", SCOPE)


# MISSING


def test_missing_is_a_falsy_singleton_named_missing() -> None:
    assert repr(MISSING) == "MISSING"
    assert not MISSING
    assert copy.deepcopy(MISSING) is MISSING
    assert pickle.loads(pickle.dumps(MISSING)) is MISSING
