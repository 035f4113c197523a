"""The danger zone: agents blocked by a step too dangerous to continue, and the one-time codes that
a person reads on their signed-in page and gives back through verify_challenge.

A block is a row (it survives restarts and holds on every process). The code is drawn from the
original's alphabet, sealed with the vault's encryption, and shown only on its owner's page; no
MCP or REST answer ever carries it.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from accounts.caller import Caller
from accounts.services import audit_record
from elements.models import AgentBlock, AgentExecution, VerificationChallenge
from integrations.crypto import seal

# 0-9 and A-Z without I and O, which read as 1 and 0.
CODE_ALPHABET = "0123456789ABCDEFGHJKLMNPQRSTUVWXYZ"
CODE_LENGTH = 6
CHALLENGE_MINUTES = 5


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
            "verification code on their Atrium approvals page; pass it to verify_challenge to unblock, or "
            "abort_execution to stop.")


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
    """Lift the agent's open block (by "code" or "abort"); its open challenges are spent with it."""
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
