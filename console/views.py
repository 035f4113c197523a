"""The web console's pages, for the signed-in user: their portfolio, their playbooks and the template
gallery, their activity log, their metrics, their personal tokens and how to connect a client. Each
page reads what an MCP operation reads, through the same selectors and services, and accepts the
deep-link parameters of console.links."""

from __future__ import annotations

import difflib
import json
import tempfile
import zipfile
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts import selectors as account_selectors
from accounts import services as account_services
from accounts.models import McpSession
from accounts.scopes import scopes_by_product
from console.fragments import page_or_fragment
from console.links import MAX_REFRESH_SECONDS, MAX_TEXT, since_parse
from core.caller import Caller
from core.errors import DomainError, InvalidInput, NotFound
from core.input_bounds import JsonRefused, json_parse
from docs_kb.rendering import text_html
from elements import approvals, dangerzone, selectors, services
from elements.models import AgentExecution, Element, ElementRevision
from elements.packages import element_package
from elements.portfolio import (
    MARKDOWN_SUFFIX,
    MEMORY_SUFFIXES,
    package_from_markdown,
    package_from_memory_yaml,
    package_path,
    text_from_package,
)
from elements.types import MAX_FILE_BYTES, ElementType, element_type_parse
from integrations import vault
from integrations.selectors import integration_states
from runs import selectors as run_selectors
from runs.models import Run
from runs.views import run_page_url
from workflows import playbook_selectors, templates
from workflows import playbooks as playbook_services
from workflows import triggers as trigger_services

PAGE_SIZE = 50
REVISIONS_SHOWN = 50
# An element's instructions or content longer than this is shown as text, not parsed as Markdown.
RENDER_LIMIT = 100_000
MAX_DIFF_LINES = 2000
# A portfolio zip is built in memory up to this size, then on disk.
EXPORT_IN_MEMORY_BYTES = 8 * 1024 * 1024
LOG_PAGE = 100
METRICS_DEFAULT_SINCE = "24h"
METRICS_TOP = 20


def _caller(request: HttpRequest) -> Caller:
    return Caller.trusted(request.user, via="web")


def _text(request: HttpRequest, key: str) -> str:
    value = request.GET.get(key, "").strip()
    if len(value) > MAX_TEXT:
        raise InvalidInput(f"{key} is at most {MAX_TEXT} characters.", code="invalid_parameter")
    return value


def _page(request: HttpRequest) -> int:
    value = request.GET.get("page", "1")
    return int(value) if value.isdigit() and 0 < int(value) < 10_000 else 1


@never_cache
@login_required
@require_GET
def portfolio(request: HttpRequest) -> HttpResponse:
    """Elements by type with a search box; with type and name, that element."""
    context: dict[str, Any] = {"types": list(ElementType), "q": "", "type": "", "error": ""}
    try:
        q, type_text, name = _text(request, "q"), _text(request, "type"), _text(request, "name")
        element_type = element_type_parse(type_text) if type_text else None
        context.update(q=q, type=element_type.value if element_type else "")
        if name:
            return _element(request, element_type, name, context)
        page = _page(request)
        if q:
            found, total = selectors.element_search(caller=_caller(request), text=q, element_type=element_type,
                                                    page=page, page_size=PAGE_SIZE)
            elements = [element for element, _ in found]
        else:
            elements, total = selectors.element_page(caller=_caller(request), query=selectors.ListQuery(
                element_type=element_type, page=page, page_size=PAGE_SIZE))
    except DomainError as exc:
        context["error"] = exc.message
        return render(request, "console/portfolio.html", context, status=exc.http_status)
    context.update(elements=elements, total=total, page=page, has_next=page * PAGE_SIZE < total,
                   has_previous=page > 1)
    return render(request, "console/portfolio.html", context)


def _element(request: HttpRequest, element_type: ElementType | None, name: str,
             context: dict[str, Any]) -> HttpResponse:
    caller = _caller(request)
    try:
        element = selectors.element_find(caller=caller, name=name, element_type=element_type)
        history = list(selectors.revisions(caller=caller, element_type=ElementType(element.element_type),
                                           name=element.name)[:REVISIONS_SHOWN])
        diff = _revision_diff(request, element, history)
    except DomainError as exc:
        context.update(error=exc.message, name=name)
        return render(request, "console/element.html", context, status=exc.http_status)
    entries = selectors.memory_entries(memory=element) if element.element_type == ElementType.MEMORY else []
    context.update(
        element=element, entries=entries[:PAGE_SIZE], entry_count=len(entries),
        sessions=selectors.element_sessions(caller=caller, element=element),
        rendered={field: _rendered(getattr(element, field)) for field in ("instructions", "content")},
        revisions=history, diff=diff, version=selectors.element_version(element),
        editable_content=element.element_type != ElementType.MEMORY,
        form=context.get("form") or {"description": element.description, "instructions": element.instructions,
                                     "content": element.content, "tags": ", ".join(element.tags)},
    )
    return render(request, "console/element.html", context, status=context.pop("status", 200))


def _rendered(text: str) -> Any:
    """Markdown as safe HTML; text past RENDER_LIMIT is shown as it is rather than parsed."""
    return text_html(text) if text and len(text) <= RENDER_LIMIT else None


def _revision_text(element: Element, revision: ElementRevision | None) -> str:
    return text_from_package(revision.snapshot if revision is not None else element_package(element))


def _revision_diff(request: HttpRequest, element: Element, history: list[ElementRevision]) -> dict[str, Any] | None:
    """?a=<revision>&b=<revision or current>: the diff of the two as files, one line per row."""
    a, b = request.GET.get("a", ""), request.GET.get("b", "current")
    if not a:
        return None
    by_id = {str(r.pk): r for r in history}
    if a not in by_id or (b != "current" and b not in by_id):
        raise InvalidInput("Pick two of this element's revisions to compare.", code="invalid_parameter")
    old, new = by_id[a], None if b == "current" else by_id[b]
    lines = list(difflib.unified_diff(_revision_text(element, old).splitlines(),
                                      _revision_text(element, new).splitlines(),
                                      fromfile=f"revision {old.pk}", tofile="current" if new is None else
                                      f"revision {new.pk}", lineterm="", n=3))[:MAX_DIFF_LINES]
    kinds = {"+": "added", "-": "removed", "@": "hunk"}
    return {"a": old, "b": new, "lines": [{"text": line, "kind": "hunk" if line[:3] in ("+++", "---") else
                                           kinds.get(line[:1], "same")} for line in lines],
            "same": not lines}


def _element_form(request: HttpRequest) -> tuple[ElementType, str]:
    type_text, name = request.POST.get("type", ""), request.POST.get("name", "")
    if len(type_text) > MAX_TEXT or len(name) > MAX_TEXT:
        raise InvalidInput(f"type and name are at most {MAX_TEXT} characters.", code="invalid_parameter")
    return element_type_parse(type_text), name


def _element_url(element_type: ElementType | str, name: str) -> str:
    kind = element_type.value if isinstance(element_type, ElementType) else element_type
    return f"{reverse('console:portfolio')}?{urlencode({'type': kind, 'name': name})}"


@never_cache
@login_required
@require_POST
def element_edit(request: HttpRequest) -> HttpResponse:
    """Save the edit form through the service edit_element uses, refused if the element changed since
    the form was read."""
    caller = _caller(request)
    form = {key: request.POST.get(key, "") for key in ("description", "instructions", "content", "tags")}
    try:
        element_type, name = _element_form(request)
        element = selectors.element_find(caller=caller, name=name, element_type=element_type)
        changes: dict[str, Any] = {"description": form["description"], "instructions": form["instructions"],
                                   "tags": [t.strip() for t in form["tags"].split(",") if t.strip()]}
        if element.element_type != ElementType.MEMORY:
            changes["content"] = form["content"]
        services.element_edit(caller=caller, element=element, changes=changes,
                              if_match=[request.POST.get("version", "")])
    except DomainError as exc:
        context: dict[str, Any] = {"types": list(ElementType), "q": "", "type": request.POST.get("type", ""),
                                   "error": "", "form": form, "edit_error": exc.message, "status": exc.http_status}
        if isinstance(exc, NotFound) or exc.code in ("unknown_element_type", "invalid_parameter"):
            context.update(error=exc.message, name=request.POST.get("name", ""))
            return render(request, "console/element.html", context, status=exc.http_status)
        return _element(request, element_type, name, context)
    messages.success(request, f"Saved {element.name}.")
    return redirect(_element_url(element_type, name))


@never_cache
@login_required
@require_POST
def element_restore(request: HttpRequest) -> HttpResponse:
    """Bring the element back to one of its revisions, through the service admin's restore uses."""
    caller = _caller(request)
    try:
        element_type, name = _element_form(request)
        revision = selectors.revisions(caller=caller, element_type=element_type, name=name).filter(
            pk=request.POST.get("revision") if str(request.POST.get("revision", "")).isdigit() else None).first()
        if revision is None:
            raise NotFound(f"No revision of {element_type.value} '{name}' with that id.", code="revision_not_found")
        services.element_restore(caller=caller, revision=revision)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(reverse("console:portfolio"))
    messages.success(request, f"Restored {name} to its revision of {revision.created_at:%Y-%m-%d %H:%M:%S} UTC.")
    return redirect(_element_url(element_type, name))


@never_cache
@login_required
@require_GET
def logs(request: HttpRequest) -> HttpResponse:
    """The user's audit trail and tool calls: the same query as query_logs."""
    filters = {"level": "debug", "category": "all", "source": "", "q": "", "since": ""}
    context: dict[str, Any] = {"levels": selectors.LOG_LEVELS, "categories": selectors.LOG_CATEGORIES,
                               "filters": filters, "error": ""}
    try:
        filters.update({key: _text(request, key) or default for key, default in filters.items()})
        since = since_parse(filters["since"]) if filters["since"] else None
        page = _page(request)
        entries, total = selectors.log_page(caller=_caller(request), category=filters["category"],
                                            level=filters["level"], source=filters["source"], text=filters["q"],
                                            since=since, offset=(page - 1) * LOG_PAGE, limit=LOG_PAGE)
    except DomainError as exc:
        context["error"] = exc.message
        return render(request, "console/logs.html", context, status=exc.http_status)
    context.update(entries=entries, total=total, page=page, has_next=page * LOG_PAGE < total,
                   has_previous=page > 1)
    return render(request, "console/logs.html", context)


@never_cache
@login_required
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Counts over a window: tool calls with their errors and latency, writes by action and source, runs and
    agent executions by status, and what runs cost per day."""
    context: dict[str, Any] = {"since": METRICS_DEFAULT_SINCE, "refresh": 0, "error": ""}
    try:
        since_text = _text(request, "since") or METRICS_DEFAULT_SINCE
        since = since_parse(since_text)
        refresh = request.GET.get("refresh", "0")
        if not refresh.isdigit() or int(refresh) > MAX_REFRESH_SECONDS:
            raise InvalidInput(f"refresh is a number of seconds from 0 to {MAX_REFRESH_SECONDS}.",
                               code="invalid_parameter")
    except DomainError as exc:
        context["error"] = exc.message
        return render(request, "console/metrics.html", context, status=exc.http_status)
    events = account_selectors.audit_events(caller=_caller(request), since=since).order_by()
    by_action = _counted(events, "action", limit=METRICS_TOP)
    tools = account_selectors.tool_call_stats(caller=_caller(request), since=since, limit=METRICS_TOP)
    costs = run_selectors.run_costs_by_day(user=request.user, since=since)
    context.update(
        since=since_text, since_at=since, refresh=int(refresh), total=events.count(), by_action=by_action,
        by_source=_counted(events, "via"),
        calls={"rows": [(t["tool"], t["calls"]) for t in tools], "max": max((t["calls"] for t in tools), default=0)},
        tools=tools, slowest=max((t["p95_ms"] for t in tools), default=0),
        costs={"rows": [(day.isoformat(), cost) for day, cost in costs], "max": max((c for _, c in costs), default=0)},
        runs=_counted(Run.objects.filter(owner=request.user, parent__isnull=True, started_at__gt=since), "status"),
        executions=_counted(AgentExecution.objects.filter(owner=request.user, started_at__gt=since), "status"))
    return render(request, "console/metrics.html", context)


def _counted(rows: Any, field: str, *, limit: int | None = None) -> dict[str, Any]:
    """Rows counted by `field` in the database, most first: {rows: [(value, count)], max} for a bar chart."""
    counted = list(rows.order_by().values_list(field).annotate(n=Count("id")).order_by("-n", field)[:limit])
    return {"rows": counted, "max": max((n for _, n in counted), default=0)}


PYTHON_SNIPPET = """import asyncio, os
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL = "{url}"

async def main() -> None:
    headers = {{"Authorization": f"Bearer {{os.environ['ATRIUM_TOKEN']}}"}}
    async with httpx2.AsyncClient(headers=headers) as http:
        async with Client(streamable_http_client(URL, http_client=http)) as client:
            print(client.protocol_version)
            tools = await client.list_tools()
            print([t.name for t in tools.tools])
            status = await client.call_tool("auth_status", {{}})
            print(status.structured_content)

asyncio.run(main())"""


def client_snippets(*, url: str, token: str, username: str) -> list[dict[str, str]]:
    """How each client connects to `url`: {client, how, snippet}; `token` is a raw token or a placeholder."""
    bearer = f"Bearer {token}"

    def as_json(value: Any) -> str:
        return json.dumps(value, indent=2)

    return [
        {"client": "Claude Code", "how": "Run this once; /mcp in Claude Code then shows atrium. Without the header "
         "Claude Code signs in with OAuth.",
         "snippet": f'claude mcp add --transport http atrium {url} \\\n  --header "Authorization: {bearer}"'},
        {"client": "Claude Desktop", "how": "Add this to claude_desktop_config.json (the mcp-remote bridge needs "
         "Node.js 18 or later) and restart Claude Desktop. A server reachable over https can instead be added as a "
         "custom connector that signs in with OAuth.",
         "snippet": as_json({"mcpServers": {"atrium": {
             "command": "npx", "args": ["-y", "mcp-remote", url, "--header", "Authorization: Bearer ${ATRIUM_TOKEN}"],
             "env": {"ATRIUM_TOKEN": token}}}})},
        {"client": "Cursor", "how": "Add this to ~/.cursor/mcp.json, or .cursor/mcp.json in a project. Without "
         "headers Cursor signs in with OAuth.",
         "snippet": as_json({"mcpServers": {"atrium": {"url": url, "headers": {"Authorization": bearer}}}})},
        {"client": "VS Code", "how": "Add this to .vscode/mcp.json (or run MCP: Add Server). Without headers VS Code "
         "signs in with OAuth.",
         "snippet": as_json({"servers": {"atrium": {"type": "http", "url": url,
                                                    "headers": {"Authorization": bearer}}}})},
        {"client": "MCP Inspector", "how": "Run this, then in the page that opens choose Streamable HTTP, enter the "
         "URL, set the header Authorization to the value below (or leave it empty and use the Inspector's OAuth "
         "flow), and Connect.",
         "snippet": f"npx @modelcontextprotocol/inspector\n# URL:           {url}\n# Authorization: {bearer}"},
        {"client": "Python SDK", "how": 'The official SDK, version 2 (pip install "mcp>=2"). Save this as '
         f"atrium_client.py and run it with ATRIUM_TOKEN={token} python atrium_client.py.",
         "snippet": PYTHON_SNIPPET.format(url=url)},
        {"client": "stdio, on the server's machine", "how": "No token: the process runs as you, with every scope. "
         "Add --discrete for DollhouseMCP's discrete tools.",
         "snippet": f"python manage.py mcp_stdio --user {username}"},
    ]


CONNECT_LABEL = "Made on the Connect page"


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def connect(request: HttpRequest) -> HttpResponse:
    """Every client's snippet with this server's URL; a POST makes a token (every scope, the expiry
    chosen) and fills it in, shown this once."""
    raw, error = "", ""
    if request.method == "POST":
        try:
            label = request.POST.get("label", "").strip() or CONNECT_LABEL
            expires_at = _expiry(request.POST.get("expires", "90"))
            _, raw = account_services.token_create(caller=_caller(request), user=request.user, label=label,
                                                   expires_at=expires_at)
        except DomainError as exc:
            error = exc.message
    snippets = client_snippets(url=settings.ATRIUM_MCP_URL, token=raw or "atr_...",
                               username=request.user.get_username())
    return render(request, "console/connect.html", {"snippets": snippets, "raw": raw, "error": error,
                                                    "expiries": EXPIRIES}, status=400 if error else 200)


# --- tokens --------------------------------------------------------------------------------

EXPIRIES = (("", "Never"), ("7", "In 7 days"), ("30", "In 30 days"), ("90", "In 90 days"), ("365", "In a year"))


def _expiry(days: str) -> datetime | None:
    """When a token chosen to expire in `days` (one of EXPIRIES; "" for never) expires."""
    if days not in dict(EXPIRIES):
        raise InvalidInput("Choose when the token expires.", code="invalid_expiry")
    return timezone.now() + timedelta(days=int(days)) if days else None


def _tokens_page(request: HttpRequest, *, raw: str = "", error: str = "", form: dict[str, Any] | None = None,
                 status: int = 200) -> HttpResponse:
    return render(request, "console/tokens.html", {
        "tokens": account_selectors.token_list(caller=_caller(request)),
        "products": scopes_by_product(), "expiries": EXPIRIES, "raw": raw, "error": error,
        "form": form or {"label": "", "scopes": [], "expires": "30"},
    }, status=status)


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    """The user's personal tokens: list, and make one (its raw value shown on this answer only)."""
    if request.method == "GET":
        return _tokens_page(request)
    form = {"label": request.POST.get("label", "").strip(), "scopes": request.POST.getlist("scopes"),
            "expires": request.POST.get("expires", "")}
    try:
        expires_at = _expiry(form["expires"])
        if not form["scopes"]:
            raise InvalidInput("Choose at least one scope: a token without scopes can do nothing.",
                               code="scopes_required")
        _, raw = account_services.token_create(caller=_caller(request), user=request.user, label=form["label"],
                                               scopes=form["scopes"], expires_at=expires_at)
    except DomainError as exc:
        return _tokens_page(request, error=exc.message, form=form, status=exc.http_status)
    return _tokens_page(request, raw=raw)


@never_cache
@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    try:
        token = account_selectors.token_get(caller=_caller(request), token_id=token_id)
    except DomainError as exc:
        return _tokens_page(request, error=exc.message, status=exc.http_status)
    account_services.token_revoke(caller=_caller(request), token=token)
    messages.success(request, f"Revoked {token.label} ({token.prefix}…). Clients using it are refused from now on.")
    return redirect("console:tokens")


# --- home ----------------------------------------------------------------------------------

@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """What the server offers; signed in, what the user has here and the next step to take."""
    if not request.user.is_authenticated:
        return render(request, "home.html", {})
    user = request.user
    counts = dict(Element.objects.filter(owner=user).values_list("element_type").annotate(n=Count("id")))
    waiting = (approvals.cli_approvals_of_owner(user=user).count() + len(dangerzone.blocks_open_of_owner(user=user))
               + len(dangerzone.verifications_pending_of_owner(user=user)))
    active_runs = Run.objects.filter(owner=user, parent__isnull=True, status__in=(Run.Status.RUNNING,
                                                                                  Run.Status.PAUSED)).count()
    connected = McpSession.objects.filter(user=user).exists()
    if waiting:
        step = ("approvals", "Your agents or clients are waiting for you: decide on the Approvals page.")
    elif not connected:
        step = ("connect", "Connect your first MCP client: Claude Code, Claude Desktop, Cursor or your own code.")
    elif not counts:
        step = ("portfolio", "Your portfolio is empty: ask your assistant to create a persona or a skill, or to "
                             "install one from the community collection.")
    else:
        step = ("portfolio", "Browse your portfolio, or ask your assistant to activate an element.")
    return render(request, "home.html", {
        "counts": [(t.plural, counts.get(t.value, 0)) for t in ElementType], "total": sum(counts.values()),
        "waiting": waiting, "active_runs": active_runs, "connected": connected,
        "tokens": account_selectors.token_list(caller=_caller(request)).count(), "step": step,
    })


# --- integrations --------------------------------------------------------------------------

@never_cache
@login_required
@require_GET
def integrations(request: HttpRequest) -> HttpResponse:
    """Every enabled integration and the user's connection to it (what `vault status` answers)."""
    rows = vault.vault_status(caller=_caller(request))["integrations"]
    for row in rows:
        row["stateLabel"] = row["state"].replace("_", " ")
    return render(request, "console/integrations.html", {"integrations": rows})


@never_cache
@login_required
@require_POST
def integration_connect(request: HttpRequest, integration_id: str) -> HttpResponse:
    """Connect through vault_connect. Pressing Connect is the user's own confirmation, so one that runs on
    the server's account (first party, the page says it costs credits) is confirmed; one that needs a
    secret or a provider's consent goes on to its connect page."""
    try:
        answer = vault.vault_connect(caller=_caller(request), integration_id=integration_id, confirmed=True)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("console:integrations")
    if answer["status"] == "pending":
        return redirect(answer["connectUrl"])
    messages.success(request, f"Connected {answer['integrationId']}.")
    return redirect("console:integrations")


@never_cache
@login_required
@require_POST
def integration_disconnect(request: HttpRequest, integration_id: str) -> HttpResponse:
    try:
        answer = vault.vault_disconnect(caller=_caller(request), integration_id=integration_id)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("console:integrations")
    if answer["status"] == "disconnected":
        affected = answer.get("affectedSkills") or []
        messages.success(request, f"Disconnected {integration_id}; its credentials are forgotten."
                         + (f" Skills that need it: {', '.join(affected)}." if affected else ""))
    else:
        messages.info(request, answer["message"])
    return redirect("console:integrations")


# --- import and export ---------------------------------------------------------------------

@never_cache
@login_required
@require_GET
def portfolio_export(request: HttpRequest) -> HttpResponse:
    """With type and name, that element's file; else the whole portfolio as a zip in DollhouseMCP's layout
    (what export_portfolio writes and import_portfolio reads)."""
    caller = _caller(request)
    try:
        type_text, name = _text(request, "type"), _text(request, "name")
        if name:
            element = selectors.element_find(caller=caller, name=name,
                                             element_type=element_type_parse(type_text) if type_text else None)
            is_memory = element.element_type == ElementType.MEMORY
            package = element_package(element, entries=selectors.memory_entries(memory=element) if is_memory else None)
            path = package_path(package)
            kind = "text/yaml" if is_memory else "text/markdown"
            response = HttpResponse(text_from_package(package).encode("utf-8"), content_type=f"{kind}; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="{path.name}"'
            return response
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("console:portfolio")
    # FileResponse closes the file once it is sent.
    archive = tempfile.SpooledTemporaryFile(max_size=EXPORT_IN_MEMORY_BYTES)  # noqa: SIM115
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        for path, body in selectors.portfolio_files(caller=caller):
            zipped.writestr(f"portfolio/{path.as_posix()}", body)
    archive.seek(0)
    return FileResponse(archive, as_attachment=True, filename=f"{request.user.get_username()}-portfolio.zip",
                        content_type="application/zip")


@never_cache
@login_required
@require_POST
def portfolio_import(request: HttpRequest) -> HttpResponse:
    """One element file (.md, or .yaml for a memory) imported as import_element imports it."""
    upload = request.FILES.get("file")
    try:
        if upload is None:
            raise InvalidInput("Choose an element file to import.", code="file_required")
        if upload.size > MAX_FILE_BYTES:
            raise InvalidInput(f"{upload.name}: at most {MAX_FILE_BYTES:,} bytes (got {upload.size:,}).",
                               code="file_too_large")
        filename = upload.name[:MAX_TEXT]
        try:
            text = upload.read(MAX_FILE_BYTES + 1).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"{filename} is not UTF-8 text.", code="invalid_file") from None
        if filename.endswith(MEMORY_SUFFIXES):
            package = package_from_memory_yaml(text, filename=filename)
        elif filename.endswith(MARKDOWN_SUFFIX):
            package = package_from_markdown(text, element_type=element_type_parse(request.POST.get("type", "")),
                                            filename=filename)
        else:
            raise InvalidInput(f"{filename}: an element file ends .md (a memory .yaml).", code="invalid_file")
        element, created = services.element_import(caller=_caller(request), package=package,
                                                   overwrite=request.POST.get("overwrite") == "on")
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("console:portfolio")
    messages.success(request, f"{'Imported' if created else 'Replaced'} {element.element_type} {element.name}.")
    return redirect(_element_url(element.element_type, element.name))


# --- playbooks -----------------------------------------------------------------------------

PLAYBOOK_EXECUTIONS_SHOWN = 10
TEMPLATES_SHOWN = 100
# An execution's input typed on the page; the API takes larger ones.
MAX_INPUT_CHARS = 20_000


def _when(moment: str | None) -> str:
    """An ISO time the selectors answer in the user's timezone, as the page shows it (minutes, that zone)."""
    return moment[:16].replace("T", " ") if moment else ""


def _triggers_shown(triggers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**trigger, "next": _when(trigger["nextFireAt"])} for trigger in triggers]


def _with_run_pages(caller: Caller, executions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The execution rows with `page`, the run page on this server: their `url` is the public deep
    link, which may name another host than the one the console is opened on."""
    runs = playbook_selectors.executions_owned(caller=caller).select_related("project").in_bulk(
        [row["executionId"] for row in executions])
    return [{**row, "page": run_page_url(runs[row["executionId"]])} for row in executions
            if row["executionId"] in runs]


@never_cache
@login_required
@require_GET
def playbooks(request: HttpRequest) -> HttpResponse:
    """Every playbook of the user with its status, triggers and last execution: what playbooks_list answers.
    With HX-Request, the list alone: the page asks for it again while a last execution is live."""
    caller, page = _caller(request), _page(request)
    listed = playbook_selectors.playbook_list(caller=caller, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    last = _with_run_pages(caller, [row["lastExecution"] for row in listed["playbooks"] if row["lastExecution"]])
    last_by_playbook = {row["playbookId"]: row for row in last}
    rows = [{**row, "triggers": _triggers_shown(row["triggers"]), "last": last_by_playbook.get(row["playbookId"])}
            for row in listed["playbooks"]]
    return page_or_fragment(request, "console/playbooks.html", "console/_playbooks.html", {
        "playbooks": rows, "total": listed["total"], "page": page, "has_previous": page > 1,
        "has_next": page * PAGE_SIZE < listed["total"],
        # Polled only while a last execution shown is still going: a finished one no longer changes.
        "live": any(row["last"]["status"] in playbook_selectors.ACTIVE for row in rows if row["last"]),
        "live_url": f"{reverse('console:playbooks')}?{urlencode({'page': page})}"})


def _input_fields(card: dict[str, Any]) -> list[dict[str, Any]]:
    required = set(card.get("required") or [])
    return [{"name": name, "type": spec.get("type", "") if isinstance(spec, dict) else "",
             "description": spec.get("description", "") if isinstance(spec, dict) else "",
             "required": name in required}
            for name, spec in (card.get("properties") or {}).items()]


def _example_input(template_id: str | None) -> str:
    """The template's example input, shown as the input box's placeholder: a shape to follow."""
    if not template_id:
        return ""
    try:
        example = templates.template_find(template_id=template_id).example_input
    except DomainError:
        return ""  # the template was disabled since; the playbook stands on its own
    return json.dumps(example, indent=2) if example else ""


def _playbook_page(request: HttpRequest, playbook_id: str, *, input_text: str = "", execute_error: str = "",
                   revealed: dict[str, Any] | None = None, status: int = 200) -> HttpResponse:
    caller = _caller(request)
    try:
        detail = playbook_selectors.playbook_detail(caller=caller, playbook_id=playbook_id)
        history = playbook_selectors.playbook_history(caller=caller, playbook_id=playbook_id,
                                                      limit=PLAYBOOK_EXECUTIONS_SHOWN)
    except DomainError as exc:
        return render(request, "console/playbook.html", {"error": exc.message}, status=exc.http_status)
    card, output = detail["plan"].get("input") or {}, detail["plan"].get("output") or {}
    fields = _input_fields(card)
    value = output.get("value")
    return render(request, "console/playbook.html", {
        "playbook": {**detail, "triggers": _triggers_shown(detail["triggers"])},
        "input_card": card, "input_fields": fields, "takes_input": bool(fields or card.get("required")),
        "steps": detail["plan"].get("steps", []), "output_card": output,
        "output_value": value if isinstance(value, str) or value is None else json.dumps(value, indent=2),
        "executions": _with_run_pages(caller, history["executions"]), "execution_total": history["total"],
        "any_enabled": any(t["enabled"] for t in detail["triggers"]),
        "any_disabled": any(not t["enabled"] for t in detail["triggers"]),
        "example_input": _example_input(detail["templateId"]), "input_text": input_text,
        "execute_error": execute_error, "max_input": MAX_INPUT_CHARS, "revealed": revealed,
    }, status=status)


@never_cache
@login_required
@require_GET
def playbook(request: HttpRequest, playbook_id: str) -> HttpResponse:
    """One playbook: what playbooks_get and playbooks_history answer, with Activate, Deactivate and Execute."""
    return _playbook_page(request, playbook_id)


def _playbook_url(playbook_id: str) -> str:
    return reverse("console:playbook", args=[playbook_id])


@never_cache
@login_required
@require_POST
def playbook_triggers(request: HttpRequest, playbook_id: str) -> HttpResponse:
    """Turn every trigger on or off through the service playbooks_trigger_activate uses."""
    enabled = request.POST.get("enabled") == "on"
    try:
        found = playbook_services.playbook_triggers_activate(caller=_caller(request), playbook_id=playbook_id,
                                                             enabled=enabled)
    except NotFound as exc:
        return render(request, "console/playbook.html", {"error": exc.message}, status=exc.http_status)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(_playbook_url(playbook_id))
    messages.success(request, f"Turned {'on' if enabled else 'off'} the triggers of {found.name}.")
    return redirect(_playbook_url(found.pk))


@never_cache
@login_required
@require_POST
def playbook_webhook_rotate(request: HttpRequest, playbook_id: str, trigger_id: str) -> HttpResponse:
    """Give a webhook trigger a new URL and signing secret, as POST .../rotate-secret/ does, and show
    them on this answer only: Atrium keeps the URL's digest and the secret sealed."""
    caller = _caller(request)
    try:
        trigger = playbook_selectors.trigger_owned(caller=caller, playbook_id=playbook_id, trigger_id=trigger_id)
        created = trigger_services.webhook_secret_rotate(caller=caller, trigger=trigger)
    except NotFound as exc:
        return render(request, "console/playbook.html", {"error": exc.message}, status=exc.http_status)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(_playbook_url(playbook_id))
    return _playbook_page(request, playbook_id, revealed={"triggerId": created.trigger.pk, **created.secrets})


def _execution_input(text: str) -> dict[str, Any] | None:
    """The input box's JSON; empty means no input. Anything else but a JSON object is refused here;
    whether the object suits the input card is execution_start's to say."""
    if not text.strip():
        return None
    if len(text) > MAX_INPUT_CHARS:
        raise InvalidInput(f"The input is at most {MAX_INPUT_CHARS:,} characters.", code="invalid_input")
    try:
        value = json_parse(text)
    except JsonRefused as exc:
        raise InvalidInput(f"The input is not JSON: {exc}", code="invalid_input") from None
    if not isinstance(value, dict):
        raise InvalidInput('The input must be a JSON object, such as {"repo": "atrium"}.', code="invalid_input")
    return value


@never_cache
@login_required
@require_POST
def playbook_execute(request: HttpRequest, playbook_id: str) -> HttpResponse:
    """Start an execution through execution_start, as playbooks_execute does, and open its run page. An
    input that is refused starts nothing, and the page shows why with what was typed."""
    caller = _caller(request)
    text = request.POST.get("input", "")
    try:
        found = playbook_services.playbook_get_owned(caller=caller, playbook_id=playbook_id)
    except DomainError as exc:
        return render(request, "console/playbook.html", {"error": exc.message}, status=exc.http_status)
    try:
        run = playbook_services.execution_start(caller=caller, playbook=found, input=_execution_input(text))
    except DomainError as exc:
        return _playbook_page(request, playbook_id, input_text=text, execute_error=exc.message,
                              status=exc.http_status)
    messages.success(request, f"Started execution {run.pk} of {found.name}.")
    return redirect(run_page_url(run))


@never_cache
@login_required
@require_GET
def playbook_templates(request: HttpRequest) -> HttpResponse:
    """The template gallery: templates_list, or with words templates_search, optionally in one category."""
    caller = _caller(request)
    context: dict[str, Any] = {"categories": templates.CATEGORIES, "q": "", "category": "", "error": ""}
    try:
        q, category = _text(request, "q"), _text(request, "category")
        context.update(q=q, category=category)
        if category and category not in templates.CATEGORIES:
            raise InvalidInput(f"category must be one of {', '.join(templates.CATEGORIES)}.",
                               code="invalid_parameter")
        if q:
            found = templates.template_search(caller=caller, query=q, category=category or None,
                                              limit=TEMPLATES_SHOWN)
        else:
            found = templates.template_list(caller=caller, category=category or None,
                                            limit=TEMPLATES_SHOWN)["templates"]
    except DomainError as exc:
        context["error"] = exc.message
        return render(request, "console/playbook_templates.html", context, status=exc.http_status)
    needed = list(dict.fromkeys(i for template in found for i in template["integrations"]))
    connected = {state["integrationId"]: state["connected"]
                 for state in integration_states(caller=caller, integration_ids=needed)}
    context.update(templates=[{**template, "needs": [(i, connected.get(i, False)) for i in template["integrations"]]}
                              for template in found], filtered=bool(q or category))
    return render(request, "console/playbook_templates.html", context)


@never_cache
@login_required
@require_POST
def template_instantiate(request: HttpRequest, template_id: str) -> HttpResponse:
    """A playbook from the template through playbook_instantiate, as templates_instantiate makes it: the
    template's triggers made, and off."""
    try:
        made = playbook_services.playbook_instantiate(caller=_caller(request), template_id=template_id)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("console:playbook-templates")
    messages.success(request, f"Made the playbook {made.name} from the template. Its triggers are off: connect "
                              "the integrations it needs, then turn them on.")
    # A webhook's URL and secret are shown once, when made; a session's messages are no place to keep them.
    for created in playbook_selectors.created_triggers(made):
        messages.info(request, f"Its webhook trigger {created['triggerId']} has a URL and a signing secret that "
                               "are shown only once: press New URL and secret beside it to see a new pair.")
    return redirect(_playbook_url(made.pk))
