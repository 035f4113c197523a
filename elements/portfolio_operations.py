"""The MCP-AQL operations of the GitHub portfolio: thin over elements.portfolio_sync.

The GitHub token stays in accounts.github and elements.portfolio_git: nothing here sees it, and no
answer carries it.
"""

from __future__ import annotations

from typing import Any

from core.errors import InvalidInput
from elements import portfolio_sync
from elements.gatekeeper import POLICY_CHANGE, SETTINGS_CHANGE
from elements.mcpaql import Call, Endpoint, Param, operation
from elements.models import PortfolioRemote

MODES_TEXT = ("additive (default: adds and updates, never deletes), mirror (also deletes what the source side "
              "removed since the last sync) or backup (additive, and the source side wins every conflict)")
REPORT = ("{direction, mode, force, dry_run, added, updated, deleted, conflicts, forced, kept, refused, unreadable, "
          "commit?}: each list holds {element_type, element_name, path, ...}")
ELEMENT_OPERATIONS = ("list-remote", "download", "upload", "compare")
CONFIG_KEYS = ("auto_sync", "auto_submit", "repository_name")


def _remote_data(remote: PortfolioRemote) -> dict[str, Any]:
    return {"repository": str(remote), "url": remote.html_url or None, "default_branch": remote.default_branch,
            "private": remote.private}


@operation("init_portfolio", Endpoint.CREATE,
           "Initialize a new GitHub portfolio repository: creates it under your GitHub account (POST /user/repos) "
           "and records it as your portfolio; one that already exists under that name is adopted, not refused. "
           "Needs a GitHub sign-in (setup_github_auth). Atrium extends the reference with created (false when "
           "adopted) and validates repository_name as GitHub does.", params=(
               Param("repository_name", "string", False, "Name for the portfolio repository",
                     portfolio_sync.DEFAULT_REPOSITORY),
               Param("private", "boolean", False, "Whether the repository should be private", False),
               Param("description", "string", False, "Repository description"),
           ), returns="{repository, url, default_branch, private, created, message}",
           examples=('{"operation": "init_portfolio", "params": {"repository_name": "dollhouse-portfolio", '
                     '"private": true}}',))
def init_portfolio(call: Call) -> dict[str, Any]:
    remote, created = portfolio_sync.portfolio_init(
        caller=call.caller, repository_name=call.text("repository_name"), private=call.flag("private"),
        description=call.text("description") or "")
    verb = "Created" if created else "Adopted the existing repository"
    return {**_remote_data(remote), "created": created,
            "message": f"{verb} {remote}; sync_portfolio pushes your elements to it."}


def _pull_with_policies(params: dict[str, Any]) -> str:
    pulls = params.get("direction") == "pull"
    return POLICY_CHANGE if pulls and params.get("accept_policies") is True else ""


@operation("sync_portfolio", Endpoint.CREATE,
           "Sync local portfolio with GitHub repository, element by element. push commits your changed elements "
           "(all types, memories too) to the default branch in DollhouseMCP's portfolio layout; pull imports the "
           "repository's changes through the same validation as import_portfolio. An element changed on both sides "
           "since the last sync is a conflict: reported and left unchanged unless force, with which the side the "
           "sync comes from wins (local on push, remote on pull). A change only on the other side is left for the "
           f"other direction. mode: {MODES_TEXT}. dry_run answers exactly what would change and changes nothing. "
           "Atrium extends the reference with accept_policies: a pulled element that sets a gatekeeper policy is "
           "refused unless it is true, and then the call needs a confirmation each time.", params=(
               Param("direction", "string", False, "push or pull", "push"),
               Param("mode", "string", False, "additive, mirror or backup", "additive"),
               Param("force", "boolean", False, "Force sync even with conflicts", False),
               Param("dry_run", "boolean", False, "Preview changes without applying", False),
               Param("accept_policies", "boolean", False, "Pull: also import elements that set a gatekeeper "
                                                          "policy", False),
           ), returns=REPORT,
           examples=('{"operation": "sync_portfolio", "params": {"direction": "push"}}',
                     '{"operation": "sync_portfolio", "params": {"direction": "pull", "dry_run": true}}'),
           explicit=_pull_with_policies)
def sync_portfolio(call: Call) -> dict[str, Any]:
    return portfolio_sync.portfolio_sync(
        caller=call.caller, direction=call.text("direction") or "push", mode=call.text("mode") or "additive",
        force=call.flag("force"), dry_run=call.flag("dry_run"), accept_policies=call.flag("accept_policies"))


def _download_with_policies(params: dict[str, Any]) -> str:
    options = params.get("options")
    accepts = isinstance(options, dict) and options.get("accept_policies") is True
    return POLICY_CHANGE if params.get("operation") == "download" and accepts else ""


def _option(options: dict[str, Any], key: str) -> bool:
    value = options.get(key, False)
    if not isinstance(value, bool):
        raise InvalidInput(f"options.{key} must be true or false.", code="invalid_parameter")
    return value


@operation("portfolio_element_manager", Endpoint.CREATE,
           "Manage individual elements between local and GitHub: list-remote lists the elements at the "
           "repository's head (element_type filters), download pulls one element, upload pushes one, compare shows "
           "both sides of one (state in_sync, local_ahead, remote_ahead or conflict, and a unified diff from "
           "remote to local). download and upload are sync_portfolio for one element: a conflict is left unless "
           "options.force, and options.dry_run changes nothing. Atrium extends the reference with "
           "options.accept_policies, as sync_portfolio's.", params=(
               Param("operation", "string", True, "list-remote, download, upload or compare"),
               Param("element_name", "string", False, "Element name to operate on"),
               Param("element_type", "string", False, "Element type"),
               Param("options", "object", False, "{force?, dry_run?, accept_policies?}"),
           ), returns="list-remote: {elements, total, unreadable}; download/upload: sync_portfolio's report; "
                      "compare: {element_type, element_name, path, state, local, remote, local_changed, "
                      "remote_changed, last_synced, diff, diff_truncated}",
           examples=('{"operation": "portfolio_element_manager", "params": {"operation": "upload", '
                     '"element_name": "code-reviewer", "element_type": "persona"}}',),
           explicit=_download_with_policies)
def portfolio_element_manager(call: Call) -> dict[str, Any]:
    sub = call.text("operation", required=True)
    if sub not in ELEMENT_OPERATIONS:
        raise InvalidInput(f"operation must be one of {', '.join(ELEMENT_OPERATIONS)}.", code="invalid_parameter")
    options = call.obj("options") or {}
    if sub == "list-remote":
        _, listed, unreadable = portfolio_sync.remote_elements(caller=call.caller, element_type=call.element_type)
        elements = [{k: v for k, v in e.items() if k != "package"} for e in listed]
        return {"elements": elements, "total": len(elements), "unreadable": unreadable}
    key = (call.type_required().value, call.name())
    if sub == "compare":
        return portfolio_sync.element_compare(caller=call.caller, key=key)
    return portfolio_sync.portfolio_sync(
        caller=call.caller, direction="pull" if sub == "download" else "push", force=_option(options, "force"),
        dry_run=_option(options, "dry_run"), accept_policies=_option(options, "accept_policies"), only=key)


@operation("portfolio_status", Endpoint.READ,
           "Check GitHub portfolio repository status and element counts: the repository, whether it exists on "
           "GitHub, its URL, element counts per type in the repository and locally, the last sync and the local "
           "changes not yet pushed. With another GitHub user's username: whether their portfolio repository exists. "
           "Atrium extends the reference with initialized, unreadable, auto_sync and last_error.", params=(
               Param("username", "string", False, "GitHub username to check"),
           ), returns="{username, initialized, repository, exists, url, private?, default_branch?, local, remote?, "
                      "last_sync?, pending_local_changes?, auto_sync?, last_error?}")
def portfolio_status(call: Call) -> dict[str, Any]:
    username = (call.text("username") or "").strip()
    if username and not portfolio_sync.REPOSITORY_NAME.fullmatch(username):
        raise InvalidInput("username must be a GitHub login.", code="invalid_parameter")
    return portfolio_sync.portfolio_status(caller=call.caller, username=username or None)


def _changes_config(params: dict[str, Any]) -> str:
    return SETTINGS_CHANGE if any(params.get(key) is not None for key in CONFIG_KEYS) else ""


@operation("portfolio_config", Endpoint.READ,
           "Configure portfolio settings; without parameters, answers them. auto_sync: after each change to your "
           "elements (create, edit, delete, import, memory entries) a background push of your portfolio follows "
           "within seconds, one at a time however many changes you make. auto_submit is stored only: Atrium does "
           "not submit elements to the collection by itself. repository_name: the repository init_portfolio uses "
           "when given none (once a portfolio is initialized, init_portfolio switches it). A change needs a "
           "confirmation each time. Atrium extends the reference with initialized.", params=(
               Param("auto_sync", "boolean", False, "Enable automatic syncing"),
               Param("auto_submit", "boolean", False, "Automatically submit to collection (stored only)"),
               Param("repository_name", "string", False, "Portfolio repository name"),
           ), returns="{auto_sync, auto_submit, repository_name, initialized}", explicit=_changes_config, writes=True)
def portfolio_config(call: Call) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key in ("auto_sync", "auto_submit"):
        if call.params.get(key) is not None:
            values[key] = call.flag(key)
    if call.params.get("repository_name") is not None:
        values["repository_name"] = call.text("repository_name")
    if not values:
        return portfolio_sync.config_data(PortfolioRemote.objects.filter(user=call.caller.user).first())
    return portfolio_sync.portfolio_configure(caller=call.caller, **values)
