"""search_elements against a plain Python reading of its contract, over a seeded random portfolio:
an element is found when every term starts a word of its text (name, description, instructions,
content) or of one of its memory entries; name matches (every term within the name) come first,
then, on SQLite, the rest by name; the total counts every match; pages follow one another; another
user's elements never appear."""

import random
import re

import pytest
from django.db import connection

from core.caller import Caller
from elements import selectors, services
from elements.models import Element
from elements.types import ElementType

VOCABULARY = ["kettle", "kestrel", "ketchup", "review", "reviewer", "rust", "rusty", "sql", "tuning", "tune",
              "alpha", "alphabet", "zeta", "notes", "note"]
QUERIES = ["ke", "kettle", "rev", "review", "rust tun", "al zeta", "notes", "note", "sql", "tu", "ketchup rusty",
           "alpha", "z", "nothing"]


def words(text: str) -> list[str]:
    return [w for w in re.split(r"[\W_]+", text.lower()) if w]


def has_terms(text: str, terms: list[str]) -> bool:
    found = words(text)
    return all(any(w.startswith(t) for w in found) for t in terms)


def phrase(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(n))


@pytest.fixture
def portfolio(alice, bob):
    rng = random.Random(7)
    caller = Caller.trusted(alice.user, via="api")
    entries: dict[str, list[str]] = {}
    for index in range(40):
        element_type = rng.choice([ElementType.SKILL, ElementType.PERSONA, ElementType.TEMPLATE])
        name = f"{rng.choice(VOCABULARY)}-{index}"
        params = {"description": phrase(rng, 3), "content": phrase(rng, 6)} if element_type != ElementType.PERSONA \
            else {"description": phrase(rng, 3), "instructions": phrase(rng, 6)}
        services.element_create(caller=caller, element_type=element_type, name=name, params=params)
    for index in range(4):
        memory = services.element_create(caller=caller, element_type=ElementType.MEMORY, name=f"memo-{index}",
                                         params={"description": "Notes kept."})
        entries[memory.name] = [phrase(rng, 4) for _ in range(3)]
        for text in entries[memory.name]:
            services.memory_entry_add(caller=caller, memory=memory, content=text)
    services.element_create(caller=Caller.trusted(bob.user, via="api"), element_type=ElementType.SKILL,
                            name="kettle-bob", params={"description": "kettle", "content": "kettle"})
    return caller, entries


def expected(caller: Caller, entries: dict[str, list[str]], query: str, element_type: ElementType | None):
    terms = words(query)
    found = []
    for element in Element.objects.filter(owner=caller.user):
        if element_type is not None and element.element_type != element_type:
            continue
        text = " ".join([element.name, element.description, element.instructions, element.content])
        if has_terms(text, terms) or any(has_terms(entry, terms) for entry in entries.get(element.name, [])):
            found.append(element)
    return found


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("element_type", [None, ElementType.SKILL, ElementType.MEMORY])
def test_search_finds_what_its_contract_says_in_its_order(portfolio, query, element_type):
    caller, entries = portfolio
    reference = expected(caller, entries, query, element_type)
    terms = words(query)

    pages, total = [], None
    for page in range(1, 9):
        found, count = selectors.element_search(caller=caller, text=query, element_type=element_type, page=page,
                                                page_size=7)
        pages += found
        total = count if total is None else total
        assert count == total
    shown = [element for element, _ in pages]

    assert total == len(reference)
    assert sorted(e.pk for e in shown) == sorted(e.pk for e in reference)
    hits = [all(t in e.name.lower() for t in terms) for e in shown]
    assert hits == sorted(hits, reverse=True)  # name matches first
    if connection.vendor == "sqlite":
        assert shown == sorted(shown, key=lambda e: (not all(t in e.name.lower() for t in terms), e.name, e.pk))
    for element, matched in pages:
        assert ("entries" in matched) == any(has_terms(x, terms) for x in entries.get(element.name, []))


def test_the_portfolio_has_each_kind_of_match(portfolio):
    """So that the cases above check name matches, text matches and entry matches alike."""
    caller, _ = portfolio
    kinds = set()
    for query in QUERIES:
        for _, matched in selectors.element_search(caller=caller, text=query, page_size=100)[0]:
            kinds.update(matched)

    assert kinds == {"name", "description", "content", "entries"}
