"""The parts of the console that refresh themselves: the approvals page's pending lists, the runs list
and the playbooks dashboard answer htmx (HX-Request) with their fragment alone, poll only while
something shown can still change, never show another user's rows, and Approve / Deny posted by
htmx answer with the updated list."""

import pytest
from django.test import Client
from django.urls import reverse

from core.caller import Caller
from elements.models import CliApproval
from runs import engine
from runs.models import Run
from tests.conftest import hidden_inputs
from tests.playbook_helpers import playbook_make
from tests.test_approvals_page import block, cli_request
from tests.test_run_page import REVIEW, save, start
from workflows.playbooks import execution_start
from workflows.scoping import Scope

pytestmark = pytest.mark.django_db

APPROVALS, RUNS, PLAYBOOKS = "/approvals/", "/runs/", "/playbooks/"
HTMX = {"HX-Request": "true", "HX-Current-URL": "http://testserver/approvals/"}
POLLS = 'hx-trigger="every'


def signed_in(member) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(member.user)
    return client


def fragment(client: Client, path: str, data: dict | None = None):
    return client.get(path, data or {}, headers=HTMX)


def hx_decide(client: Client, request: CliApproval, decision: str):
    """Approve once, Approve for this session or Deny, as htmx posts the form: its fields, the CSRF token among them."""
    token = hidden_inputs(client.get(APPROVALS).content.decode())["csrfmiddlewaretoken"]
    return client.post(reverse("approvals:decide", args=[request.pk]),
                       {"csrfmiddlewaretoken": token, "decision": decision}, headers=HTMX)


def assert_fragment_only(response) -> str:
    html = response.content.decode()
    assert "<html" not in html and "<nav" not in html and "<h1" not in html
    assert "HX-Request" in response["Vary"]
    return html


def cancel(run: Run) -> None:
    engine.run_cancel(caller=Caller.trusted(run.owner, via="command"), scope=Scope(owner=run.owner, project=None),
                      run_id=run.pk)


# --- approvals -----------------------------------------------------------------------------------

def test_the_approvals_fragment_is_the_pending_lists_alone_and_keeps_polling(alice):
    request = cli_request(alice)
    block(alice)

    response = fragment(signed_in(alice), APPROVALS)

    html = assert_fragment_only(response)
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="approvals-pending"')
    assert f'id="{request.pk}"' in html and "npm publish" in html and "night-shift" in html
    assert 'hx-trigger="every 3s"' in html and f'hx-get="{APPROVALS}"' in html
    assert f'hx-post="{reverse("approvals:decide", args=[request.pk])}"' in html
    assert 'id="approvals-notice"' not in html  # a poll leaves the notice above the lists alone


def test_the_whole_page_includes_the_same_fragment(alice):
    request = cli_request(alice)

    html = signed_in(alice).get(APPROVALS).content.decode()

    assert "<html" in html and '<h1 id="approvals-heading">' in html and html.count('id="approvals-notice"') == 1
    assert 'id="approvals-pending"' in html and f'id="{request.pk}"' in html
    assert "django_htmx/htmx-2.min.js" in html and '"allowEval": false' in html


def test_an_empty_list_keeps_polling_so_a_new_request_appears(alice):
    client = signed_in(alice)
    empty = fragment(client, APPROVALS).content.decode()
    request = cli_request(alice)

    later = fragment(client, APPROVALS).content.decode()

    assert "Nothing is waiting for you" in empty and 'hx-trigger="every 3s"' in empty
    assert f'id="{request.pk}"' in later and "Nothing is waiting for you" not in later


def test_a_history_restore_gets_the_whole_page(alice):
    response = signed_in(alice).get(APPROVALS, headers={**HTMX, "HX-History-Restore-Request": "true"})

    assert "<html" in response.content.decode()


def test_another_users_fragment_shows_none_of_alices_requests(alice, charlie):
    cli_request(alice)
    block(alice)

    html = fragment(signed_in(charlie), APPROVALS).content.decode()

    assert "Nothing is waiting for you" in html and "npm publish" not in html and "night-shift" not in html


@pytest.mark.parametrize(("button", "status", "scope", "notice"), [
    ("single", "approved", "single", "Approved Bash once."),
    ("tool_session", "approved", "tool_session", "Approved Bash for the rest of this session."),
    ("deny", "denied", "", "Denied Bash.")])
def test_a_decision_posted_by_htmx_answers_with_the_list_without_the_request(alice, button, status, scope, notice):
    decided, other = cli_request(alice), cli_request(alice, {"command": "make deploy prod"})
    client = signed_in(alice)

    response = hx_decide(client, decided, button)

    html = assert_fragment_only(response)
    assert response.status_code == 200
    assert f'id="{decided.pk}"' not in html and "npm publish" not in html
    assert f'id="{other.pk}"' in html and "make deploy prod" in html
    assert f'<div id="approvals-notice" hx-swap-oob="innerHTML"><ul class="messages"><li>{notice}</li></ul>' in html
    row = CliApproval.objects.get(pk=decided.pk)
    assert (row.status, row.scope, row.decided_via) == (status, scope, "web") and row.decided_at is not None
    assert CliApproval.objects.get(pk=other.pk).status == "pending"
    # The notice was given in the fragment: it does not turn up again on the next page.
    assert notice not in client.get(APPROVALS).content.decode()


def test_the_last_decision_answers_with_the_empty_list(alice):
    request = cli_request(alice)

    html = hx_decide(signed_in(alice), request, "single").content.decode()

    assert "Nothing is waiting for you" in html and 'hx-trigger="every 3s"' in html
    assert CliApproval.objects.get(pk=request.pk).status == "approved"


def test_a_decision_on_a_decided_request_answers_the_list_with_the_error(alice):
    request = cli_request(alice)
    client = signed_in(alice)
    hx_decide(client, request, "deny")

    response = hx_decide(client, request, "single")

    html = assert_fragment_only(response)
    assert response.status_code == 400 and "Nothing is waiting for you" in html
    assert f"CLI approval request &#x27;{request.pk}&#x27; was already denied." in html
    assert 'hx-swap-oob="innerHTML"><p class="error" role="alert">' in html
    assert CliApproval.objects.get(pk=request.pk).status == "denied"


def test_a_decision_posted_by_htmx_needs_the_csrf_token(alice):
    request = cli_request(alice)

    response = signed_in(alice).post(reverse("approvals:decide", args=[request.pk]), {"decision": "single"},
                                     headers=HTMX)

    assert response.status_code == 403 and CliApproval.objects.get(pk=request.pk).status == "pending"


def test_another_user_cannot_decide_alices_request_through_htmx(alice, charlie):
    request = cli_request(alice)

    response = hx_decide(signed_in(charlie), request, "single")

    html = assert_fragment_only(response)
    assert response.status_code == 404 and "npm publish" not in html
    assert CliApproval.objects.get(pk=request.pk).status == "pending"


# --- runs ----------------------------------------------------------------------------------------

@pytest.fixture
def runs(alice):
    save(alice, "review", REVIEW)
    return {"waiting": start(alice), "done": start(alice, context={"go": False})}


def test_the_runs_fragment_is_the_list_alone_and_polls_while_a_run_is_live(alice, runs):
    response = fragment(signed_in(alice), RUNS)

    html = assert_fragment_only(response)
    assert response.status_code == 200 and 'id="runs-live"' in html
    assert f">{runs['waiting'].pk}</a>" in html and f">{runs['done'].pk}</a>" in html
    assert 'hx-trigger="every 3s"' in html and 'hx-get="/runs/?page=1"' in html
    assert 'name="workflow"' not in html  # the filter form is the page's, not the fragment's


def test_the_runs_fragment_stops_polling_when_no_run_is_live(alice, runs):
    cancel(runs["waiting"])

    html = fragment(signed_in(alice), RUNS).content.decode()

    assert f">{runs['waiting'].pk}</a>" in html and "cancelled" in html and POLLS not in html


def test_the_runs_poll_keeps_the_filters(alice, runs):
    html = fragment(signed_in(alice), RUNS, {"status": "paused", "since": "1h"}).content.decode()

    assert f">{runs['waiting'].pk}</a>" in html and f">{runs['done'].pk}</a>" not in html
    assert 'hx-get="/runs/?status=paused&amp;since=1h&amp;page=1"' in html


def test_the_filter_form_asks_for_the_list_and_pushes_its_url(alice, runs):
    html = signed_in(alice).get(RUNS).content.decode()

    assert 'hx-get="/runs/" hx-target="#runs-live" hx-swap="outerHTML" hx-push-url="true"' in html
    assert 'id="runs-live"' in html and POLLS in html


def test_a_bad_filter_answers_the_fragment_with_the_error(alice, runs):
    response = fragment(signed_in(alice), RUNS, {"status": "asleep"})

    html = assert_fragment_only(response)
    assert response.status_code == 400 and "status must be one of" in html and runs["waiting"].pk not in html
    assert POLLS not in html


def test_another_users_runs_fragment_shows_none_of_alices(alice, charlie, runs):
    html = fragment(signed_in(charlie), RUNS).content.decode()

    assert "No runs yet" in html and runs["waiting"].pk not in html and runs["done"].pk not in html
    assert POLLS not in html  # alice's live run keeps no page of charlie's polling


# --- playbooks -----------------------------------------------------------------------------------

@pytest.fixture
def execution(alice) -> Run:
    """Alice's playbook with an execution paused at its AI step: live."""
    return execution_start(caller=Caller.trusted(alice.user, via="command"), playbook=playbook_make(alice.user),
                           input={})


def test_the_playbooks_fragment_is_the_list_alone_and_polls_while_an_execution_is_live(alice, execution):
    response = fragment(signed_in(alice), PLAYBOOKS)

    html = assert_fragment_only(response)
    assert response.status_code == 200 and 'id="playbooks-live"' in html
    assert "Morning digest" in html and f">{execution.pk}</a>" in html
    assert f'<span class="badge">{Run.objects.get(pk=execution.pk).status}</span>' in html
    assert 'hx-trigger="every 5s"' in html and 'hx-get="/playbooks/?page=1"' in html


def test_the_playbooks_fragment_stops_polling_when_no_execution_is_live(alice, execution):
    cancel(execution)

    html = fragment(signed_in(alice), PLAYBOOKS).content.decode()

    assert f">{execution.pk}</a>" in html and "cancelled" in html and POLLS not in html


def test_a_dashboard_without_executions_does_not_poll(alice):
    playbook_make(alice.user)

    page, part = signed_in(alice).get(PLAYBOOKS).content.decode(), fragment(signed_in(alice), PLAYBOOKS)

    assert 'id="playbooks-live"' in page and "never run" in page and POLLS not in page
    assert "never run" in part.content.decode() and POLLS not in part.content.decode()


def test_another_users_playbooks_fragment_shows_none_of_alices(alice, charlie, execution):
    html = fragment(signed_in(charlie), PLAYBOOKS).content.decode()

    assert "No playbooks yet" in html and "Morning digest" not in html and execution.pk not in html
    assert POLLS not in html
