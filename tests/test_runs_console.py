"""The runs list with its filters, and Cancel and Re-run on the run page: for the run's owner only,
through runs.engine's run_cancel and run_rerun."""

import pytest

from accounts.models import AuditEvent
from runs.models import Run
from tests.conftest import hidden_inputs
from tests.test_run_page import PARENT, REVIEW, page_url, save, signed_in, start

pytestmark = pytest.mark.django_db

LIST = "/runs/"


def post(client, run: Run, action: str):
    token = hidden_inputs(client.get(page_url(run)).content.decode())["csrfmiddlewaretoken"]
    return client.post(f"/open/runs/{run.pk}/{action}", {"csrfmiddlewaretoken": token})


@pytest.fixture
def runs(alice, bob):
    save(alice, "review", REVIEW)
    save(alice, "release", PARENT)
    save(bob, "review", REVIEW)
    waiting = start(alice)  # paused at its agent step
    done = start(alice, context={"go": False})  # straight to its end
    released = start(alice, "release")
    theirs = start(bob)
    return {"waiting": waiting, "done": done, "released": released, "theirs": theirs}


def listed(html: str, runs: dict) -> set[str]:
    return {name for name, run in runs.items() if f">{run.pk}</a>" in html}


def test_the_list_shows_the_users_own_runs_without_subworkflows(alice, runs):
    html = signed_in(alice).get(LIST).content.decode()

    assert listed(html, runs) == {"waiting", "done", "released"}
    child = Run.objects.get(parent=runs["released"])
    assert f">{child.pk}</a>" not in html


@pytest.mark.parametrize(("query", "expected"), [
    ({"status": "completed"}, {"done"}),
    ({"workflow": "release"}, {"released"}),
    ({"project": "global", "since": "1h"}, {"waiting", "done", "released"}),
    ({"project": "github.com/acme/site"}, set()),
])
def test_the_filters_narrow_the_list(alice, runs, query, expected):
    assert listed(signed_in(alice).get(LIST, query).content.decode(), runs) == expected


@pytest.mark.parametrize(("query", "words"), [({"status": "asleep"}, "status must be one of"),
                                               ({"since": "soon"}, "since must be an ISO 8601")])
def test_a_bad_filter_is_refused_and_lists_nothing(alice, runs, query, words):
    response = signed_in(alice).get(LIST, query)

    assert response.status_code == 400 and words in response.content.decode()
    assert listed(response.content.decode(), runs) == set()


def test_an_empty_list_says_what_to_do(alice):
    assert "No runs yet" in signed_in(alice).get(LIST).content.decode()


def test_cancel_on_the_page_cancels_the_run(alice, runs):
    client = signed_in(alice, enforce_csrf_checks=True)

    response = post(client, runs["waiting"], "cancel")

    assert response.status_code == 302 and response["Location"] == page_url(runs["waiting"])
    runs["waiting"].refresh_from_db()
    assert runs["waiting"].status == Run.Status.CANCELLED
    assert AuditEvent.objects.filter(actor=alice.user, action="run.cancel", via="web").count() == 1
    assert "Cancel run" not in client.get(page_url(runs["waiting"])).content.decode()


def test_re_run_starts_the_same_definition_and_context_again(alice, runs):
    client = signed_in(alice, enforce_csrf_checks=True)
    old = runs["done"]

    response = post(client, old, "rerun")

    again = Run.objects.filter(owner=alice.user).exclude(pk__in=[r.pk for r in runs.values()]).exclude(
        parent__isnull=False).get()
    assert response.status_code == 302 and response["Location"] == page_url(again)
    assert (again.definition, again.context, again.workflow_key) == (old.definition, old.context, old.workflow_key)
    assert again.status == Run.Status.COMPLETED
    assert AuditEvent.objects.get(actor=alice.user, action="run.rerun").detail["of"] == old.pk


def test_cancelling_an_ended_run_says_why_and_changes_nothing(alice, runs):
    client = signed_in(alice, enforce_csrf_checks=True)

    response = post(client, runs["done"], "cancel")

    assert response.status_code == 302
    assert "only a running or paused run can be cancelled" in client.get(page_url(runs["done"])).content.decode()
    runs["done"].refresh_from_db()
    assert runs["done"].status == Run.Status.COMPLETED


def test_a_subworkflow_is_re_run_through_its_parent(alice, runs):
    child = Run.objects.get(parent=runs["released"])
    client = signed_in(alice)

    assert "Re-run" not in client.get(page_url(child)).content.decode()
    token = hidden_inputs(client.get(page_url(runs["released"])).content.decode())["csrfmiddlewaretoken"]
    client.post(f"/open/runs/{child.pk}/rerun", {"csrfmiddlewaretoken": token})
    assert "is a subworkflow of run" in client.get(page_url(child)).content.decode()
    assert Run.objects.filter(owner=alice.user).count() == 4


def test_another_user_can_neither_cancel_nor_re_run(alice, bob, runs):
    client = signed_in(bob)

    for action in ("cancel", "rerun"):
        assert client.post(f"/open/runs/{runs['waiting'].pk}/{action}").status_code == 404
    runs["waiting"].refresh_from_db()
    assert runs["waiting"].status == Run.Status.PAUSED
    assert Run.objects.filter(owner=alice.user).count() == 4
