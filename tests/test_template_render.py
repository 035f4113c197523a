"""Templates: placeholders, sections, declarations and rendering, as the original's users know them."""

import json
import unicodedata
from datetime import UTC, date, datetime

import pytest

from core.errors import InvalidInput
from elements.templating import (
    PLACEHOLDER,
    derive_variables,
    placeholders,
    render,
    split_sections,
    validate_template,
)
from elements.types import (
    MAX_TEMPLATE_ARRAY_ITEMS,
    MAX_TEMPLATE_CONTENT,
    MAX_TEMPLATE_OBJECT_KEYS,
    MAX_TEMPLATE_STRING_VALUE,
    MAX_TEMPLATE_VARIABLES,
)

PAGE = (
    "<template><h1>{{ title }}</h1></template>\n<style>h1 { color: red; }}</style>\n<script>let x = {{a: 1}};</script>"
)


def var(name: str, kind: str = "string", **extra: object) -> dict:
    return {"name": name, "type": kind, "required": False, **extra}


def rendered(content: str, declared: list[dict], values: dict | None = None) -> str:
    return render(content, declared, values)["content"]


def rejection(content: str, declared: list[dict], values: dict | None = None, **options: object) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        render(content, declared, values, **options)
    return caught.value


# Placeholders


def test_a_placeholder_is_a_name_or_dotted_path_with_optional_spaces_inside_the_braces():
    found = [match.group(1) for match in PLACEHOLDER.finditer("{{name}} {{ user.email }} {{a.b_c.d1}}")]

    assert found == ["name", "user.email", "a.b_c.d1"]


def test_handlebars_blocks_and_names_starting_with_a_digit_are_not_placeholders():
    assert PLACEHOLDER.findall("{{#if ok}}{{/if}} {{> partial}} {{1st}} {{a..b}} {{café}}") == []


def test_placeholders_lists_each_top_level_name_once_in_order_of_first_use():
    assert placeholders("{{ b }} {{a.x}} {{b}} {{a.y}} {{c}}") == ["b", "a", "c"]


def test_placeholders_in_section_mode_come_from_the_template_section_only():
    content = "<template>{{title}}</template><style>{{colour}}</style><script>{{code}}</script>"

    assert placeholders(content) == ["title"]


# Sections


def test_bare_section_tags_split_the_content_into_its_three_sections():
    assert split_sections(PAGE) == {
        "template": "<h1>{{ title }}</h1>",
        "style": "h1 { color: red; }}",
        "script": "let x = {{a: 1}};",
    }


def test_a_missing_section_is_empty_and_sections_may_span_lines():
    assert split_sections("<style>\np {}\n</style>") == {"template": "", "style": "\np {}\n", "script": ""}


def test_content_without_bare_section_tags_is_not_in_section_mode():
    assert split_sections("Hello {{name}}") is None
    assert split_sections('<template id="row"><td>{{x}}</td></template><script src="a.js"></script>') is None


# Deriving variables


def test_derive_variables_keeps_declared_entries_and_adds_optional_strings_for_the_rest():
    declared = [{"name": "name", "type": "string", "required": True, "description": "Display name"}]

    derived = derive_variables("{{name}} earns {{points}} as {{user.role}}; {{points}} again", declared)

    assert derived == [
        {"name": "name", "type": "string", "required": True, "description": "Display name"},
        {"name": "points", "type": "string", "required": False},
        {"name": "user", "type": "string", "required": False},
    ]


def test_derive_variables_keeps_declarations_the_content_does_not_use():
    declared = [var("unused", "number")]

    assert derive_variables("no placeholders", declared) == declared


def test_derive_variables_ignores_placeholders_outside_the_template_section():
    assert derive_variables("<template>{{a}}</template><script>{{b}}</script>", []) == [var("a")]


# Validating


def test_a_well_formed_template_has_no_problems():
    declared = [var("title", required=True, validation=r"[A-Z][a-z]+", options=["Hello", "Hi"]), var("n", "number")]

    assert validate_template("{{title}} x{{n}} {{#if x}}{{/if}}", declared) == []


def test_unmatched_braces_are_reported_with_both_counts():
    assert validate_template("Hello {{name}", []) == ["Unmatched template tokens: 1 '{{' and 0 '}}'."]
    assert validate_template("a }} b", []) == ["Unmatched template tokens: 0 '{{' and 1 '}}'."]


def test_braces_in_style_and_script_sections_do_not_count_as_unmatched():
    assert validate_template(PAGE, [var("title")]) == []
    assert validate_template("<template>{{x</template><style>}}</style>", []) == [
        "Unmatched template tokens: 1 '{{' and 0 '}}'."
    ]


def test_duplicate_variable_names_are_reported():
    assert validate_template("{{a}}", [var("a"), var("a", "number")]) == ["Duplicate variable name 'a'."]


def test_a_variable_with_an_unknown_type_is_reported():
    (problem,) = validate_template("", [var("a", "text")])

    assert problem.startswith("Variable 'a' has unknown type 'text'.")
    assert "string, number, boolean, date, array, object" in problem


def test_a_variable_name_that_is_not_an_identifier_is_reported():
    problems = validate_template("", [var("project-name"), var("2nd"), {"type": "string"}])

    assert len(problems) == 3
    assert problems[0].startswith("Variable #1 has an invalid name 'project-name'")
    assert problems[1].startswith("Variable #2 has an invalid name '2nd'")
    assert problems[2].startswith("Variable #3 has an invalid name None")


def test_a_declaration_that_is_not_an_object_is_reported():
    assert validate_template("", ["title"]) == ["Variable #1 must be an object with a name and a type."]


def test_required_must_be_true_or_false():
    assert validate_template("", [var("a", required="yes")]) == ["Variable 'a': required must be true or false."]


def test_a_validation_pattern_that_does_not_compile_is_reported():
    (problem,) = validate_template("", [var("code", validation="[a-z")])

    assert problem.startswith("Variable 'code' has an invalid validation pattern:")


@pytest.mark.parametrize("pattern", [r"(a+)+", r"(a*)*", r"(\w+\s?)+$", r"(?:x[a-z]*){2,}", r"((ab)+c)*", r"(a{1,3})+"])
def test_validation_patterns_with_nested_quantifiers_are_accepted_since_matching_is_linear(pattern):
    assert validate_template("", [var("code", validation=pattern)]) == []


@pytest.mark.parametrize(("pattern", "reason"), [(r"(a)\1", r"invalid escape sequence: \1"),
                                                 (r"(?=a)a", "invalid perl operator: (?=")])
def test_a_pattern_re2_cannot_run_is_refused_saying_why(pattern, reason):
    (problem,) = validate_template("", [var("code", validation=pattern)])

    assert problem == (f"Variable 'code' has an invalid validation pattern: {reason} (patterns use RE2 syntax, "
                       "which has no backreferences or lookaround).")


def test_a_validation_pattern_past_the_length_limit_is_refused():
    assert validate_template("", [var("code", validation="a" * 1_000)]) == []
    assert validate_template("", [var("code", validation="a" * 1_001)]) == [
        "Variable 'code' has a validation pattern of 1001 characters; the limit is 1000."]


@pytest.mark.parametrize(
    "pattern",
    [
        r"[A-Z]{3}-\d{4}",
        r"(\d{3}-){2}\d{4}",
        r"(red|green)+",
        r"\(a+\)+",
        r"[(+]+",
        r"([]a+])+",
        r"(\w+)?!",
        r"(\w+){0,1}!",
    ],
)
def test_validation_patterns_without_nested_quantifiers_are_accepted(pattern):
    assert validate_template("", [var("code", validation=pattern)]) == []


def test_options_must_be_a_list():
    assert validate_template("", [var("tone", options="formal")]) == ["Variable 'tone': options must be a list."]


def test_more_variables_than_the_limit_are_reported():
    declared = [var(f"v{i}") for i in range(MAX_TEMPLATE_VARIABLES + 1)]

    assert validate_template("", declared) == [
        f"Template declares {MAX_TEMPLATE_VARIABLES + 1} variables; the limit is {MAX_TEMPLATE_VARIABLES}."
    ]
    assert validate_template("", declared[:-1]) == []


def test_content_longer_than_the_limit_is_reported():
    assert validate_template("x" * MAX_TEMPLATE_CONTENT, []) == []
    assert validate_template("x" * (MAX_TEMPLATE_CONTENT + 1), []) == [
        f"Template content is {MAX_TEMPLATE_CONTENT + 1} characters; the limit is {MAX_TEMPLATE_CONTENT}."
    ]


# Rendering: substitution


def test_declared_variables_are_substituted_and_nothing_is_reported():
    result = render(
        "Hello {{ name }}, welcome to {{place}}.", [var("name"), var("place")], {"name": "Ann", "place": "Oslo"}
    )

    assert result == {"content": "Hello Ann, welcome to Oslo.", "warnings": []}


def test_values_for_undeclared_variables_are_skipped_with_a_warning_naming_them():
    result = render("Hi {{name}}", [var("name")], {"name": "Ann", "role": "admin", "team": "x"})

    assert result["content"] == "Hi Ann"
    assert result["warnings"] == ["Ignored undeclared variable(s): role, team"]


def test_undeclared_placeholders_stay_as_they_are_and_are_reported():
    result = render("Hi {{name}} from {{ team }}", [var("name")], {"name": "Ann", "team": "Core"})

    assert result["content"] == "Hi Ann from {{ team }}"
    assert result["warnings"] == [
        "Ignored undeclared variable(s): team",
        "1 placeholder(s) were not substituted: team",
    ]


def test_dotted_paths_resolve_into_object_values():
    values = {"user": {"name": "Ann", "address": {"city": "Oslo"}}}

    assert rendered("{{user.name}} lives in {{ user.address.city }}", [var("user", "object")], values) == (
        "Ann lives in Oslo"
    )


def test_dotted_paths_that_lead_nowhere_are_left_empty_and_reported_once_each():
    result = render(
        "[{{user.email}}][{{user.name.first}}][{{note}}][{{other.x}}][{{user.email}}]",
        [var("user", "object"), var("note")],
        {"user": {"name": "Ann"}},
    )

    assert result["content"] == "[][][][{{other.x}}][]"
    assert result["warnings"] == ["4 placeholder(s) were not substituted: user.email, user.name.first, note, other.x"]


def test_handlebars_blocks_are_left_untouched():
    content = "{{#if admin}}Hi {{name}}{{/if}}{{> footer}}"

    assert render(content, [var("name"), var("admin")], {"name": "Ann", "admin": "yes"}) == {
        "content": "{{#if admin}}Hi Ann{{/if}}{{> footer}}",
        "warnings": [],
    }


def test_no_values_at_all_leaves_optional_placeholders_empty():
    assert render("a{{x}}b", [var("x")], None) == {
        "content": "ab",
        "warnings": ["1 placeholder(s) were not substituted: x"],
    }


def test_values_that_are_not_an_object_are_refused():
    assert rejection("{{x}}", [var("x")], ["x"]).code == "invalid_variables"


# Rendering: formatting


def test_booleans_render_as_lowercase_words():
    declared = [var("yes", "boolean"), var("no", "boolean")]

    assert rendered("{{yes}}/{{no}}", declared, {"yes": True, "no": False}) == "true/false"


def test_dates_and_datetimes_render_as_iso_8601():
    declared = [var("day", "date"), var("at", "date")]
    values = {"day": date(2024, 5, 1), "at": datetime(2024, 5, 1, 9, 30, tzinfo=UTC)}

    assert rendered("{{day}} {{at}}", declared, values) == "2024-05-01 2024-05-01T09:30:00+00:00"


def test_arrays_render_as_a_comma_separated_list():
    assert rendered("{{tags}}", [var("tags", "array")], {"tags": ["a", 2, True, None]}) == "a, 2, true, "


def test_objects_render_as_indented_json():
    value = {"name": "Zoë", "when": datetime(2024, 5, 1, 9, 30), "n": [1, 2]}

    output = rendered("{{obj}}", [var("obj", "object")], {"obj": value})

    assert output == json.dumps(
        {"name": "Zoë", "when": "2024-05-01T09:30:00", "n": [1, 2]}, indent=2, ensure_ascii=False
    )


def test_a_string_variable_given_an_object_still_resolves_dotted_paths():
    # Placeholders found in the content are saved as string variables, `{{user.name}}` included.
    declared = derive_variables("{{user.name}} ({{count}})", [])

    assert rendered("{{user.name}} ({{count}})", declared, {"user": {"name": "Ann"}, "count": 3}) == "Ann (3)"


# Rendering: required variables and defaults


def test_a_required_variable_that_is_missing_is_refused():
    error = rejection("{{name}}", [var("name", required=True)], {})

    assert error.message == "Required variable 'name' not provided"
    assert error.code == "missing_variable"


def test_a_required_variable_given_null_counts_as_missing():
    assert rejection("{{name}}", [var("name", required=True)], {"name": None}).code == "missing_variable"


def test_a_default_fills_in_a_missing_optional_variable():
    assert rendered("{{tone}}", [var("tone", default="formal")], {}) == "formal"
    assert rendered("{{tone}}", [var("tone", default="formal")], {"tone": None}) == "formal"
    assert rendered("{{tone}}", [var("tone", default="formal")], {"tone": "casual"}) == "casual"


def test_a_default_satisfies_a_required_variable():
    assert rendered("{{n}}", [var("n", "number", required=True, default=3)], {}) == "3"


# Rendering: types


@pytest.mark.parametrize(
    ("given", "shown"), [(42, "42"), (2.5, "2.5"), ("7", "7"), (" -1.50 ", "-1.5"), ("1e3", "1000"), (4.0, "4")]
)
def test_numbers_accept_numbers_and_numeric_text(given, shown):
    assert rendered("{{n}}", [var("n", "number")], {"n": given}) == shown


@pytest.mark.parametrize("given", ["abc", "NaN", "", "12px", True, float("nan"), float("inf"), [1]])
def test_a_number_variable_refuses_anything_else(given):
    error = rejection("{{n}}", [var("n", "number")], {"n": given})

    assert error.message == "Variable 'n' must be a number"
    assert error.code == "invalid_variable_value"


@pytest.mark.parametrize(("given", "shown"), [(True, "true"), ("false", "false"), (" TRUE ", "true")])
def test_booleans_accept_true_false_and_their_text(given, shown):
    assert rendered("{{b}}", [var("b", "boolean")], {"b": given}) == shown


@pytest.mark.parametrize("given", ["yes", 1, 0, "on"])
def test_a_boolean_variable_refuses_anything_else(given):
    assert rejection("{{b}}", [var("b", "boolean")], {"b": given}).message == "Variable 'b' must be true or false"


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("2024-05-01", "2024-05-01"),
        (" 2024-05-01 ", "2024-05-01"),
        ("2024-05-01T09:30:00Z", "2024-05-01T09:30:00+00:00"),
    ],
)
def test_dates_accept_iso_8601_text(given, shown):
    assert rendered("{{d}}", [var("d", "date")], {"d": given}) == shown


@pytest.mark.parametrize("given", ["May 1st", "2024-13-01", 20240501])
def test_a_date_variable_refuses_anything_else(given):
    error = rejection("{{d}}", [var("d", "date")], {"d": given})

    assert error.message.startswith("Variable 'd' must be an ISO 8601 date")


def test_strings_are_nfc_normalised():
    decomposed = "Zoe\u0301"

    output = rendered("{{s}}", [var("s")], {"s": decomposed})

    assert output == unicodedata.normalize("NFC", decomposed)
    assert output != decomposed


def test_a_string_longer_than_the_limit_is_refused():
    assert rendered("{{s}}", [var("s")], {"s": "x" * MAX_TEMPLATE_STRING_VALUE}) == "x" * MAX_TEMPLATE_STRING_VALUE
    error = rejection("{{s}}", [var("s")], {"s": "x" * (MAX_TEMPLATE_STRING_VALUE + 1)})

    assert error.message == (
        f"Variable 's' is {MAX_TEMPLATE_STRING_VALUE + 1} characters; the limit is {MAX_TEMPLATE_STRING_VALUE}"
    )


def test_a_string_must_match_its_whole_validation_pattern():
    declared = [var("code", validation=r"[A-Z]{3}-\d{4}")]

    assert rendered("{{code}}", declared, {"code": "ABC-1234"}) == "ABC-1234"
    for given in ("abc-1234", "ABC-1234 and more", "xABC-1234"):
        error = rejection("{{code}}", declared, {"code": given})
        assert error.message == r"Variable 'code' does not match its validation pattern [A-Z]{3}-\d{4}"


@pytest.mark.parametrize("pattern", [r"(a|a)*b", r"(a+)+$"])
def test_a_backtracking_pattern_checks_a_long_value_in_linear_time(pattern):
    error = rejection("{{s}}", [var("s", validation=pattern)], {"s": "a" * 9_999 + "!"})

    assert error.code == "invalid_variable_value"
    assert error.message == f"Variable 's' does not match its validation pattern {pattern}"


def test_a_string_must_be_one_of_its_options():
    declared = [var("tone", options=["formal", "casual"])]

    assert rendered("{{tone}}", declared, {"tone": "casual"}) == "casual"
    assert rejection("{{tone}}", declared, {"tone": "angry"}).message == (
        "Variable 'tone' must be one of: formal, casual"
    )


def test_an_array_variable_must_be_a_list_within_the_item_limit():
    declared = [var("items", "array")]

    assert rendered("{{items}}", declared, {"items": ["x"] * MAX_TEMPLATE_ARRAY_ITEMS}).count("x") == (
        MAX_TEMPLATE_ARRAY_ITEMS
    )
    assert rejection("{{items}}", declared, {"items": "x"}).message == "Variable 'items' must be an array"
    assert rejection("{{items}}", declared, {"items": ["x"] * (MAX_TEMPLATE_ARRAY_ITEMS + 1)}).message == (
        f"Variable 'items' has {MAX_TEMPLATE_ARRAY_ITEMS + 1} items; the limit is {MAX_TEMPLATE_ARRAY_ITEMS}"
    )


def test_an_object_variable_must_be_a_mapping_within_the_key_limit():
    declared = [var("obj", "object")]
    at_limit = {f"k{i}": i for i in range(MAX_TEMPLATE_OBJECT_KEYS)}

    assert rendered("{{obj.k0}}", declared, {"obj": at_limit}) == "0"
    assert rejection("{{obj}}", declared, {"obj": [1]}).message == "Variable 'obj' must be an object"
    assert rejection("{{obj}}", declared, {"obj": {**at_limit, "extra": 1}}).message == (
        f"Variable 'obj' has {MAX_TEMPLATE_OBJECT_KEYS + 1} keys; the limit is {MAX_TEMPLATE_OBJECT_KEYS}"
    )


def test_a_declaration_with_an_unknown_type_cannot_render():
    error = rejection("{{a}}", [var("a", "text")], {"a": "x"})

    assert error.code == "invalid_variable"
    assert error.message.startswith("Variable 'a' has unknown type 'text'.")


# Rendering: sections


def test_section_mode_renders_only_the_template_section():
    assert render(PAGE, [var("title")], {"title": "Hi"}) == {"content": "<h1>Hi</h1>", "warnings": []}


def test_a_style_or_script_section_is_returned_raw():
    assert render(PAGE, [var("title")], {}, section="style") == {"content": "h1 { color: red; }}", "warnings": []}
    assert render(PAGE, [var("title")], {}, section="script")["content"] == "let x = {{a: 1}};"


def test_asking_for_a_section_of_a_template_without_sections_is_refused():
    error = rejection("Hello {{name}}", [var("name")], {}, section="style")

    assert error.message == "Template is not in section mode: it has no <template>, <style> or <script> sections."


@pytest.mark.parametrize("section", ["template", "html", "STYLE"])
def test_an_unknown_section_name_is_refused_listing_the_valid_ones(section):
    error = rejection(PAGE, [var("title")], {}, section=section)

    assert error.message == f"Unknown section {section!r}. Valid sections: style, script."


def test_all_sections_returns_every_section_with_the_template_rendered():
    result = render(PAGE, [var("title")], {"title": "Hi"}, all_sections=True)

    assert result == {
        "content": "<h1>Hi</h1>",
        "warnings": [],
        "sections": {"template": "<h1>Hi</h1>", "style": "h1 { color: red; }}", "script": "let x = {{a: 1}};"},
    }


def test_all_sections_of_a_plain_template_is_the_whole_rendered_content():
    result = render("Hi {{name}}", [var("name")], {"name": "Ann"}, all_sections=True)

    assert result["sections"] == {"template": "Hi Ann", "style": "", "script": ""}
