"""Capability search: the index of integrations, actions and skills (one Capability row each) and
capabilities_search over it, by keyword, by meaning, or both fused.

Keyword search uses element search's machinery: an FTS5 table ranked by bm25 on SQLite
(integrations.search_index), a GIN-indexed tsvector ranked by ts_rank_cd on PostgreSQL (migration
0002). The query's operators (`word*`, `-word`, `"a phrase"`, `a | b`) are parsed here into terms
that are each quoted for the database, so no user text is ever read as full-text syntax.

Semantic search embeds the query (integrations.embeddings) and scans a per-process matrix of every
row's stored vector; the matrix is reloaded when the table's row count or newest update changes.
Hybrid fuses the two rankings by reciprocal rank.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from core.caller import Caller
from core.errors import InvalidInput
from integrations import embeddings
from integrations.models import Action, Capability, Connection, Integration, Skill

WORD = re.compile(r"[^\W_]+")
CAMEL_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
# One operator or term of a query: |, or an optional - and then a "phrase" (its closing quote may be
# missing, a * after it makes its last word a prefix) or a bare word.
TOKEN = re.compile(r'(\|)|(-?)(?:"([^"]*)"?(\*?)|([^\s"|]+))')
MODES = ("keyword", "semantic", "hybrid")
TYPES = tuple(Capability.Type.values)
MAX_QUERY_CHARS = 500
MAX_TERMS = 32
MAX_LIMIT = 50
# How deep each ranking goes before hybrid fuses them, and the fusion's constant (Cormack et al.).
FUSION_DEPTH = 50
RRF_K = 60
# bm25's weight for a word in the name against one in the rest of the document. On PostgreSQL the
# name's lexemes carry weight A (1.0) and the document's D (0.1).
NAME_WEIGHT = 4.0
# Fields of a Capability that index_refresh derives; a row whose values all match is left alone.
DERIVED = ("name", "description", "integration_id", "category", "owner_id", "document", "document_hash")


def name_words(name: str) -> list[str]:
    """A name's words as the full-text indexes split it (at _ and .), then the words of any
    camelCase part (listRepos: list, repos) so that they are found too."""
    parts = WORD.findall(name)
    pieces = [piece for part in parts if len(split := CAMEL_PART.findall(part)) > 1 for piece in split]
    return [word.lower() for word in parts + pieces]


def document_of(*texts: str) -> str:
    """Lower-case words separated by single spaces: what both databases' full-text indexes split
    alike, and what an exclusion is checked against."""
    return " ".join(WORD.findall(" ".join(texts).lower()))


# The index.


def _row(type_: str, name: str, description: str, *, integration: Integration | None, texts: Iterable[str],
         owner_id: int | None = None, action: Action | None = None, skill: Skill | None = None) -> Capability:
    document = document_of(" ".join(name_words(name)), *texts)
    return Capability(type=type_, name=name, description=description, integration=integration,
                      category=integration.category if integration else "", owner_id=owner_id, action=action,
                      skill=skill, document=document, document_hash=hashlib.sha256(document.encode()).hexdigest())


def _integration_rows(integrations: list[Integration]) -> Iterator[Capability]:
    actions: dict[str, list[Action]] = defaultdict(list)
    for action in Action.objects.filter(integration__in=integrations).only("id", "name", "description",
                                                                             "integration_id"):
        actions[action.integration_id].append(action)
    for integration in integrations:
        # Its agent instructions (how to name things, connect, read errors) stay out: they were most of
        # an integration's text, so they outweighed what it does, and a bare "slack" ranked Slack's
        # actions above Slack. The word "integration" is in, for "the github integration".
        yield _row(Capability.Type.INTEGRATION, integration.pk, integration.description, integration=integration,
                   texts=("integration", integration.name, integration.description))
        for action in actions[integration.pk]:
            yield _row(Capability.Type.ACTION, f"{integration.pk}.{action.name}", action.description,
                       integration=integration, action=action,
                       texts=(action.description, integration.name, integration.description))


def _skill_rows(skills: list[Skill]) -> Iterator[Capability]:
    used: dict[int, list[Integration]] = defaultdict(list)
    links = Skill.integrations.through.objects.filter(skill__in=skills).select_related("integration")
    for link in links.order_by("integration_id"):
        used[link.skill_id].append(link.integration)
    for skill in skills:
        integrations = used[skill.pk]
        yield _row(Capability.Type.SKILL, skill.name, skill.description,
                   integration=integrations[0] if integrations else None, owner_id=skill.owner_id, skill=skill,
                   texts=(skill.description, *(integration.name for integration in integrations)))


def _identity(row: Capability) -> tuple[str, object]:
    if row.type == Capability.Type.ACTION:
        return row.type, row.action_id
    if row.type == Capability.Type.SKILL:
        return row.type, row.skill_id
    return row.type, row.integration_id


@transaction.atomic
def index_refresh(*, integrations: Iterable[Integration] = (), skills: Iterable[Skill] = ()) -> None:
    """Make the index rows of these integrations (each with its actions) and these skills match them:
    rows are created, changed or deleted (an action gone from an integration), and a row's vector is
    computed again only when its document changed, all in one batch. Rows of integrations, actions
    and skills deleted from the database go with them (their foreign keys cascade); rows of anything
    not passed are left as they are."""
    integrations, skills = list(integrations), list(skills)
    wanted = [*_integration_rows(integrations), *_skill_rows(skills)]
    existing: dict[tuple[str, object], Capability] = {}
    stale: list[int] = []
    # An action moved to another integration is found by either one, so it is never indexed twice.
    given = (Q(type__in=[Capability.Type.INTEGRATION, Capability.Type.ACTION], integration__in=integrations)
             | Q(action__integration__in=integrations) | Q(skill__in=skills))
    for row in Capability.objects.filter(given).order_by("pk"):
        if _identity(row) in existing:
            stale.append(row.pk)
        else:
            existing[_identity(row)] = row
    create, update, unembedded = [], [], []
    for row in wanted:
        old = existing.pop(_identity(row), None)
        if old is None:
            create.append(row)
            unembedded.append(row)
            continue
        row.pk = old.pk
        reuse = old.document_hash == row.document_hash and old.embedding is not None
        if reuse:
            row.embedding = old.embedding
        else:
            unembedded.append(row)
        if not reuse or any(getattr(old, field) != getattr(row, field) for field in DERIVED):
            update.append(row)
    stale.extend(row.pk for row in existing.values())
    for row, vector in zip(unembedded, embeddings.embed([row.document for row in unembedded]), strict=True):
        row.embedding = embeddings.to_bytes(vector)
    now = timezone.now()
    for row in update:
        row.updated_at = now  # bulk_update does not apply auto_now, and the vector cache keys on it
    Capability.objects.filter(pk__in=stale).delete()
    Capability.objects.bulk_create(create, batch_size=500)
    Capability.objects.bulk_update(update, [*DERIVED, "embedding", "updated_at"], batch_size=500)


# Queries.


@dataclass(frozen=True)
class Term:
    """A word, or a phrase of words in a row; with `prefix`, the last word may be longer."""

    words: tuple[str, ...]
    prefix: bool = False

    def fts5(self) -> str:
        return '"' + " ".join(self.words) + '"' + ("*" if self.prefix else "")

    def tsquery(self) -> str:
        lexemes = [f"'{word}'" for word in self.words]
        if self.prefix:
            lexemes[-1] += ":*"
        return "(" + " <-> ".join(lexemes) + ")"

    def found_in(self, document: str) -> bool:
        return f" {' '.join(self.words)}{'' if self.prefix else ' '}" in f" {document} "


@dataclass(frozen=True)
class Query:
    """Groups that must all match, each any one of its terms; and terms that must not match."""

    groups: tuple[tuple[Term, ...], ...]
    excluded: tuple[Term, ...]

    def fts5(self) -> str:
        included = " AND ".join("(" + " OR ".join(term.fts5() for term in group) + ")" for group in self.groups)
        return f"({included})" + "".join(f" NOT {term.fts5()}" for term in self.excluded)

    def tsquery(self) -> str:
        parts = ["(" + " | ".join(term.tsquery() for term in group) + ")" for group in self.groups]
        return " & ".join(parts + [f"!{term.tsquery()}" for term in self.excluded])

    def plain(self) -> str:
        """The wanted words without operators: what semantic search embeds."""
        return " ".join(word for group in self.groups for term in group for word in term.words)


def query_parse(text: str) -> Query:
    """`word*` is a prefix, `-word` and `-"a phrase"` exclude, `"a phrase"` is words in a row, and
    `a | b` is either; other terms must all match. A `|` beside an exclusion is ignored. A bare word
    of several parts (github_tools.create_issue) is the phrase of its words, as the index splits it."""
    text = text.strip()
    if len(text) < 2:
        raise InvalidInput("query must be at least 2 characters.", code="query_required")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidInput(f"query must be at most {MAX_QUERY_CHARS} characters.")
    groups: list[list[Term]] = []
    excluded: list[Term] = []
    after_included = either = False
    count = 0
    for bar, minus, phrase, star, bare in TOKEN.findall(text):
        if bar:
            either = after_included
            continue
        source = phrase if bare == "" else bare
        words = tuple(WORD.findall(source.lower()))
        if not words:
            continue
        count += 1
        if count > MAX_TERMS:
            raise InvalidInput(f"query may have at most {MAX_TERMS} terms.", code="too_many_terms")
        term = Term(words, prefix=bool(star) or bare.endswith("*"))
        if minus:
            excluded.append(term)
            after_included = either = False
        elif either:
            groups[-1].append(term)
            either = False
        else:
            groups.append([term])
            after_included = True
    if not groups:
        raise InvalidInput("query needs at least one word to look for; exclusions alone match nothing.",
                           code="query_required")
    return Query(tuple(tuple(group) for group in groups), tuple(excluded))


@dataclass(frozen=True)
class Filters:
    user_id: int
    types: tuple[str, ...]
    integration_id: str
    category: str

    def sql(self) -> tuple[str, list[Any]]:
        """A WHERE clause over capabilities `c` left-joined to their integrations `i`."""
        clauses = ["(c.owner_id IS NULL OR c.owner_id = %s)", "(c.integration_id IS NULL OR i.enabled = %s)"]
        params: list[Any] = [self.user_id, True]
        if self.types:
            clauses.append(f"c.type IN ({', '.join(['%s'] * len(self.types))})")
            params.extend(self.types)
        if self.integration_id:
            clauses.append("c.integration_id = %s")
            params.append(self.integration_id)
        if self.category:
            clauses.append("LOWER(c.category) = LOWER(%s)")
            params.append(self.category)
        return " AND ".join(clauses), params


def _keyword(query: Query, filters: Filters, depth: int) -> list[tuple[int, float]]:
    where, params = filters.sql()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT c.id, ts_rank_cd(setweight(c.search_name, 'A') || c.search_document, q, 1) AS score "
                "FROM integrations_capability c CROSS JOIN to_tsquery('simple', %s) AS q "
                "LEFT JOIN integrations_integration i ON i.id = c.integration_id "
                f"WHERE c.search_document @@ q AND {where} ORDER BY score DESC, c.id LIMIT %s",
                [query.tsquery(), *params, depth])
        else:
            # bm25 is lower for better matches. Without INDEXED BY, SQLite would read each match's row (and
            # its vector) by rowid rather than the narrow index holding every column the filters need.
            cursor.execute(
                f"SELECT c.id, -bm25(capability_document, {NAME_WEIGHT}, 1.0) AS score FROM capability_document "
                "JOIN integrations_capability c INDEXED BY capability_search_filters "
                "ON c.id = capability_document.rowid "
                "LEFT JOIN integrations_integration i ON i.id = c.integration_id "
                f"WHERE capability_document MATCH %s AND {where} ORDER BY score DESC, c.id LIMIT %s",
                [query.fts5(), *params, depth])
        return [(pk, float(score)) for pk, score in cursor.fetchall()]


@dataclass(frozen=True)
class Vectors:
    """Every row's vector and what the filters test, as arrays (codes for the strings)."""

    key: tuple[Any, ...]
    ids: np.ndarray
    matrix: np.ndarray
    types: np.ndarray
    owners: np.ndarray  # 0 for the shared catalogue
    integrations: np.ndarray  # a code from integration_codes, -1 for none
    categories: np.ndarray
    integration_codes: dict[str, int]
    category_codes: dict[str, int]
    documents: list[str]

    def visible(self, filters: Filters, disabled: list[str]) -> np.ndarray:
        mask = (self.owners == 0) | (self.owners == filters.user_id)
        if self.integration_codes.keys() & disabled:
            mask &= ~np.isin(self.integrations, [self.integration_codes.get(i, -2) for i in disabled])
        if filters.types:
            mask &= np.isin(self.types, [TYPES.index(t) for t in filters.types])
        if filters.integration_id:
            mask &= self.integrations == self.integration_codes.get(filters.integration_id, -2)
        if filters.category:
            mask &= self.categories == self.category_codes.get(filters.category.lower(), -2)
        return mask


_vectors_lock = threading.Lock()
_vectors: Vectors | None = None


def vectors() -> Vectors:
    """The vectors as the table holds them now: reloaded only when a row was added, changed or deleted
    (index_refresh stamps what it changes), so every process agrees without telling each other."""
    global _vectors
    with connection.cursor() as cursor:
        # Two subqueries: each is answered from an index alone, which one scan for both is not.
        cursor.execute("SELECT (SELECT COUNT(*) FROM integrations_capability), "
                       "(SELECT MAX(updated_at) FROM integrations_capability)")
        key = (connection.settings_dict["NAME"], *cursor.fetchone())
    with _vectors_lock:
        if _vectors is not None and _vectors.key == key:
            return _vectors
        rows = list(Capability.objects.order_by("pk").values_list(
            "id", "type", "owner_id", "integration_id", "category", "document", "embedding"))
        integration_codes: dict[str, int] = {}
        category_codes: dict[str, int] = {}
        _vectors = Vectors(
            key=key,
            ids=np.array([row[0] for row in rows], dtype=np.int64),
            matrix=np.array([embeddings.from_bytes(row[6]) for row in rows], dtype=np.float32).reshape(
                len(rows), embeddings.DIMENSIONS),
            types=np.array([TYPES.index(row[1]) for row in rows], dtype=np.int8),
            owners=np.array([row[2] or 0 for row in rows], dtype=np.int64),
            integrations=np.array([integration_codes.setdefault(row[3], len(integration_codes)) if row[3] else -1
                                   for row in rows], dtype=np.int32),
            categories=np.array([category_codes.setdefault(row[4].lower(), len(category_codes)) for row in rows],
                                dtype=np.int32),
            integration_codes=integration_codes, category_codes=category_codes,
            documents=[row[5] for row in rows])
        return _vectors


def _best_first(scores: np.ndarray, first: int) -> Iterator[int]:
    """Positions in `scores`, highest first, sorting only the best `first` unless more are taken."""
    if len(scores) <= first:
        yield from np.argsort(-scores, kind="stable")
        return
    best = np.argpartition(-scores, first)[:first]
    yield from best[np.argsort(-scores[best], kind="stable")]
    rest = np.setdiff1d(np.arange(len(scores)), best, assume_unique=True)
    yield from rest[np.argsort(-scores[rest], kind="stable")]


def _semantic(query: Query, filters: Filters, depth: int) -> list[tuple[int, float]]:
    index = vectors()
    disabled = list(Integration.objects.filter(enabled=False).values_list("pk", flat=True))
    candidates = np.flatnonzero(index.visible(filters, disabled))
    # einsum's own loop, not BLAS: OpenBLAS hands a product this size to worker threads, and waking them
    # on a busy machine took milliseconds, many times the product itself.
    scores = np.einsum("ij,j->i", index.matrix, embeddings.embed([query.plain()])[0])[candidates]
    hits = []
    for at in _best_first(scores, 2 * depth if query.excluded else depth):
        position = candidates[at]
        if any(term.found_in(index.documents[position]) for term in query.excluded):
            continue
        hits.append((int(index.ids[position]), float(scores[at])))
        if len(hits) == depth:
            break
    return hits


def _fused(*rankings: list[tuple[int, float]]) -> list[tuple[int, float]]:
    fused: dict[int, float] = defaultdict(float)
    for ranking in rankings:
        for rank, (pk, _) in enumerate(ranking, 1):
            fused[pk] += 1 / (RRF_K + rank)
    # Stable: among equal scores the keyword ranking's order stands.
    return sorted(fused.items(), key=lambda item: -item[1])


def _hits(caller: Caller, scored: list[tuple[int, float]]) -> list[dict[str, Any]]:
    if not scored:
        return []
    rows = {row["id"]: row for row in Capability.objects.filter(pk__in=[pk for pk, _ in scored]).values(
        "id", "type", "name", "description", "integration_id", "skill_id", "integration__connection_required")}
    connected = set(Connection.objects.filter(user=caller.user, state=Connection.State.CONNECTED)
                    .values_list("integration_id", flat=True))
    needs: dict[int, list[tuple[str, bool]]] = defaultdict(list)
    skill_ids = [row["skill_id"] for row in rows.values() if row["skill_id"]]
    if skill_ids:
        for skill_id, integration_id, required in Skill.integrations.through.objects.filter(
                skill_id__in=skill_ids).values_list("skill_id", "integration_id", "integration__connection_required"):
            needs[skill_id].append((integration_id, required))

    def usable(integration_id: str, required: bool) -> bool:
        return not required or integration_id in connected

    hits = []
    for pk, score in scored:
        row = rows.get(pk)
        if row is None:
            continue  # deleted since it was ranked
        if row["type"] == Capability.Type.SKILL:
            ready = all(usable(*need) for need in needs[row["skill_id"]])
        else:
            ready = row["integration_id"] is None or usable(row["integration_id"],
                                                             row["integration__connection_required"])
        hits.append({"type": row["type"], "name": row["name"], "description": row["description"],
                     "integrationId": row["integration_id"], "connected": ready, "score": round(score, 4)})
    return hits


def capabilities_search(*, caller: Caller, query: str, types: list[str] | None, integration_id: str | None,
                        category: str | None, mode: str = "hybrid", limit: int = 20) -> list[dict[str, Any]]:
    """The caller's capabilities (the shared catalogue and their own skills, never a disabled
    integration's) matching `query`, best first: {type, name, description, integrationId,
    connected, score}. Filters apply before ranking; scores are higher for better hits."""
    if mode not in MODES:
        raise InvalidInput(f"mode must be one of {', '.join(MODES)}.")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_LIMIT}.")
    unknown = sorted(set(types or ()) - set(TYPES))
    if unknown:
        raise InvalidInput(f"types may only hold {', '.join(TYPES)}, not {', '.join(map(str, unknown))}.")
    parsed = query_parse(query)
    filters = Filters(caller.user.pk, tuple(types or ()), integration_id or "", category or "")
    if mode == "keyword":
        scored = _keyword(parsed, filters, limit)
    elif mode == "semantic":
        scored = _semantic(parsed, filters, limit)
    else:
        scored = _fused(_keyword(parsed, filters, FUSION_DEPTH), _semantic(parsed, filters, FUSION_DEPTH))[:limit]
    return _hits(caller, scored)
