"""The MCP-AQL operations that point the user at Atrium's web console, and the cache budget report.

DollhouseMCP's open_* operations start a local console and open a browser; a hosted server can do
neither, so these answer the URL of the matching console page (console.links) for the user to open.
Each tab's deep-link parameters are checked as its page checks them, so the link opens what it says.
"""

from __future__ import annotations

from typing import Any

from console.links import MAX_REFRESH_SECONDS, MAX_TEXT, TAB_PARAMS, TABS, console_url, since_parse
from core.errors import InvalidInput
from elements import cache_report
from elements.mcpaql import Call, Endpoint, Param, operation
from elements.selectors import LOG_CATEGORIES, LOG_LEVELS
from elements.types import element_type_parse

TAB = Param("tab", "string", False, "Tab to open: portfolio, logs, metrics, permissions or setup", "portfolio")
Q = Param("q", "string", False, "Pre-populate the search on the target tab")
TYPE = Param("type", "string", False, "Filter by element type (persona, skill, template, agent, memory, ensemble)")
NAME = Param("name", "string", False, "Open this element's page (with type when the name is not unique)")
LEVEL = Param("level", "string", False, "Minimum log level (debug, info, warn, error), logs tab")
CATEGORY = Param("category", "string", False, "Log category (application, security, performance, telemetry), "
                                            "logs tab")
SOURCE = Param("source", "string", False, "Log source filter (mcp, api, admin, command, web, task), logs tab")
SINCE = Param("since", "string", False, "Time range: ISO 8601 or relative (5m, 1h, 24h, 7d)")
REFRESH = Param("refresh", "number", False, f"Metrics tab: reload every N seconds (0 disables, at most "
                                            f"{MAX_REFRESH_SECONDS})")
OPENS_NOTHING = ("Atrium is hosted: it opens nothing on the server and answers the console page's url (with "
                 "tab and the deep-link parameters checked) for the user to open, signed in. Atrium extends the "
                 "reference with url, tab, params and opened: false.")


def _value(call: Call, key: str) -> str:
    if key == "refresh":
        number = call.number("refresh", None, low=0, high=MAX_REFRESH_SECONDS)
        return "" if number is None else str(number)
    value = (call.text(key) or "").strip()
    if len(value) > MAX_TEXT:
        raise InvalidInput(f"Parameter '{key}' is at most {MAX_TEXT} characters.", code="invalid_parameter")
    if not value:
        return ""
    if key == "type":
        return element_type_parse(value).value
    if key == "level" and value not in LOG_LEVELS:
        raise InvalidInput(f"level must be one of {', '.join(LOG_LEVELS)}.", code="invalid_parameter")
    if key == "category" and value not in LOG_CATEGORIES:
        raise InvalidInput(f"category must be one of {', '.join(LOG_CATEGORIES)}.", code="invalid_parameter")
    if key == "since":
        since_parse(value)  # refused here rather than on the page
    return value


def _link(call: Call, tab: str) -> dict[str, Any]:
    if tab not in TABS:
        raise InvalidInput(f"tab must be one of {', '.join(TABS)} (got {tab!r:.40}).", code="invalid_parameter")
    params = {key: _value(call, key) for key in TAB_PARAMS[tab]}
    params = {key: value for key, value in params.items() if value}
    ignored = sorted(k for k in ("q", "type", "name", "level", "category", "source", "since", "refresh")
                     if k not in TAB_PARAMS[tab] and call.params.get(k) not in (None, ""))
    if ignored:
        call.warnings.append(f"The {tab} tab does not read {', '.join(ignored)}: left out of the link.")
    url = console_url(tab, params)
    return {"url": url, "tab": tab, "params": params, "opened": False,
            "message": f"Open {url} in your browser (sign in to Atrium if asked)."}


@operation("open_portfolio_browser", Endpoint.READ,
           "Open the portfolio web console, deep-linked to a tab with pre-populated search and filters. "
           + OPENS_NOTHING, params=(TAB, Q, TYPE, NAME, LEVEL, CATEGORY, SOURCE, SINCE, REFRESH),
           returns="{url, tab, params, opened, message}",
           examples=('{"operation": "open_portfolio_browser", "params": {"tab": "portfolio", "type": "skill", '
                     '"q": "review"}}',))
def open_portfolio_browser(call: Call) -> dict[str, Any]:
    return _link(call, (call.text("tab") or "portfolio").strip())


@operation("open_console", Endpoint.READ, "The same as open_portfolio_browser (alias). " + OPENS_NOTHING,
           params=(TAB, Q, TYPE, NAME, LEVEL, CATEGORY, SOURCE, SINCE, REFRESH),
           returns="{url, tab, params, opened, message}")
def open_console(call: Call) -> dict[str, Any]:
    return open_portfolio_browser(call)


@operation("open_logs", Endpoint.READ, "Open the management console on the logs tab with optional filters: your "
           "audit trail, the entries query_logs answers. " + OPENS_NOTHING,
           params=(LEVEL, CATEGORY, SOURCE, Q, SINCE), returns="{url, tab, params, opened, message}")
def open_logs(call: Call) -> dict[str, Any]:
    return _link(call, "logs")


@operation("open_metrics", Endpoint.READ, "Open the management console on the metrics tab with optional filters. "
           + OPENS_NOTHING, params=(SINCE, REFRESH), returns="{url, tab, params, opened, message}")
def open_metrics(call: Call) -> dict[str, Any]:
    return _link(call, "metrics")


@operation("open_permissions", Endpoint.READ, "Open the management console on the permissions tab: Atrium's "
           "approvals page (pending CLI permission requests, danger-zone codes). " + OPENS_NOTHING,
           returns="{url, tab, params, opened, message}")
def open_permissions(call: Call) -> dict[str, Any]:
    return _link(call, "permissions")


@operation("open_setup", Endpoint.READ, "Open the management console on the setup tab: how to connect each MCP "
           "client to this server. " + OPENS_NOTHING, returns="{url, tab, params, opened, message}")
def open_setup(call: Call) -> dict[str, Any]:
    return _link(call, "setup")


@operation("get_cache_budget_report", Endpoint.READ,
           "Get global cache memory budget report with per-cache diagnostics: each cache's entries and bytes "
           "against its budget, utilization and hit rate (null where a cache does not count them). Atrium's "
           "caches: collection-index, shared-cache, search-index, mcp-sessions and the worker's compiled-pattern "
           "caches; scope says whose entries are counted (server, caller or process) and countedIn where hits "
           "are counted. nearBudget names the caches at 90% of a budget or more.",
           returns="{caches: [{name, kind, description, entries, budgetEntries, bytes, budgetBytes, utilization, "
                   "hits, misses, hitRate, scope, countedIn, ...}], nearBudget, generatedAt}")
def get_cache_budget_report(call: Call) -> dict[str, Any]:
    return cache_report.cache_budget_report(caller=call.caller)
