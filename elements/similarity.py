"""Element discovery: similar elements, elements for an action verb, and element relationships.

Pure functions over `ElementCard`, a light record the caller builds from its rows, so the
scoring can be tested without a database. Scoring follows the original's NLPScoringManager:
tokens are a set, so Shannon entropy over them is log2 of their count, and the combined score
reads Jaccard overlap together with vocabulary richness (see `_combined_score`).

Cost: `relationship_stats` compares every pair of cards and `relationships` / `find_similar`
compare the target with every card, so callers bound the number of cards they pass.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import combinations
from typing import Any, TypedDict

from core.errors import InvalidInput
from elements.types import ElementType


@dataclass(frozen=True)
class ElementCard:
    element_type: str
    name: str
    description: str
    text: str  # instructions + content
    tags: tuple[str, ...] = ()
    triggers: tuple[str, ...] = ()
    # (element_type, name) of elements this one names explicitly: an agent's `activates`,
    # an ensemble's members, a template's includes. The caller fills it.
    references: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.element_type, self.name)


class ElementRef(TypedDict):
    element_name: str
    element_type: str


class ScoredRef(ElementRef):
    score: float


class SimilarElement(ScoredRef):
    shared_terms: list[str]


class VerbMatch(ElementRef):
    confidence: float
    matched_by: str  # "trigger" | "name" | "description"
    via: str  # the verb that matched: the one asked for, or a synonym of it


# ---------------------------------------------------------------------------------------------
# Tokens and scores
# ---------------------------------------------------------------------------------------------

MIN_TOKEN_LENGTH = 2
MAX_SHARED_TERMS = 10

# Thresholds of the original's default configuration.
JACCARD_HIGH = 0.6
JACCARD_MODERATE = 0.4
JACCARD_LOW = 0.2
ENTROPY_LOW = 3.0  # below this a vocabulary is simple
ENTROPY_VERY_LOW = 2.0  # below this overlap is mostly common words

# `\w` is letters, digits and `_` in every script; `-` is kept so `code-review` stays one term.
_NOT_TOKEN_CHAR = re.compile(r"[^\w-]+")
_WORD = re.compile(r"[^\W_]+")


def tokens(text: str) -> frozenset[str]:
    """The distinct terms of a text: NFC, lowercase, split on anything but letters, digits, `_`, `-`."""
    normalised = unicodedata.normalize("NFC", text).lower()
    return frozenset(t for t in _NOT_TOKEN_CHAR.sub(" ", normalised).split() if len(t) >= MIN_TOKEN_LENGTH)


# Scores are worked out from counts (shared terms, terms of each side), so that
# `relationship_stats` can count shared terms without intersecting sets for every pair.


def _jaccard(shared: int, size_a: int, size_b: int) -> float:
    if not size_a and not size_b:
        return 1.0  # two empty texts are identical
    if not size_a or not size_b:
        return 0.0
    return shared / (size_a + size_b - shared)


def _entropy(size: int) -> float:
    return math.log2(size) if size else 0.0


def jaccard(a: AbstractSet[str], b: AbstractSet[str]) -> float:
    return _jaccard(len(a & b), len(a), len(b))


def entropy(terms: AbstractSet[str]) -> float:
    """Shannon entropy in bits. Every term of a set occurs once, so it is log2 of the count."""
    return _entropy(len(terms))


def _combined_score(shared: int, size_a: int, size_b: int) -> float:
    """The original's bands, checked in its order; the first that applies decides."""
    j = _jaccard(shared, size_a, size_b)
    h1, h2 = _entropy(size_a), _entropy(size_b)
    avg = (h1 + h2) / 2
    if j >= JACCARD_HIGH and avg >= ENTROPY_LOW:
        # Same domain: rises with overlap and with vocabulary richness (0 at 2 bits, full at 6).
        score = 0.7 + (j - 0.6) * 0.5 + min(1.0, (avg - 2.0) / 4.0) * 0.2
    elif j >= JACCARD_HIGH and avg < ENTROPY_VERY_LOW:
        # High overlap of a tiny vocabulary is mostly shared common words: penalised.
        score = 0.3 + j * 0.2
    elif j >= JACCARD_MODERATE and avg >= ENTROPY_LOW:
        score = 0.4 + j * 0.4 + (avg / 10) * 0.2
    elif j < JACCARD_LOW and abs(h1 - h2) < 1.0:
        score = j * 0.5
    else:
        # Also catches high overlap at 2-3 bits, which no band above claims (as in the original).
        score = j * 0.3
    return max(0.0, min(1.0, score))


def _score(a: AbstractSet[str], b: AbstractSet[str]) -> float:
    return _combined_score(len(a & b), len(a), len(b))


def card_tokens(card: ElementCard) -> frozenset[str]:
    return tokens(" ".join((card.name, card.description, card.text, *card.tags)))


def similarity(a: ElementCard, b: ElementCard) -> float:
    return _score(card_tokens(a), card_tokens(b))


def _similar_to(
    target: ElementCard, target_tokens: frozenset[str], candidates: Iterable[ElementCard], threshold: float
) -> Iterator[SimilarElement]:
    for card in candidates:
        if card.key == target.key:
            continue
        other = card_tokens(card)
        score = _score(target_tokens, other)
        if score >= threshold:
            yield SimilarElement(
                element_name=card.name,
                element_type=card.element_type,
                score=round(score, 3),
                shared_terms=sorted(target_tokens & other)[:MAX_SHARED_TERMS],
            )


def find_similar(
    target: ElementCard, candidates: Iterable[ElementCard], *, limit: int = 10, threshold: float = 0.5
) -> list[SimilarElement]:
    """Candidates scoring at least `threshold` against the target, best first; never the target."""
    found = _similar_to(target, card_tokens(target), candidates, threshold)
    # Sorted on the score as reported, so equal-looking scores list in name order.
    return sorted(found, key=lambda s: (-s["score"], s["element_name"], s["element_type"]))[: max(limit, 0)]


# ---------------------------------------------------------------------------------------------
# Verbs
# ---------------------------------------------------------------------------------------------

# The first verb of each category is its canonical one. A verb belongs to one category only,
# so a verb's category and synonyms are unambiguous.
VERB_TAXONOMY: dict[str, tuple[str, ...]] = {
    "debugging": ("debug", "fix", "troubleshoot", "diagnose", "trace", "repair", "resolve", "solve"),
    "creation": ("create", "write", "generate", "build", "make", "compose", "draft", "scaffold"),
    "explanation": ("explain", "teach", "clarify", "describe", "simplify", "summarize", "define", "elaborate"),
    "analysis": ("analyze", "analyse", "investigate", "examine", "inspect", "review", "assess", "evaluate"),
    "recall": ("recall", "remember", "retrieve", "find", "search", "lookup", "locate", "fetch"),
    "execution": ("execute", "run", "start", "launch", "invoke", "trigger", "activate", "deploy"),
    "testing": ("test", "verify", "validate", "check", "confirm", "assert", "prove"),
    "configuration": ("configure", "setup", "install", "initialize", "prepare", "customize", "provision"),
    "security": ("secure", "protect", "audit", "scan", "encrypt", "authenticate", "authorize", "sanitize"),
    "optimization": ("optimize", "improve", "enhance", "refactor", "streamline", "accelerate", "tune"),
    "documentation": ("document", "annotate", "comment", "record", "note", "log", "transcribe"),
    "collaboration": ("collaborate", "share", "sync", "merge", "integrate", "combine", "coordinate", "delegate"),
}

_CATEGORY_OF: dict[str, str] = {verb: category for category, verbs in VERB_TAXONOMY.items() for verb in verbs}
TAXONOMY_VERBS: frozenset[str] = frozenset(_CATEGORY_OF)

VERB_CONFIDENCE_THRESHOLD = 0.5
MAX_ELEMENTS_PER_VERB = 10
SYNONYM_FACTOR = 0.8
# How sure a direct match is, by where the verb was found: a trigger is the author's own claim.
_CONFIDENCE = {"trigger": 1.0, "name": 0.9, "description": 0.7}

_SUFFIXES = ("ing", "ed", "es", "s")


def _stem_candidates(stem: str) -> tuple[str, ...]:
    # Undo what English does to a base form before a suffix: dropped `e` (creating),
    # doubled consonant (debugging) and `y` → `i` (verifies).
    candidates = [stem, stem + "e"]
    if len(stem) >= 2 and stem[-1] == stem[-2]:
        candidates.append(stem[:-1])
    if stem.endswith("i"):
        candidates.append(stem[:-1] + "y")
    return tuple(candidates)


def base_form(word: str, vocabulary: AbstractSet[str] = TAXONOMY_VERBS) -> str:
    """The base verb of `debugging`, `created`, `fixes`: a suffix is stripped only when that yields
    a verb of `vocabulary`, so `process` does not become `proces`. Unknown words stay as they are."""
    word = unicodedata.normalize("NFC", word).strip().lower()
    if word in TAXONOMY_VERBS:
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix):
            for candidate in _stem_candidates(word[: -len(suffix)]):
                if candidate in vocabulary:
                    return candidate
    return word


@dataclass(frozen=True)
class _VerbForms:
    """A card's words in base form, worked out once per search rather than once per verb."""

    card: ElementCard
    triggers: frozenset[str]
    name: frozenset[str]
    description: frozenset[str]


def _verb_forms(card: ElementCard, vocabulary: AbstractSet[str]) -> _VerbForms:
    def words(text: str) -> frozenset[str]:
        normalised = unicodedata.normalize("NFC", text).lower()
        return frozenset(base_form(w, vocabulary) for w in _WORD.findall(normalised))

    return _VerbForms(
        card=card,
        triggers=frozenset(base_form(t, vocabulary) for t in card.triggers),
        name=words(card.name),
        description=words(card.description),
    )


def _direct_match(verb: str, forms: _VerbForms) -> str | None:
    if verb in forms.triggers:
        return "trigger"
    if verb in forms.name:
        return "name"
    if verb in forms.description:
        return "description"
    return None


def _matches_for(verb: str, factor: float, forms: list[_VerbForms], threshold: float) -> list[VerbMatch]:
    found: list[VerbMatch] = []
    for f in forms:
        where = _direct_match(verb, f)
        if where is None:
            continue
        confidence = round(_CONFIDENCE[where] * factor, 3)
        if confidence >= threshold:
            found.append(
                VerbMatch(
                    element_name=f.card.name,
                    element_type=f.card.element_type,
                    confidence=confidence,
                    matched_by=where,
                    via=verb,
                )
            )
    return _ranked(found)[:MAX_ELEMENTS_PER_VERB]


def _ranked(matches: Iterable[VerbMatch]) -> list[VerbMatch]:
    return sorted(matches, key=lambda m: (-m["confidence"], m["element_name"], m["element_type"]))


def search_by_verb(
    verb: str, cards: Iterable[ElementCard], *, limit: int = 20, threshold: float = VERB_CONFIDENCE_THRESHOLD
) -> dict[str, Any]:
    """Elements that handle an action verb, directly or through its taxonomy synonyms (confidence times 0.8).

    Each verb (the one asked for and each synonym) contributes at most 10 elements; an element
    found through several verbs keeps its most confident match.
    """
    if not verb.strip():
        raise InvalidInput("verb is required")
    pool = list(cards)
    # Besides the taxonomy, the portfolio's own triggers and the verb asked for are known
    # verbs, so `translating` finds an element triggered by `translate` and vice versa.
    vocabulary = TAXONOMY_VERBS | {base_form(t, frozenset()) for c in pool for t in c.triggers}
    vocabulary |= {base_form(verb, frozenset())}
    verb = base_form(verb, vocabulary)
    category = _CATEGORY_OF.get(verb)
    synonyms = [v for v in VERB_TAXONOMY[category] if v != verb] if category else []

    forms = [_verb_forms(card, vocabulary) for card in pool]
    best: dict[tuple[str, str], VerbMatch] = {}
    for via, factor in [(verb, 1.0)] + [(s, SYNONYM_FACTOR) for s in synonyms]:
        for match in _matches_for(via, factor, forms, threshold):
            key = (match["element_type"], match["element_name"])
            if key not in best or match["confidence"] > best[key]["confidence"]:
                best[key] = match
    return {
        "verb": verb,
        "category": category,
        "synonyms": synonyms,
        "results": _ranked(best.values())[: max(limit, 0)],
    }


# ---------------------------------------------------------------------------------------------
# Relationships
# ---------------------------------------------------------------------------------------------

# `semantic_similarity` is the name the original stores its scored similarity under, and
# `similar_to` the name its documentation uses; both report the same scored pairs here.
RELATIONSHIP_TYPES = ("similar_to", "uses", "used_by", "contains", "contained_by", "semantic_similarity")
_SCORED = ("similar_to", "semantic_similarity")


def _requested_types(types: Iterable[str] | None) -> tuple[str, ...]:
    wanted = list(types or ())
    unknown = [t for t in wanted if t not in RELATIONSHIP_TYPES]
    if unknown:
        raise InvalidInput(
            f"Unknown relationship type(s): {', '.join(unknown)}. Valid types: {', '.join(RELATIONSHIP_TYPES)}.",
            code="unknown_relationship_type",
        )
    # No filter (or an empty one) means every type; the answer lists them in a stable order.
    return tuple(t for t in RELATIONSHIP_TYPES if not wanted or t in wanted)


def _is_ensemble(card: ElementCard) -> bool:
    return card.element_type == ElementType.ENSEMBLE


def _outgoing(card: ElementCard) -> tuple[tuple[str, str], ...]:
    """The card's references without repeats, in the author's order."""
    return tuple(dict.fromkeys(card.references))


def _ref(key: tuple[str, str]) -> ElementRef:
    return ElementRef(element_name=key[1], element_type=key[0])


def _referrers(target: ElementCard, cards: list[ElementCard], *, ensembles: bool) -> list[ElementRef]:
    found = {c.key for c in cards if _is_ensemble(c) == ensembles and target.key in c.references}
    return [_ref(key) for key in sorted(found, key=lambda k: (k[1], k[0]))]


def relationships(
    target: ElementCard,
    cards: Iterable[ElementCard],
    *,
    types: Iterable[str] | None = None,
    threshold: float = 0.5,
) -> dict[str, Any]:
    """The target's relationships by type.

    An ensemble's references are its members, so they are `contains` (and `contained_by` on
    the member); every other element's references are `uses` / `used_by`. References may name
    elements that no longer exist; `uses` and `contains` still list them so the gap shows.
    """
    requested = _requested_types(types)
    pool = list(cards)
    outgoing = [_ref(key) for key in _outgoing(target)]
    found: dict[str, list[ElementRef]] = {
        "uses": [] if _is_ensemble(target) else outgoing,
        "contains": outgoing if _is_ensemble(target) else [],
    }
    if "used_by" in requested:
        found["used_by"] = _referrers(target, pool, ensembles=False)
    if "contained_by" in requested:
        found["contained_by"] = _referrers(target, pool, ensembles=True)
    if any(t in requested for t in _SCORED):
        similar = find_similar(target, pool, limit=len(pool), threshold=threshold)
        for scored_type in _SCORED:
            found[scored_type] = [
                ScoredRef(element_name=s["element_name"], element_type=s["element_type"], score=s["score"])
                for s in similar
            ]
    return {
        "element_name": target.name,
        "element_type": target.element_type,
        "relationships": {t: found[t] for t in requested},
    }


def _term_masks(token_sets: list[frozenset[str]]) -> list[int]:
    """Each set as a bit mask over all their terms: shared terms of a pair are then one AND
    and a bit count, dozens of times faster than intersecting long sets."""
    bit_of = {term: i for i, term in enumerate(frozenset().union(*token_sets))}
    masks = []
    for terms in token_sets:
        buffer = bytearray((len(bit_of) + 7) // 8)
        for bit in map(bit_of.__getitem__, terms):
            buffer[bit >> 3] |= 1 << (bit & 7)
        masks.append(int.from_bytes(buffer, "little"))
    return masks


def _similar_pairs(cards: list[ElementCard], threshold: float) -> int:
    # The score is symmetric, so each unordered pair is scored once.
    token_sets = [card_tokens(c) for c in cards]
    sized = list(zip(_term_masks(token_sets), map(len, token_sets), strict=True))
    return sum(
        1
        for (mask_a, size_a), (mask_b, size_b) in combinations(sized, 2)
        if _combined_score((mask_a & mask_b).bit_count(), size_a, size_b) >= threshold
    )


def relationship_stats(cards: Iterable[ElementCard], *, threshold: float = 0.5) -> dict[str, Any]:
    """Totals over a portfolio. Each relationship count is the sum, over all elements, of what
    `relationships` lists for that type, so a similar pair counts once from each side."""
    pool = list(cards)
    uses, used_by = _reference_counts(pool, ensembles=False)
    contains, contained_by = _reference_counts(pool, ensembles=True)
    similar = 2 * _similar_pairs(pool, threshold)
    return {
        "elements": len(pool),
        "by_type": dict(sorted(Counter(c.element_type for c in pool).items())),
        "relationships": {
            "similar_to": similar,
            "uses": uses,
            "used_by": used_by,
            "contains": contains,
            "contained_by": contained_by,
            "semantic_similarity": similar,
        },
        "verbs": _verb_categories(pool),
    }


def _reference_counts(cards: list[ElementCard], *, ensembles: bool) -> tuple[int, int]:
    """References made by (non-)ensembles, and how many of them name an element that exists:
    the referrer's side lists them all, the referenced side only exists for the latter."""
    existing = {c.key for c in cards}
    refs = [ref for c in cards if _is_ensemble(c) == ensembles for ref in _outgoing(c)]
    return len(refs), sum(1 for ref in refs if ref in existing)


def _verb_categories(cards: list[ElementCard]) -> dict[str, int]:
    """How many elements have a trigger in each taxonomy category."""
    counts = dict.fromkeys(VERB_TAXONOMY, 0)
    for card in cards:
        for category in {_CATEGORY_OF[v] for v in map(base_form, card.triggers) if v in _CATEGORY_OF}:
            counts[category] += 1
    return counts
