"""The approvals pages: danger-zone codes and pending CLI requests, for their signed-in owner.

The code of a challenge is shown here and nowhere else; an agent gets it back only from the person
who read it. Writes go through elements.dangerzone (a new code) and elements.approvals (a CLI
decision), as the user via the web. The page keeps its pending lists fresh with htmx: the index and
a decision answer HX-Request with the lists alone (console.fragments)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from console.fragments import fragment_wanted, page_or_fragment
from core.caller import Caller
from core.errors import DomainError, NotFound
from elements import approvals, dangerzone
from elements.models import AgentBlock, CliApproval, VerificationChallenge

# How much of a CLI request's input the page shows: enough to judge it, not a page of one command.
INPUT_CHARS = 4000

# A decision button's value: (approve, scope).
DECISIONS = {
    "single": (True, CliApproval.Scope.SINGLE),
    "tool_session": (True, CliApproval.Scope.TOOL_SESSION),
    "deny": (False, CliApproval.Scope.SINGLE),
}


def _caller(request: HttpRequest) -> Caller:
    return Caller.trusted(request.user, via="web")


def _input_shown(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    if len(text) <= INPUT_CHARS:
        return text
    return f"{text[:INPUT_CHARS]}\n… ({len(text) - INPUT_CHARS:,} more characters)"


def _cli_request(approval: CliApproval) -> dict[str, Any]:
    classification = approval.classification if isinstance(approval.classification, dict) else {}
    return {
        "approval": approval,
        "input": _input_shown(approval.tool_input),
        "risk": classification.get("riskLevel", ""),
        "why": classification.get("reason", "") or approval.reason,
        "client": (approval.session.client_name or "MCP client") if approval.session else "",
    }


def _block(block: AgentBlock) -> dict[str, Any]:
    challenge = block.newest_first[0] if block.newest_first else None
    return {"block": block, "challenge": challenge, "state": dangerzone.challenge_state(challenge) if challenge else ""}


def _index(request: HttpRequest, *, error: str = "", notice: str = "", status: int = 200) -> HttpResponse:
    pending = approvals.cli_approvals_of_owner(user=request.user).select_related("session").order_by("expires_at")
    return page_or_fragment(request, "approvals/index.html", "approvals/_pending.html", {
        "blocks": [_block(block) for block in dangerzone.blocks_open_of_owner(user=request.user)],
        "verifications": [{"challenge": c, "state": dangerzone.challenge_state(c)}
                          for c in dangerzone.verifications_pending_of_owner(user=request.user)],
        "cli_requests": [_cli_request(approval) for approval in pending],
        "error": error, "notice": notice,
        # A decision's fragment also replaces the notice above the lists; a poll's leaves it be.
        "decided": request.method == "POST" and fragment_wanted(request),
    }, status=status)


@never_cache
@login_required
@require_GET
def approvals_page(request: HttpRequest) -> HttpResponse:
    return _index(request)


@never_cache
@login_required
@require_POST
def cli_decide(request: HttpRequest, request_id: str) -> HttpResponse:
    decision = DECISIONS.get(request.POST.get("decision", ""))
    if decision is None:
        return _index(request, error="Choose Approve once, Approve for this session or Deny.", status=400)
    approve, scope = decision
    try:
        approval = approvals.cli_approval_decide(caller=_caller(request), request_id=request_id, approve=approve,
                                                 scope=scope)
    except DomainError as exc:
        return _index(request, error=exc.message, status=exc.http_status)
    if not approve:
        notice = f"Denied {approval.tool_name}."
    elif scope == CliApproval.Scope.TOOL_SESSION:
        notice = f"Approved {approval.tool_name} for the rest of this session."
    else:
        notice = f"Approved {approval.tool_name} once."
    if fragment_wanted(request):
        return _index(request, notice=notice)
    messages.success(request, notice)
    return redirect("approvals:index")


def _not_found(request: HttpRequest) -> HttpResponse:
    return render(request, "approvals/not_found.html", status=404)


def _challenge(request: HttpRequest, challenge: VerificationChallenge, *, error: str = "",
               status: int = 200) -> HttpResponse:
    state = dangerzone.challenge_state(challenge)
    code = dangerzone.challenge_code_for_page(user=request.user, challenge=challenge)
    current = dangerzone.challenge_current(challenge)
    call = {"operation": "verify_challenge", "params": {"challenge_id": str(challenge.pk), "code": code}}
    return render(request, "approvals/challenge.html", {
        "challenge": challenge,
        "state": state,
        "code": code,
        "verify_call": json.dumps(call) if code else "",
        "newer": current if current.pk != challenge.pk else None,
        "renewable": dangerzone.challenge_renewable(challenge),
        "blocked": challenge.block is not None and challenge.block.released_at is None,
        "wrong_codes": dangerzone.CHALLENGE_WRONG_CODES,
        "error": error,
    }, status=status)


@never_cache
@login_required
@require_GET
def challenge_page(request: HttpRequest, challenge_id: uuid.UUID) -> HttpResponse:
    challenge = dangerzone.challenge_of_owner(user=request.user, challenge_id=challenge_id)
    if challenge is None:
        return _not_found(request)
    return _challenge(request, challenge)


@never_cache
@login_required
@require_POST
def challenge_renew(request: HttpRequest, challenge_id: uuid.UUID) -> HttpResponse:
    try:
        fresh = dangerzone.challenge_renew(caller=_caller(request), challenge_id=challenge_id)
    except NotFound:
        return _not_found(request)
    except DomainError as exc:
        challenge = dangerzone.challenge_of_owner(user=request.user, challenge_id=challenge_id)
        return _challenge(request, challenge, error=exc.message, status=exc.http_status)
    return redirect("approvals:challenge", challenge_id=fresh.pk)
