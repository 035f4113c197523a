"""Ranked search over the docs' sections: BM25F over three fields (page title, heading, the
section's own text), with each query word also matching vocabulary words it is a prefix of, or
one or two edits away from (a typo), at a discount.

The corpus is a few hundred sections, so the index lives in memory, is built from the database,
and is rebuilt whenever a page changes (its key is the pages' count and newest update). Every
database gets the same ranking from the same code.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.db import connection
from django.db.models import Count, Max

from docs_kb.models import DocPage, DocSection

WORD = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")
# Words that say nothing about which section answers: a common English list plus the way questions are
# phrased ("what does it look like", "is it possible"), checked before stemming.
_STOPWORDS = """a about above after again all also am an and any are as at be because been before being below between
both but by can could did do does doing down during each either else ever every few for from further get gets got
had has have having he her here hers him his how however i if in into is it its itself just me more most much my
myself no nor now of off on once only or other our ours out over own please same she should so some such than that
the their theirs them themselves then there these they this those through to too under until up upon us very was way
we were what when where whether which while who whom whose why will with within without would yes yet you your yours
able anything exactly kind know like look looks need possible something sort tell thing things want"""
STOPWORDS = frozenset(_STOPWORDS.split())
# Field weights: a word in the page title or the heading says more than one in the body.
WEIGHTS = {"title": 2.5, "heading": 3.0, "context": 1.5, "body": 1.0}
K1, B = 1.2, 0.75
# A section titled with a query word is usually the answer, however long its neighbours run on
# about it: a heading match adds this many idfs on top of BM25F, which saturates.
HEADING_BONUS = 1.5
COORDINATION = 0.5
# Two of the question's words side by side in a section ("rest api", "mcp session") count extra.
PAIR_BONUS = 1.0
PREFIX_FACTOR, TYPO_FACTOR = 0.7, 0.55
MIN_PREFIX = 3
# In at most this many sections, a word may still be someone's misspelling of another.
RARE = 2


def stem(word: str) -> str:
    """A light English stemmer: plurals, -ing and -ed, and a final e, so that "workflows" finds
    "workflow", "cancelling" finds "cancel" and "renaming" finds "rename"."""
    root = word
    for suffix, keep in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", "e"), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            root = word[: -len(suffix)] + keep
            if suffix in ("ing", "ed") and len(root) >= 4 and root[-1] == root[-2] and root[-1] not in "aeiouls":
                root = root[:-1]  # stopped -> stop, running -> run
            elif suffix in ("ing", "ed") and root.endswith("ll") and len(root) >= 5:
                root = root[:-1]  # cancelling -> cancel
            break
    # rename and renaming, delete and deleted meet at renam and delet.
    return root[:-1] if root.endswith("e") and len(root) > 4 else root


def words(text: str) -> list[str]:
    """Lowercased words; snake_case names also count as their parts (list_workflows: list, workflow)."""
    found = []
    for token in WORD.findall(text.lower()):
        found.append(stem(token))
        if "_" in token:
            found.extend(stem(part) for part in token.split("_") if part)
    return found


def query_words(text: str) -> list[str]:
    """The words of a question worth looking for: stop words and single letters (the s of "token's") out."""
    kept = " ".join(token for token in WORD.findall(text.lower()) if token not in STOPWORDS and len(token) > 1)
    return list(dict.fromkeys(words(kept)))


def edit_distance(a: str, b: str, limit: int) -> int:
    """Damerau-Levenshtein (adjacent swaps count once), giving up past `limit`."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        if min(current) > limit:
            return limit + 1
        previous2, previous = previous, current
    return previous[-1]


@dataclass
class Entry:
    section_id: int
    slug: str
    title: str
    heading_id: str | None
    heading_text: str | None
    level: int
    position: int
    markdown: str
    own_markdown: str
    text: str
    fields: dict[str, Counter] = field(default_factory=dict)
    lengths: dict[str, int] = field(default_factory=dict)
    pairs: set[tuple[str, str]] = field(default_factory=set)


@dataclass
class Index:
    key: tuple
    entries: list[Entry]
    document_frequency: Counter
    average_length: dict[str, float]
    vocabulary: set[str]
    # Term -> the positions of the entries that hold it.
    postings: dict[str, list[int]] = field(default_factory=dict)
    # The vocabulary sorted (prefixes are a bisect away) and by length (a typo changes it by one or two).
    ordered: list[str] = field(default_factory=list)
    by_length: dict[int, list[str]] = field(default_factory=dict)
    expanded: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for position, entry in enumerate(self.entries):
            for term in set().union(*(set(counts) for counts in entry.fields.values())):
                self.postings.setdefault(term, []).append(position)
        self.ordered = sorted(self.vocabulary)
        for term in self.ordered:
            self.by_length.setdefault(len(term), []).append(term)

    def expansions(self, word: str) -> dict[str, float]:
        """Vocabulary words a query word stands for, with how much a match on each counts (kept for
        as long as the index lives: the vocabulary does not change under it)."""
        if word not in self.expanded:
            self.expanded[word] = self._expand(word)
        return self.expanded[word]

    def _expand(self, word: str) -> dict[str, float]:
        found = {word: 1.0} if word in self.vocabulary else {}
        if len(word) >= MIN_PREFIX:
            for term in self.ordered[bisect.bisect_right(self.ordered, word):]:
                if not term.startswith(word):
                    break
                found.setdefault(term, PREFIX_FACTOR)
        # Only a word the docs never (or hardly ever) use may be a typo. Short words are one edit from
        # too many others ("wplk" from "walk") to call that a typo.
        if self.document_frequency[word] <= RARE and len(word) >= 5:
            limit = 1 if len(word) < 9 else 2
            for length in range(len(word) - limit, len(word) + limit + 1):
                for term in self.by_length.get(length, ()):
                    if term not in found and edit_distance(word, term, limit) <= limit:
                        found[term] = TYPO_FACTOR
        return found

    def idf(self, term: str) -> float:
        n, df = len(self.entries), self.document_frequency[term]
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def term_score(self, entry: Entry, term: str, idf_cap: float | None = None) -> float:
        weighted = 0.0
        for name, weight in WEIGHTS.items():
            tf = entry.fields[name][term]
            if tf:
                norm = 1 - B + B * entry.lengths[name] / (self.average_length[name] or 1)
                weighted += weight * tf / norm
        if not weighted:
            return 0.0
        bonus = HEADING_BONUS if entry.fields["heading"][term] else 0.0
        idf = self.idf(term) if idf_cap is None else min(self.idf(term), idf_cap)
        return idf * (weighted * (K1 + 1) / (weighted + K1) + bonus)


_lock = threading.Lock()
_index: Index | None = None


def _key() -> tuple:
    stats = DocPage.objects.aggregate(count=Count("id"), newest=Max("updated"))
    return stats["count"], stats["newest"]


def index() -> Index:
    """The index for the docs as they are now, built again only when a page changed."""
    global _index
    key = _key()
    with _lock:
        if _index is not None and _index.key == key:
            return _index
        entries = []
        # The headings a section sits under (its H2 for an H3, say) tell what it is about, too.
        parents: list[tuple[int, str]] = []
        for section in DocSection.objects.select_related("page").order_by("page__slug", "position"):
            entry = Entry(section.pk, section.page.slug, section.page.title, section.heading_id or None,
                          section.heading_text or None, section.level, section.position, section.markdown,
                          section.own_markdown, section.text)
            if section.position == 0:
                parents = []
            parents = [(level, text) for level, text in parents if level < section.level]
            # A page's lede sits under its H1, the page title: that is the lede's heading.
            heading = section.heading_text or section.page.title
            body = section.text[len(heading):] if section.text.startswith(heading) else section.text
            entry.fields = {"title": Counter(words(section.page.title)), "heading": Counter(words(heading)),
                            "context": Counter(words(" ".join(text for _, text in parents))),
                            "body": Counter(words(body))}
            entry.lengths = {name: sum(counts.values()) for name, counts in entry.fields.items()}
            sequence = words(f"{heading} {body}")
            entry.pairs = set(itertools.pairwise(sequence))
            entries.append(entry)
            if section.heading_text:
                parents.append((section.level, section.heading_text))
        document_frequency: Counter = Counter()
        for entry in entries:
            document_frequency.update(set().union(*(set(c) for c in entry.fields.values())))
        average = {name: (sum(e.lengths[name] for e in entries) / len(entries) if entries else 0.0)
                   for name in WEIGHTS}
        _index = Index(key, entries, document_frequency, average, set(document_frequency))
        return _index


@dataclass(frozen=True)
class Hit:
    entry: Entry
    score: float
    matched: tuple[str, ...]


def _tsquery_words(text: str) -> list[str]:
    return [part for token in WORD.findall(text.lower()) for part in token.split("_")
            if part and part not in STOPWORDS]


def postgres_candidates(text: str, built: Index) -> set[int]:
    """The sections PostgreSQL's full-text index matches: every query word as a prefix, or as one of
    the docs' words it is a likely typo of (pg_trgm's similarity over the vocabulary)."""
    query_words = list(dict.fromkeys(_tsquery_words(text)))
    if not query_words:
        return set()
    options: dict[str, set[str]] = {word: {f"{word}:*"} for word in query_words}
    # Only words the docs hardly use may be typos, as in the portable search.
    unsure = [word for word in query_words if len(word) >= 5 and built.document_frequency[stem(word)] <= RARE]
    with connection.cursor() as cursor:
        if unsure:
            # One round trip for every unsure word's likely spellings.
            cursor.execute(
                "SELECT w.word, t.term FROM unnest(%s::text[]) AS w(word) CROSS JOIN LATERAL ("
                "SELECT term FROM docs_kb_docterm WHERE term %% w.word ORDER BY similarity(term, w.word) DESC "
                "LIMIT 3) AS t", [unsure])
            for word, term in cursor.fetchall():
                if "_" not in term:
                    options[word].add(term)
        tsquery = " | ".join("(" + " | ".join(sorted(alternatives)) + ")" for alternatives in options.values())
        cursor.execute("SELECT id FROM docs_kb_docsection WHERE search_vector @@ to_tsquery('english', %s)",
                       [tsquery])
        return {row[0] for row in cursor.fetchall()}


def rank(text: str) -> list[Hit]:
    """Sections by relevance to `text`; each query word counts once, by its best expansion.

    On PostgreSQL the full-text and trigram indexes pick the sections that match at all; on every
    database the same BM25F ranking orders them, so both answer alike."""
    built = index()
    query = query_words(text)
    if not query or not built.entries:
        return []
    candidates = postgres_candidates(text, built) if connection.vendor == "postgresql" else None
    # A longer word a query word expands to counts no more than the word itself would: else a rare
    # compound (runs_bench for "run") outranks the word that was asked for.
    expanded = [(built.expansions(word), built.idf(word) if word in built.vocabulary else None) for word in query]
    scores: dict[int, float] = defaultdict(float)
    matched: dict[int, set[str]] = defaultdict(set)
    for options, cap in expanded:
        # Only the sections holding one of the word's expansions can score for it.
        best: dict[int, tuple[float, str]] = {}
        for term, factor in options.items():
            for position in built.postings.get(term, ()):
                entry = built.entries[position]
                if candidates is not None and entry.section_id not in candidates:
                    continue
                score = factor * built.term_score(entry, term, None if factor == 1.0 else cap)
                if score > best.get(position, (0.0, ""))[0]:
                    best[position] = (score, term)
        for position, (score, term) in best.items():
            scores[position] += score
            matched[position].add(term)
    pairs = list(itertools.pairwise(query))
    for position in scores:
        entry = built.entries[position]
        for first, second in pairs:
            if (first, second) in entry.pairs:
                scores[position] += PAIR_BONUS * (built.idf(first) + built.idf(second)) / 2
    # Lucene's old coordination factor: a section that matches more of the question's words is the
    # likelier answer than one that matches a single word many times.
    for position in scores:
        scores[position] *= (len(matched[position]) / len(expanded)) ** COORDINATION
    ranked = sorted(scores, key=lambda p: (-scores[p], p))
    return [Hit(built.entries[p], scores[p], tuple(sorted(matched[p]))) for p in ranked if scores[p] > 0]


def snippet(text: str, terms: tuple[str, ...], radius: int = 80) -> str:
    """Up to `radius` characters either side of the first place a matched word starts."""
    lowered = text.lower()
    starts = [m.start() for term in terms for m in [re.search(r"\b" + re.escape(term[:max(3, len(term) - 1)]),
                                                              lowered)] if m]
    at = min(starts) if starts else 0
    begin, end = max(0, at - radius), min(len(text), at + radius)
    return ("…" if begin else "") + text[begin:end].strip() + ("…" if end < len(text) else "")
