"""Pending CLI permission requests: made when permission_prompt needs a person, decided by their
owner (on their page, or relayed through approve_cli_permission), and looked up when the same
request comes again."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from accounts.models import McpSession
from accounts.services import audit_record
from core.caller import Caller
from core.errors import Forbidden, InvalidInput, NotFound
from elements.models import CliApproval

APPROVAL_TTL_SECONDS = 300
MIN_TTL_SECONDS, MAX_TTL_SECONDS = 30, 3600


def input_digest(tool_input: Any) -> str:
    canonical = json.dumps(tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def approvals_url() -> str:
    """The signed-in page where a person approves or denies pending requests."""
    return f"{settings.ATRIUM_PUBLIC_URL}{reverse('approvals:index')}"


@transaction.atomic
def cli_approval_request(
    *, caller: Caller, tool_name: str, tool_input: Any, classification: dict[str, Any], reason: str,
    agent_identity: str = "", ttl_seconds: int = APPROVAL_TTL_SECONDS,
) -> CliApproval:
    """A pending request for this session, or the one already pending for the same tool and input."""
    if caller.session is not None:
        # Identical prompts racing would each find nothing pending and each make a request: the
        # session's row lock queues them, so every one after the first finds the first's request.
        list(McpSession.objects.select_for_update().filter(pk=caller.session.pk).values_list("pk", flat=True))
    digest = input_digest(tool_input)
    now = timezone.now()
    existing = cli_approvals_pending(caller=caller).filter(tool_name=tool_name, input_digest=digest).first()
    if existing is not None:
        return existing
    ttl = min(max(ttl_seconds, MIN_TTL_SECONDS), MAX_TTL_SECONDS)
    approval = CliApproval.objects.create(
        id=f"cli-{uuid.uuid4()}", owner=caller.user, session=caller.session, tool_name=tool_name[:200],
        tool_input=tool_input, input_digest=digest, agent_identity=agent_identity[:200],
        classification=classification, reason=reason[:500], created_at=now,
        expires_at=now + timedelta(seconds=ttl),
    )
    audit_record(caller=caller, action="cli_approval.request", target=tool_name[:200],
                 detail={"request_id": approval.pk})
    return approval


def cli_approvals_pending(*, caller: Caller) -> QuerySet[CliApproval]:
    """This session's requests still waiting for a person (none for a caller without a session)."""
    return CliApproval.objects.filter(owner=caller.user, session=caller.session, status=CliApproval.Status.PENDING,
                                      expires_at__gt=timezone.now()) if caller.session is not None \
        else CliApproval.objects.none()


def cli_approvals_of_owner(*, user: object) -> QuerySet[CliApproval]:
    """Every session's pending requests of one user, for their approvals page."""
    return CliApproval.objects.filter(owner=user, status=CliApproval.Status.PENDING, expires_at__gt=timezone.now())


@transaction.atomic
def cli_approval_decide(*, caller: Caller, request_id: str, approve: bool, scope: str = "single") -> CliApproval:
    """Approve (with scope single or tool_session) or deny one of the caller's pending requests.

    A request is never approved from the MCP session that made it: there the model asking would be
    approving itself. Its owner approves it on their approvals page, or a bridge relays their
    answer from another session."""
    if scope not in CliApproval.Scope.values:
        raise InvalidInput("scope must be single or tool_session.", code="invalid_parameter")
    approval = CliApproval.objects.select_for_update().filter(owner=caller.user, pk=request_id).first()
    if approval is None:
        raise NotFound(f"No CLI approval request '{request_id}'.", code="approval_not_found")
    if approve and caller.session is not None and approval.session_id == caller.session.pk:
        raise Forbidden(f"CLI approval request '{request_id}' was made by this MCP session, which cannot approve "
                        f"its own request: the model would be approving itself. Ask the user to approve it on "
                        f"{approvals_url()}, or relay their approval from another MCP session.",
                        code="own_request")
    if approval.status != CliApproval.Status.PENDING:
        raise InvalidInput(f"CLI approval request '{request_id}' was already {approval.status}.",
                           code="approval_decided")
    if approval.expires_at <= timezone.now():
        raise InvalidInput(f"CLI approval request '{request_id}' expired at {approval.expires_at.isoformat()}.",
                           code="approval_expired")
    approval.status = CliApproval.Status.APPROVED if approve else CliApproval.Status.DENIED
    approval.scope = scope if approve else ""
    approval.decided_at, approval.decided_via = timezone.now(), caller.via
    approval.save(update_fields=["status", "scope", "decided_at", "decided_via"])
    audit_record(caller=caller, action="cli_approval.approve" if approve else "cli_approval.deny",
                 target=approval.tool_name, detail={"request_id": approval.pk, "scope": approval.scope})
    return approval


@transaction.atomic
def cli_approval_claim(*, caller: Caller, tool_name: str, tool_input: Any) -> CliApproval | None:
    """An approval of this session that lets this request through: a tool_session approval of the
    tool, or an unspent single approval of this exact input, which is spent by the claim (under a
    row lock, so one single approval lets one request through). A denied request answers too."""
    if caller.session is None:
        return None
    exact = _decided(CliApproval.objects.select_for_update(), caller=caller, tool_name=tool_name,
                     tool_input=tool_input)
    if exact is None or exact.scope == CliApproval.Scope.TOOL_SESSION:
        return exact
    exact.used_at = timezone.now()
    if exact.status == CliApproval.Status.APPROVED:
        exact.status = CliApproval.Status.USED
    exact.save(update_fields=["used_at", "status"])
    return exact


def _decided(approvals: QuerySet[CliApproval], *, caller: Caller, tool_name: str,
             tool_input: Any) -> CliApproval | None:
    """The session's decision that answers this request: a tool_session approval of the tool, else
    the latest unspent decision on this exact input."""
    mine = approvals.filter(owner=caller.user, session=caller.session, tool_name=tool_name)
    session_wide = mine.filter(status=CliApproval.Status.APPROVED, scope=CliApproval.Scope.TOOL_SESSION).first()
    if session_wide is not None:
        return session_wide
    return mine.filter(Q(status=CliApproval.Status.APPROVED) | Q(status=CliApproval.Status.DENIED),
                       input_digest=input_digest(tool_input), used_at=None).order_by("-decided_at").first()


def cli_approval_held(*, caller: Caller, tool_name: str, tool_input: Any) -> CliApproval | None:
    """What cli_approval_claim would answer this request with, read without spending it (a look
    before the locked claim, and the dry run of get_effective_cli_policies)."""
    if caller.session is None:
        return None
    return _decided(CliApproval.objects.all(), caller=caller, tool_name=tool_name, tool_input=tool_input)
