"""The playbooks pages: the dashboard (what playbooks_list answers), a playbook's page with Activate,
Deactivate and Execute (the services playbooks_trigger_activate and playbooks_execute use), and the
template gallery with Instantiate (what templates_instantiate uses); nobody reaches another user's
playbook."""

import hashlib
from html import unescape

import pytest
from django.test import Client
from django.utils.html import escape

from core.caller import Caller
from integrations import crypto
from integrations.services import catalogue_sync
from runs.models import Run
from runs.views import run_page_url
from tests.conftest import hidden_inputs
from tests.playbook_helpers import playbook_make
from workflows import templates
from workflows.models import Playbook, Trigger
from workflows.playbooks import execution_start
from workflows.triggers import trigger_create

pytestmark = pytest.mark.django_db

DASHBOARD, GALLERY = "/playbooks/", "/playbooks/templates/"
NO_INPUT = {"input": {"type": "object"},
            "steps": [{"id": "greet", "title": "Say hello", "kind": "ai", "prompt": "Say hello."}],
            "output": {"value": "{{ greet.output }}"}}


def hidden_text(html: str, element_id: str) -> str:
    """The text of the <code id=...> element the page shows a secret in."""
    return unescape(html.split(f'<code id="{element_id}">', 1)[1].split("</code>", 1)[0])


def signed_in(member) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(member.user)
    return client


def page(playbook: Playbook) -> str:
    return f"/playbooks/{playbook.pk}/"


def post(client: Client, path: str, data: dict | None = None, *, form_page: str = DASHBOARD):
    token = hidden_inputs(client.get(form_page).content.decode())["csrfmiddlewaretoken"]
    return client.post(path, {"csrfmiddlewaretoken": token, **(data or {})})


def with_triggers(playbook: Playbook, *, enabled: bool) -> Playbook:
    caller = Caller.trusted(playbook.owner, via="command")
    trigger_create(caller=caller, playbook=playbook, spec={"type": "schedule", "preset": "every weekday at 9",
                                                           "enabled": enabled})
    trigger_create(caller=caller, playbook=playbook, spec={"type": "event", "event": "run.failed",
                                                           "enabled": enabled})
    return playbook


@pytest.fixture
def digest(alice) -> Playbook:
    return with_triggers(playbook_make(alice.user), enabled=False)


@pytest.fixture
def gallery(db) -> None:
    catalogue_sync(documents=[])
    templates.templates_sync()


def test_the_dashboard_shows_each_playbook_with_its_status_triggers_and_last_execution(alice, digest):
    playbook_make(alice.user, name="Evening recap")
    with_triggers(digest, enabled=True)
    execution = execution_start(caller=Caller.trusted(alice.user, via="command"), playbook=digest, input={})

    response = signed_in(alice).get(DASHBOARD)

    html = response.content.decode()
    assert response.status_code == 200
    assert "Morning digest" in html and "Evening recap" in html and "2 playbooks" in html
    assert "Healthy" in html and "Not Ready" in html and "It has no trigger" in html
    assert "At 09:00 on Monday through Friday" in html and "next <time" in html and "<code>run.failed</code>" in html
    assert f'<a href="{run_page_url(execution)}">{execution.pk}</a>' in html
    assert "never run" in html


def test_the_empty_dashboard_says_how_to_make_a_first_playbook(alice):
    html = signed_in(alice).get(DASHBOARD).content.decode()

    assert "No playbooks yet" in html and "playbooks_generate" in html and f'href="{GALLERY}"' in html


def test_the_navigation_links_playbooks_between_runs_and_integrations(alice):
    html = signed_in(alice).get(DASHBOARD).content.decode()

    assert html.index('href="/runs/"') < html.index(f'href="{DASHBOARD}">Playbooks') < html.index(
        'href="/integrations/"')


def test_a_playbooks_page_shows_its_plan_status_triggers_and_executions(alice, digest):
    execution = execution_start(caller=Caller.trusted(alice.user, via="command"), playbook=digest,
                                input={"repo": "atrium"})

    response = signed_in(alice).get(page(digest))

    html = response.content.decode()
    assert response.status_code == 200
    assert "<h1" in html and "Morning digest" in html and "Not Ready" in html
    assert "No trigger is active" in html and "Write the digest" in html and "<code>repo</code>" in html
    assert "{{ digest.output }}" in html and f"<code>playbook-{digest.pk}</code>" in html
    assert f'<a href="{run_page_url(execution)}">{execution.pk}</a>' in html
    assert "Activate triggers" in html and "Deactivate triggers" not in html
    assert 'name="input"' in html


def test_a_playbook_that_takes_no_input_is_executed_with_a_button_alone(alice):
    greeter = playbook_make(alice.user, name="Greeter", plan=NO_INPUT)

    html = signed_in(alice).get(page(greeter)).content.decode()

    assert "It takes no input." in html and 'name="input"' not in html and ">Execute</button>" in html
    assert "Not executed yet" in html and "No trigger: it runs only when you execute it" in html


def test_charlie_sees_none_of_alices_playbooks(alice, charlie, digest):
    client = signed_in(charlie)

    dashboard = client.get(DASHBOARD).content.decode()
    assert "Morning digest" not in dashboard and digest.pk not in dashboard and "No playbooks yet" in dashboard
    assert client.get(page(digest)).status_code == 404
    assert post(client, f"{page(digest)}triggers", {"enabled": "on"}).status_code == 404
    assert post(client, f"{page(digest)}execute", {"input": "{}"}).status_code == 404
    assert not Trigger.objects.filter(playbook=digest, enabled=True).exists()
    assert not Run.objects.filter(playbook=digest).exists()


def test_activate_turns_every_trigger_on_and_deactivate_turns_them_off(alice, digest):
    client = signed_in(alice)

    response = post(client, f"{page(digest)}triggers", {"enabled": "on"}, form_page=page(digest))

    assert response.status_code == 302 and response["Location"] == page(digest)
    assert list(digest.triggers.values_list("enabled", flat=True)) == [True, True]
    assert digest.triggers.get(kind="schedule").next_fire_at is not None
    html = client.get(page(digest)).content.decode()
    assert "Turned on the triggers of Morning digest." in html and "Deactivate triggers" in html

    post(client, f"{page(digest)}triggers", {"enabled": "off"}, form_page=page(digest))

    assert list(digest.triggers.values_list("enabled", flat=True)) == [False, False]
    assert digest.triggers.get(kind="schedule").next_fire_at is None


def test_activating_a_playbook_without_triggers_is_refused_with_a_message(alice):
    bare = playbook_make(alice.user, name="Bare")
    client = signed_in(alice)

    response = post(client, f"{page(bare)}triggers", {"enabled": "on"}, form_page=page(bare))

    assert response.status_code == 302
    assert "has no trigger to enable" in client.get(page(bare)).content.decode()
    assert not bare.triggers.exists()


def test_execute_starts_an_execution_and_opens_its_run_page(alice, digest):
    client = signed_in(alice)

    response = post(client, f"{page(digest)}execute", {"input": '{"repo": "atrium"}'}, form_page=page(digest))

    run = Run.objects.get(playbook=digest)
    assert response.status_code == 302 and response["Location"] == run_page_url(run)
    assert (run.owner, run.context, run.trigger) == (alice.user, {"repo": "atrium"}, None)
    assert f"Started execution {run.pk} of Morning digest." in client.get(response["Location"]).content.decode()


@pytest.mark.parametrize(("typed", "words"), [
    ('{"repo": ', "The input is not JSON"),
    ('["atrium"]', "The input must be a JSON object"),
    ('{"repo": 5}', "does not match the playbook&#x27;s input card"),
])
def test_input_the_service_refuses_starts_nothing_and_the_page_says_why(alice, digest, typed, words):
    response = post(signed_in(alice), f"{page(digest)}execute", {"input": typed}, form_page=page(digest))

    html = response.content.decode()
    assert response.status_code == 400
    assert words in html and 'role="alert"' in html
    assert f">{escape(typed)}</textarea>" in html  # what was typed stays in the box
    assert not Run.objects.filter(playbook=digest).exists()


def test_the_gallery_lists_the_templates_with_what_they_need(alice, gallery):
    response = signed_in(alice).get(GALLERY)

    html = response.content.decode()
    assert response.status_code == 200 and "<h1" in html
    assert "Daily GitHub issues digest" in html and "<code>slack_tools</code>" in html
    assert 'aria-label="Instantiate Log webhook deliveries to a memory"' in html


def test_the_gallery_searches_and_filters_by_category(alice, gallery):
    client = signed_in(alice)

    searched = client.get(GALLERY, {"q": "uptime"}).content.decode()
    knowledge = client.get(GALLERY, {"category": "knowledge"}).content.decode()
    nothing = client.get(GALLERY, {"q": "zebra crossing"}).content.decode()

    assert "template-uptime-check" in searched and "template-pr-review-summary" not in searched
    assert "template-webhook-to-memory" in knowledge and "template-uptime-check" not in knowledge
    assert "No template matches" in nothing


def test_an_unknown_category_is_refused_and_lists_nothing(alice, gallery):
    response = signed_in(alice).get(GALLERY, {"category": "gardening"})

    assert response.status_code == 400 and "category must be one of" in response.content.decode()
    assert "template-uptime-check" not in response.content.decode()


def test_the_empty_gallery_says_how_templates_arrive(alice):
    html = signed_in(alice).get(GALLERY).content.decode()

    assert "No templates yet" in html and "sync_templates" in html


def test_instantiate_makes_a_playbook_with_its_triggers_off_and_opens_it(alice, gallery):
    client = signed_in(alice)

    response = post(client, "/playbooks/templates/webhook-to-memory/instantiate", form_page=GALLERY)

    made = Playbook.objects.get(owner=alice.user)
    assert response.status_code == 302 and response["Location"] == page(made)
    assert made.template_id == "webhook-to-memory" and made.workflow is not None
    assert made.triggers.count() == 1 and not made.triggers.filter(enabled=True).exists()
    html = client.get(page(made)).content.decode()
    assert "Its triggers are off" in html and "New URL and secret" in html and "Activate triggers" in html


def test_new_url_and_secret_are_shown_once_and_the_old_ones_stop_working(alice, gallery):
    client = signed_in(alice)
    post(client, "/playbooks/templates/webhook-to-memory/instantiate", form_page=GALLERY)
    made = Playbook.objects.get(owner=alice.user)
    trigger = made.triggers.get()
    old_digest = trigger.webhook_token_digest

    response = post(client, f"{page(made)}triggers/{trigger.pk}/rotate", form_page=page(made))

    assert response.status_code == 200
    html = response.content.decode()
    url, secret = hidden_text(html, "webhook-url"), hidden_text(html, "webhook-secret")
    trigger.refresh_from_db()
    assert trigger.webhook_token_digest != old_digest
    assert trigger.webhook_token_digest == hashlib.sha256(url.rsplit("/", 1)[1].encode()).hexdigest()
    assert crypto.unseal(trigger.sealed_secret) == secret
    again = client.get(page(made)).content.decode()
    assert url not in again and secret not in again


def test_charlie_cannot_rotate_alices_webhook(alice, charlie, gallery):
    post(signed_in(alice), "/playbooks/templates/webhook-to-memory/instantiate", form_page=GALLERY)
    made = Playbook.objects.get(owner=alice.user)
    trigger = made.triggers.get()
    before = (trigger.webhook_token_digest, trigger.sealed_secret)

    response = post(signed_in(charlie), f"{page(made)}triggers/{trigger.pk}/rotate")

    assert response.status_code == 404
    trigger.refresh_from_db()
    assert (trigger.webhook_token_digest, trigger.sealed_secret) == before


def test_instantiating_an_unknown_template_makes_nothing(alice, gallery):
    client = signed_in(alice)

    response = post(client, "/playbooks/templates/no-such-template/instantiate", form_page=GALLERY)

    assert response.status_code == 302 and response["Location"] == GALLERY
    assert "Template not found" in client.get(GALLERY).content.decode()
    assert not Playbook.objects.exists()


@pytest.mark.parametrize(("method", "path"), [
    ("get", DASHBOARD), ("get", GALLERY), ("get", "/playbooks/pb123/"),
    ("post", "/playbooks/pb123/triggers"), ("post", "/playbooks/pb123/execute"),
    ("post", "/playbooks/pb123/triggers/1/rotate"),
    ("post", "/playbooks/templates/uptime-check/instantiate"),
])
def test_signed_out_users_are_sent_to_sign_in(db, method, path):
    response = getattr(Client(), method)(path)

    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=")
    assert not Playbook.objects.exists()
