"""The danger zone: agents blocked by a step too dangerous to continue, and the one-time codes that
a person reads on their signed-in page and gives back through verify_challenge.

A block is a row (it survives restarts and holds on every process). The code is drawn from the
original's alphabet, sealed with the vault's encryption, and shown only on its owner's page; no
MCP or REST answer ever carries it.
"""

from __future__ import annotations

import hmac
import re
import secrets
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Prefetch, Q
from django.urls import reverse
from django.utils import timezone

from accounts.services import audit_record
from core.caller import Caller
from core.errors import InvalidInput, NotFound, RefusalWithRecord
from elements.approvals import approvals_url
from elements.models import AgentBlock, AgentExecution, VerificationChallenge, VerificationFailure
from integrations.crypto import seal, unseal

# 0-9 and A-Z without I and O, which read as 1 and 0.
CODE_ALPHABET = "0123456789ABCDEFGHJKLMNPQRSTUVWXYZ"
CODE_LENGTH = 6
CHALLENGE_MINUTES = 5
# Wrong codes a challenge takes before it is spent, and an owner's wrong codes a minute across all
# their challenges: with that many in the last minute, no code is compared.
CHALLENGE_WRONG_CODES = 3
OWNER_WRONG_CODES = 10
OWNER_WRONG_CODES_WINDOW = timedelta(seconds=60)

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
# What people type around a code they copy: spaces, and dashes to group it.
_CODE_SEPARATORS = re.compile(r"[\s-]+")

# One text for an id that does not exist, is someone else's, has expired or was used, so that
# nobody learns from it which challenge ids exist.
CHALLENGE_GONE = ("Verification challenge not found, expired or already used. The user finds the current code, or "
                  "gets a new one, on their Atrium approvals page: {url}")
TOO_MANY_WRONG_CODES = "Too many failed verification attempts. Wait a minute and try again."


def challenge_url(challenge: VerificationChallenge) -> str:
    """The signed-in page where the challenge's owner reads its code."""
    return f"{settings.ATRIUM_PUBLIC_URL}{reverse('approvals:challenge', args=[challenge.pk])}"


def _code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def challenge_issue(
    *, caller: Caller, kind: str, agent_name: str, reason: str, block: AgentBlock | None = None,
    execution: AgentExecution | None = None, minutes: int | None = None,
) -> VerificationChallenge:
    """A fresh challenge whose code only the caller's user can read, on their page."""
    now = timezone.now()
    challenge = VerificationChallenge.objects.create(
        id=uuid.uuid4(), owner=caller.user, kind=kind, agent_name=agent_name, block=block, execution=execution,
        reason=reason[:500], sealed_code=seal(_code()), created_at=now,
        expires_at=now + timedelta(minutes=minutes or CHALLENGE_MINUTES),
    )
    audit_record(caller=caller, action="challenge.issue", target=agent_name,
                 detail={"challenge_id": str(challenge.pk), "kind": kind})
    return challenge


def agent_block_open(*, user: object, agent_name: str) -> AgentBlock | None:
    return AgentBlock.objects.filter(owner=user, agent_name=agent_name, released_at=None).first()


def blocked_message(block: AgentBlock) -> str:
    return (f"Agent '{block.agent_name}' is blocked due to danger zone trigger: {block.reason}. Its owner reads a "
            "verification code on their Atrium approvals page; pass it to verify_challenge to unblock. Until "
            "then only get_execution_state answers for this agent.")


@transaction.atomic
def agent_block(
    *, caller: Caller, agent_name: str, reason: str, execution: AgentExecution | None = None
) -> VerificationChallenge:
    """Block the agent (an open block stays the one block) and issue a challenge that lifts it."""
    block = agent_block_open(user=caller.user, agent_name=agent_name)
    if block is None:
        try:
            with transaction.atomic():
                block = AgentBlock.objects.create(owner=caller.user, agent_name=agent_name, reason=reason[:500],
                                                  execution=execution)
        except IntegrityError:  # a concurrent step blocked it first: share its block
            block = AgentBlock.objects.select_for_update().get(owner=caller.user, agent_name=agent_name,
                                                               released_at=None)
        audit_record(caller=caller, action="agent.block", target=agent_name, detail={"reason": reason[:500]})
    return challenge_issue(caller=caller, kind=VerificationChallenge.Kind.DANGER_ZONE, agent_name=agent_name,
                           reason=reason, block=block, execution=execution)


@transaction.atomic
def agent_unblock(*, caller: Caller, agent_name: str, by: str) -> AgentBlock | None:
    """Lift the agent's open block (`by` says how, for the record); its open challenges are spent with it."""
    block = AgentBlock.objects.select_for_update().filter(owner=caller.user, agent_name=agent_name,
                                                          released_at=None).first()
    if block is None:
        return None
    now = timezone.now()
    block.released_at, block.released_by = now, by
    block.save(update_fields=["released_at", "released_by"])
    block.challenges.filter(used_at=None).update(used_at=now, outcome="released")
    audit_record(caller=caller, action="agent.unblock", target=agent_name, detail={"by": by})
    return block


def challenge_state(challenge: VerificationChallenge) -> str:
    """open (its code can be entered), expired, or how it was used: verified, spent (too many
    wrong codes), released (its block was lifted otherwise) or renewed (replaced by a new code
    after it expired)."""
    if challenge.used_at is None:
        return "open" if challenge.expires_at > timezone.now() else "expired"
    return challenge.outcome


def _normalised(code: str) -> bytes:
    return _CODE_SEPARATORS.sub("", code).upper().encode()


def _challenge_locked(*, caller: Caller, challenge_id: uuid.UUID) -> VerificationChallenge | None:
    """The caller's challenge under a row lock, or None. Locks are taken in agent_unblock's order
    (the block, then its challenges), so a verification and an abort of one agent never deadlock."""
    found = VerificationChallenge.objects.filter(pk=challenge_id, owner=caller.user).values("block_id").first()
    if found is None:
        return None
    if found["block_id"] is not None:
        AgentBlock.objects.select_for_update().filter(pk=found["block_id"]).first()
    return VerificationChallenge.objects.select_for_update().filter(pk=challenge_id, owner=caller.user).first()


def _wrong_code(*, caller: Caller, challenge: VerificationChallenge) -> str:
    """Count a wrong code on the challenge and against its owner; the refusal to send back."""
    now = timezone.now()
    challenge.failures += 1
    spent = challenge.failures >= CHALLENGE_WRONG_CODES
    if spent:
        challenge.used_at, challenge.outcome = now, "spent"
    challenge.save(update_fields=["failures", "used_at", "outcome"])
    VerificationFailure.objects.create(owner=caller.user, challenge=challenge, at=now)
    audit_record(caller=caller, action="challenge.wrong_code", target=challenge.agent_name,
                 detail={"challenge_id": str(challenge.pk), "failures": challenge.failures, "spent": spent})
    if spent:
        return (f"Incorrect verification code. The challenge is now consumed (one-time use) after "
                f"{CHALLENGE_WRONG_CODES} wrong codes. A new code is on the user's Atrium approvals page once they "
                f"press \"New code\" there ({challenge_url(challenge)}); pass its challenge_id and code to "
                "verify_challenge.")
    left = CHALLENGE_WRONG_CODES - challenge.failures
    return (f"Incorrect verification code. {left} more wrong code{'s' if left > 1 else ''} and this challenge is "
            f"consumed. Ask the user to read the code again on their Atrium approvals page: {challenge_url(challenge)}")


def _verified(*, caller: Caller, challenge: VerificationChallenge) -> dict[str, Any]:
    challenge.used_at, challenge.outcome = timezone.now(), "verified"
    challenge.save(update_fields=["used_at", "outcome"])
    audit_record(caller=caller, action="challenge.verify", target=challenge.agent_name,
                 detail={"challenge_id": str(challenge.pk), "kind": challenge.kind})
    if challenge.kind != VerificationChallenge.Kind.DANGER_ZONE:
        return {"verified": True, "message": f"Verification successful for agent '{challenge.agent_name}'."}
    block = agent_unblock(caller=caller, agent_name=challenge.agent_name, by="code")
    if block is None:
        return {"verified": True, "message": f"Verification successful. Agent '{challenge.agent_name}' was not "
                                             "blocked any more."}
    return {"verified": True, "unblockedAgent": challenge.agent_name,
            "message": f"Verification successful. Agent '{challenge.agent_name}' is unblocked and may continue."}


def challenge_verify(*, caller: Caller, challenge_id: str, code: str) -> dict[str, Any]:
    """Check a code its owner read on their page: the right one lifts what the challenge guards
    (a danger-zone block) or records the verification. A wrong one is counted, and the refusal
    carries it out of any surrounding transaction (RefusalWithRecord), because a guess that
    rolled back would not count against the next."""
    if not _UUID.fullmatch(challenge_id.strip()):
        raise InvalidInput("Invalid challenge_id format: expected the UUID the danger zone message gave.",
                           code="invalid_challenge_id")
    with transaction.atomic():
        # One verification of an owner at a time, so their count of wrong codes is exact across
        # challenges and processes.
        list(get_user_model().objects.select_for_update().filter(pk=caller.user.pk).values_list("pk", flat=True))
        challenge = _challenge_locked(caller=caller, challenge_id=uuid.UUID(challenge_id.strip()))
        if challenge is None or challenge_state(challenge) != "open":
            raise InvalidInput(CHALLENGE_GONE.format(url=approvals_url()), code="challenge_not_found")
        recent = VerificationFailure.objects.filter(owner=caller.user,
                                                    at__gt=timezone.now() - OWNER_WRONG_CODES_WINDOW)
        if recent.count() >= OWNER_WRONG_CODES:
            raise InvalidInput(TOO_MANY_WRONG_CODES, code="too_many_attempts")
        if hmac.compare_digest(_normalised(code), _normalised(unseal(challenge.sealed_code))):
            return _verified(caller=caller, challenge=challenge)
        refusal = _wrong_code(caller=caller, challenge=challenge)
    raise RefusalWithRecord(refusal, code="incorrect_code")


def challenge_current(challenge: VerificationChallenge) -> VerificationChallenge:
    """The newest challenge for what this one guards: its block, or its execution."""
    siblings = VerificationChallenge.objects.filter(owner_id=challenge.owner_id, kind=challenge.kind)
    if challenge.block_id is not None:
        siblings = siblings.filter(block_id=challenge.block_id)
    elif challenge.execution_id is not None:
        siblings = siblings.filter(execution_id=challenge.execution_id)
    else:
        return challenge
    return siblings.select_related("block", "execution").order_by("-created_at", "-pk").first()


def challenge_renewable(challenge: VerificationChallenge) -> bool:
    """Whether a new code can replace this one: it expired or was spent, nothing newer replaced it,
    and what it guards still waits (its block is open, or its execution is running)."""
    if challenge_state(challenge) not in {"expired", "spent"} or challenge_current(challenge).pk != challenge.pk:
        return False
    if challenge.kind == VerificationChallenge.Kind.DANGER_ZONE:
        return challenge.block is not None and challenge.block.released_at is None
    return challenge.execution is not None and challenge.execution.status == AgentExecution.Status.IN_PROGRESS


@transaction.atomic
def challenge_renew(*, caller: Caller, challenge_id: uuid.UUID) -> VerificationChallenge:
    """A new code for a challenge that expired or was spent while its block is still open (or its
    verification still waits); the old one is marked used. The page's "New code" button: pressed
    twice, or on an older challenge of the same block, it answers the current open one."""
    found = VerificationChallenge.objects.filter(pk=challenge_id, owner=caller.user).values(
        "block_id", "execution_id").first()
    if found is None:
        raise NotFound("No such verification challenge.", code="challenge_not_found")
    # Whatever the challenge guards is locked first, as in challenge_verify, so two presses issue one code.
    if found["block_id"] is not None:
        AgentBlock.objects.select_for_update().filter(pk=found["block_id"]).first()
    elif found["execution_id"] is not None:
        AgentExecution.objects.select_for_update().filter(pk=found["execution_id"]).first()
    current = challenge_current(VerificationChallenge.objects.select_for_update().get(pk=challenge_id))
    if challenge_state(current) == "open":
        return current
    if not challenge_renewable(current):
        raise InvalidInput("Nothing waits for this code any more: the agent is no longer blocked, or the step was "
                           "verified or has ended.", code="challenge_settled")
    if current.used_at is None:
        current.used_at, current.outcome = timezone.now(), "renewed"
        current.save(update_fields=["used_at", "outcome"])
    return challenge_issue(caller=caller, kind=current.kind, agent_name=current.agent_name, reason=current.reason,
                           block=current.block, execution=current.execution)


def challenge_of_owner(*, user: object, challenge_id: uuid.UUID) -> VerificationChallenge | None:
    return VerificationChallenge.objects.select_related("block", "execution").filter(
        pk=challenge_id, owner=user).first()


def challenge_code_for_page(*, user: object, challenge: VerificationChallenge) -> str | None:
    """The code in clear, for its owner's challenge page alone (no MCP or REST answer calls this),
    and only while it can still be entered."""
    if challenge.owner_id != user.pk or challenge_state(challenge) != "open":
        return None
    return unseal(challenge.sealed_code)


def blocks_open_of_owner(*, user: object) -> list[AgentBlock]:
    """The owner's blocked agents, newest first, each with its challenges newest first (`newest_first`)."""
    newest = VerificationChallenge.objects.order_by("-created_at", "-pk")
    return list(AgentBlock.objects.filter(owner=user, released_at=None)
                .prefetch_related(Prefetch("challenges", queryset=newest, to_attr="newest_first")))


def verifications_pending_of_owner(*, user: object) -> list[VerificationChallenge]:
    """The current challenge of each verification the owner has yet to give: a running execution's
    newest unless it was verified (its code open, expired or spent), or an open one of no execution."""
    candidates = VerificationChallenge.objects.filter(owner=user, kind=VerificationChallenge.Kind.VERIFICATION).filter(
        Q(execution=None, used_at=None, expires_at__gt=timezone.now())
        | Q(execution__status=AgentExecution.Status.IN_PROGRESS),
    ).select_related("execution").order_by("-created_at", "-pk")
    seen: set[object] = set()
    pending = []
    for challenge in candidates:
        group = challenge.execution_id or challenge.pk
        if group in seen:
            continue
        seen.add(group)
        if challenge.outcome != "verified":
            pending.append(challenge)
    return pending
