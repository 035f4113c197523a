"""The run pages: the list of a user's runs and playbook executions with filters, and one run as its
owner sees it (the graph, every node visit with its turns, costs), kept live by polling state.json,
with a button per choice when a human step waits, and Cancel and Re-run. Reads go through
runs.selectors; the writes are runs.engine's run_answer (what resume_run calls), run_cancel (what
cancel_run calls) and run_rerun."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from console.fragments import page_or_fragment
from core.caller import Caller
from core.errors import DomainError, InvalidInput
from runs import answerers, engine, selectors
from runs.graph import NOT_REACHED, graph_context
from runs.handlers import HANDLERS
from runs.models import Run
from workflows.scoping import Scope


def _not_found(request: HttpRequest) -> HttpResponse:
    return render(request, "runs/not_found.html", {"message": engine.RUN_NOT_FOUND}, status=404)


def run_page_url(run: Run) -> str:
    """The page's path with the same ?project= as public_url()."""
    return f"{reverse('runs:run', args=[run.pk])}?{urlencode({'project': run.project_key or 'global'})}"


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _duration(ms: int | None) -> str:
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60)} s"


def _usd(value: float) -> str:
    return f"${value:.6f}"


def _visit(row: dict[str, Any]) -> dict[str, Any]:
    """A history row, with its input split into the prompt (shown as text) and the rest (as JSON)."""
    rest = dict(row["input"] or {})
    prompt = rest.pop("prompt") if isinstance(rest.get("prompt"), str) else ""
    return {
        **row,
        "prompt": prompt,
        "inputJson": _json(rest) if rest else "",
        "outputJson": _json(row["output"]) if row["output"] is not None else "",
        "duration": _duration(row["durationMs"]),
        "turns": [{**turn, "cost": _usd(turn["costUsd"])} for turn in row["turns"]],
        "children": [_visit(child) for child in row["children"]],
    }


def _graph(run: Run, visits: list[dict[str, Any]]) -> dict[str, Any]:
    latest = {visit["nodeId"]: visit["status"] for visit in visits}  # later visits overwrite earlier ones
    return graph_context(run.definition, statuses=latest, current="" if run.is_terminal else run.current_node)


def _page_context(run: Run) -> dict[str, Any]:
    history = selectors.run_history(run)
    visits = [_visit(row) for row in history["nodes"]]
    # A node's box links to its latest visit, or to its entry under "not reached".
    anchors = {visit["nodeId"]: visit["id"] for visit in visits}
    for visit in visits:
        visit["anchor"] = anchors[visit["nodeId"]] == visit["id"]
    drawing = _graph(run, visits)
    step, awaiting = selectors.pending_step(run)
    # Who answers the step shown, which may be a waiting child's.
    step_run = (run if step is None or step["runId"] == run.pk else
                Run.objects.select_related("project").filter(pk=step["runId"]).first())
    costs = history["run"]
    return {
        "run": run,
        "version": selectors.run_version(run),
        **drawing,
        "visits": visits,
        "unreached": [node for node in drawing["graph_nodes"] if node["status"] == NOT_REACHED],
        "children": list(run.children.order_by("started_at", "pk")),
        "step": step,
        "step_json": _json(step) if step else "",
        "awaiting": awaiting,
        "waiting": answerers.waiting_for(step_run) if step_run is not None else None,
        # A person answers the steps resume_run answers; the MCP client answers every other.
        "human_step": step is not None and HANDLERS[step["nodeType"]].tool == "resume_run",
        "costs": {"total": _usd(costs["totalCostUsd"]), "metered": _usd(costs["meteredCostUsd"]),
                  "subscription": _usd(costs["subscriptionEquivCostUsd"]), "billingMode": costs["billingMode"],
                  "inputTokens": costs["inputTokens"], "outputTokens": costs["outputTokens"]},
        "output_json": _json(run.output) if run.output is not None else "",
        "context_json": _json(run.context),
    }


@never_cache
@login_required
@require_GET
def run_page(request: HttpRequest, run_id: str) -> HttpResponse:
    run = selectors.run_owned(request.user, run_id)
    if run is None:
        return _not_found(request)
    return render(request, "runs/run.html", _page_context(run))


@never_cache
@login_required
@require_GET
def run_state(request: HttpRequest, run_id: str) -> JsonResponse:
    """What the page polls: it re-reads itself when `version` changes."""
    run = selectors.run_owned(request.user, run_id)
    if run is None:
        return JsonResponse({"error": engine.RUN_NOT_FOUND}, status=404)
    return JsonResponse({"status": run.status, "currentNode": run.current_node, "terminal": run.is_terminal,
                         "version": selectors.run_version(run)})


@login_required
@require_POST
def run_resume(request: HttpRequest, run_id: str) -> HttpResponse:
    """A person's choice at a human step. The form names the step it showed, so a page left open
    on an answered step cannot answer the next one; it may sit on an ancestor's page (a parent
    shows its waiting child's step), so it also names the page to go back to."""
    run = selectors.run_owned(request.user, run_id)
    if run is None:
        return _not_found(request)
    choice = request.POST.get("transition", "")
    try:
        engine.run_answer(caller=Caller.trusted(request.user, via="web"),
                          scope=Scope(owner=run.owner, project=run.project), run_id=run.pk, tool="resume_run",
                          payload={"transition": choice}, step_id=request.POST.get("step_id") or None)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Chose \u201c{choice}\u201d; the run goes on.")
    back = selectors.run_owned(request.user, request.POST.get("back", "")) or run
    return redirect(run_page_url(back))


RUNS_PAGE = 50


@never_cache
@login_required
@require_GET
def runs_page(request: HttpRequest) -> HttpResponse:
    """The user's runs, filtered by workflow, status, project and since (console.links' since). With
    HX-Request, the list alone: the page asks for it again while a listed run is live."""
    from console.links import MAX_TEXT, since_parse

    filters = {key: request.GET.get(key, "").strip() for key in ("workflow", "status", "project", "since")}
    context: dict[str, Any] = {"filters": filters, "statuses": Run.Status.values, "error": "", "live": False}
    try:
        if any(len(value) > MAX_TEXT for value in filters.values()):
            raise InvalidInput(f"A filter is at most {MAX_TEXT} characters.", code="invalid_parameter")
        if filters["status"] and filters["status"] not in Run.Status.values:
            raise InvalidInput(f"status must be one of {', '.join(Run.Status.values)}.", code="invalid_parameter")
        since = since_parse(filters["since"]) if filters["since"] else None
    except DomainError as exc:
        context["error"] = exc.message
        return page_or_fragment(request, "runs/list.html", "runs/_list.html", context, status=exc.http_status)
    page = request.GET.get("page", "1")
    page = int(page) if page.isdigit() and 0 < int(page) < 10_000 else 1
    rows = list(selectors.runs_of_owner(user=request.user, workflow=filters["workflow"], status=filters["status"],
                                        project=filters["project"], since=since)
                [(page - 1) * RUNS_PAGE: page * RUNS_PAGE + 1])
    shown = rows[:RUNS_PAGE]
    applied = {k: v for k, v in filters.items() if v}
    context.update(runs=shown, page=page, has_next=len(rows) > RUNS_PAGE, has_previous=page > 1,
                   query=urlencode(applied), filtered=bool(applied),
                   # Polled only while a run shown is still going: a finished one no longer changes.
                   live=any(not run.is_terminal for run in shown),
                   live_url=f"{reverse('run-list')}?{urlencode({**applied, 'page': page})}")
    return page_or_fragment(request, "runs/list.html", "runs/_list.html", context)


def _write(request: HttpRequest, run_id: str, action: str) -> HttpResponse:
    run = selectors.run_owned(request.user, run_id)
    if run is None:
        return _not_found(request)
    caller, scope = Caller.trusted(request.user, via="web"), Scope(owner=run.owner, project=run.project)
    try:
        if action == "cancel":
            engine.run_cancel(caller=caller, scope=scope, run_id=run.pk)
            messages.success(request, "Cancelled the run.")
        else:
            again = engine.run_rerun(caller=caller, scope=scope, run_id=run.pk)
            messages.success(request, f"Started run {again.pk}, a re-run of {run.pk}.")
            return redirect(run_page_url(again))
    except DomainError as exc:
        messages.error(request, exc.message)
    return redirect(run_page_url(run))


@login_required
@require_POST
def run_cancel(request: HttpRequest, run_id: str) -> HttpResponse:
    return _write(request, run_id, "cancel")


@login_required
@require_POST
def run_rerun(request: HttpRequest, run_id: str) -> HttpResponse:
    return _write(request, run_id, "rerun")
