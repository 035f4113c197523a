"""Element discovery: tokens and scores, similar elements, verb search, relationships, stats."""

import math

import pytest

from core.errors import InvalidInput
from elements.similarity import (
    RELATIONSHIP_TYPES,
    VERB_TAXONOMY,
    ElementCard,
    card_tokens,
    entropy,
    find_similar,
    jaccard,
    relationship_stats,
    relationships,
    search_by_verb,
    similarity,
    tokens,
)


def card(
    name: str,
    text: str = "",
    *,
    element_type: str = "skill",
    description: str = "",
    tags: tuple[str, ...] = (),
    triggers: tuple[str, ...] = (),
    references: tuple[tuple[str, str], ...] = (),
) -> ElementCard:
    return ElementCard(
        element_type=element_type,
        name=name,
        description=description,
        text=text,
        tags=tags,
        triggers=triggers,
        references=references,
    )


def words(prefix: str, count: int) -> str:
    """`count` distinct two-plus-character terms, e.g. `s0 s1 s2`."""
    return " ".join(f"{prefix}{i}" for i in range(count))


# --- tokens, jaccard, entropy -----------------------------------------------------------------


def test_tokens_keep_letters_digits_underscore_and_hyphen_and_drop_one_character_terms():
    assert tokens("Hello, World! foo_bar code-review a 1 42 x.y ab/cd") == {
        "hello",
        "world",
        "foo_bar",
        "code-review",
        "42",
        "ab",
        "cd",
    }


def test_tokens_are_a_lowercase_set():
    assert tokens("Go GO go ÜBER über") == {"go", "über"}


def test_tokens_compose_unicode_before_splitting():
    # Decomposed, the accent is a combining mark that would otherwise split the word.
    assert tokens("cafe\u0301 menu") == {"caf\u00e9", "menu"}


def test_tokens_keep_letters_and_digits_of_every_script():
    assert tokens("Grüße, мир! 東京 ٣٤") == {"grüße", "мир", "東京", "٣٤"}


def test_tokens_of_empty_or_punctuation_only_text_are_empty():
    assert tokens("") == frozenset()
    assert tokens(" ... !? ") == frozenset()


def test_jaccard_of_two_empty_sets_is_one_and_of_one_empty_set_is_zero():
    assert jaccard(frozenset(), frozenset()) == 1.0
    assert jaccard(frozenset({"ab"}), frozenset()) == 0.0
    assert jaccard(frozenset(), frozenset({"ab"})) == 0.0


def test_jaccard_is_shared_terms_over_all_terms():
    assert jaccard({"ab", "bc"}, {"bc", "cd"}) == pytest.approx(1 / 3)
    assert jaccard({"ab", "bc"}, {"bc", "ab"}) == 1.0


def test_entropy_of_a_set_is_log2_of_its_size():
    assert entropy(frozenset()) == 0.0
    assert entropy({"ab"}) == 0.0
    assert entropy(set(words("w", 8).split())) == 3.0
    assert entropy(set(words("w", 10).split())) == pytest.approx(math.log2(10))


# --- combined score bands -----------------------------------------------------------------------


def test_high_overlap_with_rich_vocabulary_scores_in_the_same_domain_band():
    a, b = card("n1", words("w", 9)), card("n2", words("w", 9))  # 10 terms each, 9 shared
    assert jaccard(card_tokens(a), card_tokens(b)) == pytest.approx(9 / 11)

    expected = 0.7 + (9 / 11 - 0.6) * 0.5 + ((math.log2(10) - 2) / 4) * 0.2
    assert similarity(a, b) == pytest.approx(expected)


def test_vocabulary_richness_stops_adding_to_the_score_at_six_bits():
    # 70 terms each (6.1 bits), 60 shared: J = 0.75.
    a = card("n1", f"{words('s', 60)} {words('a', 9)}")
    b = card("n2", f"{words('s', 60)} {words('b', 9)}")
    assert jaccard(card_tokens(a), card_tokens(b)) == pytest.approx(0.75)

    assert similarity(a, b) == pytest.approx(0.7 + (0.75 - 0.6) * 0.5 + 0.2)


def test_a_score_above_one_is_clamped():
    # 71 terms each, 70 shared: 0.7 + 0.19 + 0.2 would exceed 1.
    a, b = card("n1", words("s", 70)), card("n2", words("s", 70))
    assert similarity(a, b) == 1.0


def test_high_overlap_of_a_tiny_vocabulary_is_penalised_as_common_words():
    a, b = card("aa", "bb cc"), card("bb", "aa")  # {aa, bb, cc} and {aa, bb}: J = 2/3, 1.3 bits
    assert similarity(a, b) == pytest.approx(0.3 + (2 / 3) * 0.2)


def test_high_overlap_at_two_to_three_bits_falls_through_to_the_weakest_band():
    a, b = card("t4", "t0 t1 t2 t3"), card("t0", "t1 t2 t3 t4")  # both {t0..t4}: J = 1, 2.3 bits
    assert similarity(a, b) == pytest.approx(0.3)


def test_moderate_overlap_with_rich_vocabulary_scores_as_related_concepts():
    # 10 terms each, 6 shared: J = 6/14, 3.3 bits.
    a = card("n1", f"{words('s', 6)} {words('a', 3)}")
    b = card("n2", f"{words('s', 6)} {words('b', 3)}")

    expected = 0.4 + (6 / 14) * 0.4 + (math.log2(10) / 10) * 0.2
    assert similarity(a, b) == pytest.approx(expected)


def test_overlap_below_the_moderate_band_scores_three_tenths_of_jaccard_even_when_rich():
    # 10 terms each, 4 shared: J = 0.25.
    a = card("n1", f"{words('s', 4)} {words('a', 5)}")
    b = card("n2", f"{words('s', 4)} {words('b', 5)}")
    assert similarity(a, b) == pytest.approx(0.25 * 0.3)


def test_low_overlap_with_similar_complexity_scores_half_of_jaccard():
    # 8 terms each (3 bits), 1 shared: J = 1/15.
    a = card("n1", f"s0 {words('a', 6)}")
    b = card("n2", f"s0 {words('b', 6)}")
    assert similarity(a, b) == pytest.approx((1 / 15) * 0.5)


def test_low_overlap_with_different_complexity_scores_three_tenths_of_jaccard():
    # 2 terms (1 bit) against 8 terms (3 bits), 1 shared: J = 1/9.
    a = card("n1", "s0")
    b = card("n2", f"s0 {words('b', 6)}")
    assert similarity(a, b) == pytest.approx((1 / 9) * 0.3)


def test_two_elements_without_any_terms_score_one_half_as_in_the_original():
    assert similarity(card("a", "!"), card("b", "?")) == pytest.approx(0.5)


def test_similarity_reads_name_description_text_and_tags_but_not_triggers():
    a = card("n1", description="alpha", tags=("beta",), triggers=("gamma",))
    assert card_tokens(a) == {"n1", "alpha", "beta"}


# --- find_similar ---------------------------------------------------------------------------------


def portfolio() -> tuple[ElementCard, list[ElementCard]]:
    target = card("target", words("w", 9))
    candidates = [
        target,
        card("near", words("w", 9)),  # J = 9/11: about 0.875
        card("related", f"{words('w', 6)} {words('x', 3)}"),  # J = 6/14: about 0.638
        card("unrelated", words("z", 9)),
        card("target", words("w", 9), element_type="persona"),  # same name, another type
    ]
    return target, candidates


def test_find_similar_lists_candidates_best_first_and_never_the_target_itself():
    target, candidates = portfolio()

    found = find_similar(target, candidates)

    assert [(f["element_type"], f["element_name"]) for f in found] == [
        ("persona", "target"),
        ("skill", "near"),
        ("skill", "related"),
    ]
    assert found[1]["score"] == round(similarity(target, candidates[1]), 3)
    assert found[2]["score"] == 0.638


def test_find_similar_reports_shared_terms_sorted_and_at_most_ten():
    target = card("target", words("s", 30))
    found = find_similar(target, [card("other", words("s", 30))])

    assert found[0]["shared_terms"] == sorted(f"s{i}" for i in range(30))[:10]


def test_find_similar_breaks_score_ties_by_name():
    target = card("target", words("w", 9))
    found = find_similar(target, [card("beta", words("w", 9)), card("alpha", words("w", 9))])

    assert [f["element_name"] for f in found] == ["alpha", "beta"]


def test_find_similar_keeps_scores_at_the_threshold_and_drops_those_below():
    target, other = card("t4", "t0 t1 t2 t3"), card("t0", "t1 t2 t3 t4")  # scores exactly 0.3

    assert [f["element_name"] for f in find_similar(target, [other], threshold=0.3)] == ["t0"]
    assert find_similar(target, [other], threshold=0.301) == []


def test_find_similar_applies_the_threshold_and_the_limit():
    target, candidates = portfolio()

    assert [f["element_name"] for f in find_similar(target, candidates, threshold=0.8)] == ["target", "near"]
    assert [f["element_name"] for f in find_similar(target, candidates, limit=1)] == ["target"]


# --- search_by_verb -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "verb"),
    [
        ("  DEBUG ", "debug"),
        ("debugging", "debug"),
        ("debugged", "debug"),
        ("debugs", "debug"),
        ("creating", "create"),
        ("created", "create"),
        ("fixes", "fix"),
        ("verifies", "verify"),
        ("running", "run"),
    ],
)
def test_an_inflected_verb_is_searched_in_its_base_form(asked, verb):
    assert search_by_verb(asked, [])["verb"] == verb


def test_a_word_is_stemmed_only_into_a_known_verb():
    assert search_by_verb("process", [])["verb"] == "process"


def test_an_inflected_verb_finds_an_element_triggered_by_its_base_form_outside_the_taxonomy():
    found = search_by_verb("translating", [card("polyglot", triggers=("translate",))])

    assert found["verb"] == "translate"
    assert found["category"] is None
    assert found["synonyms"] == []
    assert [r["element_name"] for r in found["results"]] == ["polyglot"]


def test_a_base_verb_finds_an_element_triggered_by_an_inflected_form():
    found = search_by_verb("translate", [card("polyglot", triggers=("translating",))])

    assert [r["element_name"] for r in found["results"]] == ["polyglot"]


def test_a_verb_matches_triggers_then_name_words_then_description_words():
    cards = [
        card("helper", triggers=("Debugging",)),
        card("debug-helper"),
        card("assistant", description="Helps when debugging flaky tests."),
        card("debug-both", triggers=("debug",)),
        card("debugger", description="A testimony of debuggers."),  # no word is the verb
    ]

    found = search_by_verb("debug", cards)["results"]

    assert [(r["element_name"], r["confidence"], r["matched_by"], r["via"]) for r in found] == [
        ("debug-both", 1.0, "trigger", "debug"),
        ("helper", 1.0, "trigger", "debug"),
        ("debug-helper", 0.9, "name", "debug"),
        ("assistant", 0.7, "description", "debug"),
    ]
    assert found[0]["element_type"] == "skill"


def test_synonyms_of_the_verbs_category_match_at_eight_tenths_confidence():
    cards = [
        card("mender", triggers=("fix",)),
        card("repair-kit"),
        card("tracer-bullet", description="Traces requests across services."),
    ]

    found = search_by_verb("debug", cards)

    assert found["category"] == "debugging"
    assert found["synonyms"] == list(VERB_TAXONOMY["debugging"][1:])
    assert [(r["element_name"], r["confidence"], r["matched_by"], r["via"]) for r in found["results"]] == [
        ("mender", 0.8, "trigger", "fix"),
        ("repair-kit", 0.72, "name", "repair"),
        ("tracer-bullet", 0.56, "description", "trace"),
    ]


def test_an_element_found_through_several_verbs_keeps_its_most_confident_match():
    cards = [
        card("both", triggers=("debug", "fix")),
        card("mostly-fix", description="Helps you debug.", triggers=("fix",)),
    ]

    found = {r["element_name"]: r for r in search_by_verb("debug", cards)["results"]}

    assert len(found) == 2
    assert (found["both"]["confidence"], found["both"]["via"]) == (1.0, "debug")
    assert (found["mostly-fix"]["confidence"], found["mostly-fix"]["via"]) == (0.8, "fix")


def test_matches_below_the_confidence_threshold_are_dropped():
    cards = [
        card("mender", triggers=("fix",)),
        card("repair-kit"),
        card("assistant", description="Helps you debug."),
    ]

    assert [r["element_name"] for r in search_by_verb("debug", cards, threshold=0.75)["results"]] == ["mender"]
    assert len(search_by_verb("debug", cards)["results"]) == 3


def test_each_verb_contributes_at_most_ten_elements():
    direct = [card(f"d{i:02}", triggers=("debug",)) for i in range(12)]
    via_fix = [card(f"f{i:02}", triggers=("fix",)) for i in range(12)]

    only_direct = search_by_verb("debug", direct)["results"]
    both = search_by_verb("debug", direct + via_fix)["results"]

    assert [r["element_name"] for r in only_direct] == [f"d{i:02}" for i in range(10)]
    assert len(both) == 20
    assert [r["via"] for r in both] == ["debug"] * 10 + ["fix"] * 10


def test_verb_results_are_truncated_to_the_limit():
    cards = [card(f"d{i}", triggers=("debug",)) for i in range(5)]

    assert [r["element_name"] for r in search_by_verb("debug", cards, limit=2)["results"]] == ["d0", "d1"]


@pytest.mark.parametrize("verb", ["", "   "])
def test_a_verb_is_required(verb):
    with pytest.raises(InvalidInput, match="verb is required"):
        search_by_verb(verb, [])


def test_every_taxonomy_verb_belongs_to_one_of_twelve_categories_only():
    verbs = [v for group in VERB_TAXONOMY.values() for v in group]

    assert len(VERB_TAXONOMY) == 12
    assert len(verbs) == len(set(verbs))


# --- relationships --------------------------------------------------------------------------------


def graph() -> list[ElementCard]:
    return [
        card("reviewer", element_type="agent", references=(("skill", "lint"), ("skill", "gone"), ("skill", "lint"))),
        card("report", element_type="template", references=(("skill", "lint"),)),
        card("squad", element_type="ensemble", references=(("skill", "lint"), ("persona", "mentor"))),
        card("lint", words("w", 9)),
        card("lint-strict", words("w", 9)),
        card("mentor", element_type="persona"),
    ]


def by_name(cards: list[ElementCard], name: str) -> ElementCard:
    return next(c for c in cards if c.name == name)


def refs(found: dict, kind: str) -> list[tuple[str, str]]:
    return [(r["element_type"], r["element_name"]) for r in found["relationships"][kind]]


def test_an_element_uses_what_it_references_once_each_in_order_even_if_missing():
    cards = graph()
    found = relationships(by_name(cards, "reviewer"), cards)

    assert (found["element_name"], found["element_type"]) == ("reviewer", "agent")
    assert refs(found, "uses") == [("skill", "lint"), ("skill", "gone")]
    assert refs(found, "contains") == []


def test_an_element_is_used_by_the_non_ensembles_that_reference_it():
    cards = graph()
    found = relationships(by_name(cards, "lint"), cards)

    assert refs(found, "used_by") == [("template", "report"), ("agent", "reviewer")]
    assert refs(found, "contained_by") == [("ensemble", "squad")]


def test_an_ensemble_contains_its_members_and_uses_nothing():
    cards = graph()
    found = relationships(by_name(cards, "squad"), cards)

    assert refs(found, "contains") == [("skill", "lint"), ("persona", "mentor")]
    assert refs(found, "uses") == []
    assert refs(relationships(by_name(cards, "mentor"), cards), "contained_by") == [("ensemble", "squad")]


def test_similar_elements_are_scored_and_reported_under_both_similarity_types():
    cards = graph()
    found = relationships(by_name(cards, "lint"), cards)

    expected = [{"element_name": "lint-strict", "element_type": "skill", "score": 0.875}]
    assert found["relationships"]["similar_to"] == expected
    assert found["relationships"]["semantic_similarity"] == expected


def test_similarity_relationships_honour_the_threshold():
    cards = graph()

    assert relationships(by_name(cards, "lint"), cards, threshold=0.9)["relationships"]["similar_to"] == []


def test_relationship_types_can_be_filtered():
    cards = graph()
    found = relationships(by_name(cards, "lint"), cards, types=["used_by", "uses"])

    assert list(found["relationships"]) == ["uses", "used_by"]
    assert list(relationships(by_name(cards, "lint"), cards)["relationships"]) == list(RELATIONSHIP_TYPES)


def test_an_unknown_relationship_type_is_refused_with_the_valid_ones():
    cards = graph()

    with pytest.raises(InvalidInput) as error:
        relationships(by_name(cards, "lint"), cards, types=["uses", "extends"])

    assert error.value.code == "unknown_relationship_type"
    assert "extends" in error.value.message
    assert all(t in error.value.message for t in RELATIONSHIP_TYPES)


# --- relationship_stats ---------------------------------------------------------------------------


def test_stats_count_elements_by_type():
    stats = relationship_stats(graph())

    assert stats["elements"] == 6
    assert stats["by_type"] == {"agent": 1, "ensemble": 1, "persona": 1, "skill": 2, "template": 1}


def test_stats_count_each_relationship_as_the_elements_report_it():
    cards = graph()

    stats = relationship_stats(cards)

    assert stats["relationships"] == {
        "similar_to": 2,  # lint ~ lint-strict, seen from each side
        "uses": 3,  # reviewer: lint, gone; report: lint
        "used_by": 2,  # gone does not exist to be used
        "contains": 2,
        "contained_by": 2,
        "semantic_similarity": 2,
    }
    for kind in RELATIONSHIP_TYPES:
        listed = sum(len(relationships(c, cards)["relationships"][kind]) for c in cards)
        assert stats["relationships"][kind] == listed, kind


def test_stats_count_elements_per_verb_category_of_their_triggers():
    cards = [
        card("a", triggers=("debugging", "fix")),
        card("b", triggers=("Tests",)),
        card("c", triggers=("debug", "translate")),
    ]

    verbs = relationship_stats(cards)["verbs"]

    assert list(verbs) == list(VERB_TAXONOMY)
    assert verbs["debugging"] == 2
    assert verbs["testing"] == 1
    assert sum(verbs.values()) == 3
