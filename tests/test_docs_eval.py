"""The knowledge base answers real questions: for a fixed set of questions written against the docs,
the section that answers each must be among ask_docs' first three sections (whole, or inside a
returned parent section) for at least 90% of them."""

from pathlib import Path

import pytest

import safeyaml
from docs_kb.models import DocSection
from docs_kb.selectors import docs_ask

EVAL = safeyaml.load((Path(__file__).parent / "fixtures" / "docs_eval.yaml").read_text(),
                      schema=safeyaml.CORE, bounds=safeyaml.Bounds())
TARGET = 0.9


def answered(question: dict) -> bool:
    expected = DocSection.objects.get(page__slug=question["slug"], heading_id=question["headingId"] or "")
    top = docs_ask(question=question["question"], max_sections=3, max_chars=20000)["sections"]
    return any(s["slug"] == question["slug"] and expected.markdown in s["text"] for s in top)


def test_the_evaluation_set_is_large_and_points_at_real_sections(kb):
    assert len(EVAL) >= 30
    for question in EVAL:
        where = {"page__slug": question["slug"], "heading_id": question["headingId"] or ""}
        assert DocSection.objects.filter(**where).exists(), question


@pytest.mark.usefixtures("kb")
def test_the_answering_section_is_in_the_top_three_for_nine_questions_in_ten():
    missed = [q["question"] for q in EVAL if not answered(q)]
    score = 1 - len(missed) / len(EVAL)
    assert score >= TARGET, f"{score:.0%} answered; missed: {missed}"
