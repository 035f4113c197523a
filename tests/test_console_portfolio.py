"""The element page: Markdown rendered safely, the sessions an element is active in, editing through
element_edit (a stale form refused), revisions compared and restored; nobody else's element."""

import re

import pytest
from django.test import Client

from accounts.services import mcp_session_open
from core.caller import Caller
from elements.models import Activation, Element, ElementRevision
from elements.services import element_create, element_edit
from elements.types import ElementType
from tests.conftest import hidden_inputs

pytestmark = pytest.mark.django_db

PAGE = "/portfolio/"
SKILL = {"type": "skill", "name": "code-review"}


@pytest.fixture
def skill(alice) -> Element:
    caller = Caller.trusted(alice.user, via="mcp")
    element = element_create(caller=caller, element_type=ElementType.SKILL, name="code-review", params={
        "description": "Reviews pull requests.", "tags": ["review"],
        "content": "## Steps\n\n1. Read the **diff**.\n\n<div class=\"raw\">raw html</div> [x](data:text/html,hi)"})
    return element_edit(caller=caller, element=element, changes={"description": "Reviews pull requests well."})


def signed_in(member) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(member.user)
    return client


def form(client: Client, query: dict, action: str) -> dict[str, str]:
    """The fields of the page's form that posts to `action` (its hidden inputs)."""
    html = client.get(PAGE, query).content.decode()
    found = re.search(rf'<form method="post" action="{re.escape(action)}">(.*?)</form>', html, re.S)
    assert found, action
    return hidden_inputs(found.group(1))


def test_markdown_is_rendered_and_raw_html_and_script_links_are_not(alice, skill):
    html = signed_in(alice).get(PAGE, SKILL).content.decode()

    assert "<h2>Steps</h2>" in html and "<strong>diff</strong>" in html
    assert '<div class="raw">' not in html and "&lt;div class=&quot;raw&quot;&gt;raw html" in html
    assert 'href="data:' not in html


def test_the_page_names_the_sessions_the_element_is_active_in(alice, skill):
    session = mcp_session_open(caller=Caller.trusted(alice.user, via="mcp"), transport="http",
                               client_name="Claude Code")
    Activation.objects.create(session=session, element=skill)

    html = signed_in(alice).get(PAGE, SKILL).content.decode()

    assert "Claude Code" in html and "badge-open" in html


def test_an_edit_saves_through_the_service_and_keeps_a_revision(alice, skill):
    client = signed_in(alice)
    fields = form(client, SKILL, "/portfolio/edit")
    before = ElementRevision.objects.filter(element=skill).count()

    response = client.post("/portfolio/edit", {**fields, "description": "Reviews with care.", "tags": "review, care",
                                               "instructions": "", "content": "Look twice."})

    assert response.status_code == 302
    skill.refresh_from_db()
    assert (skill.description, skill.tags, skill.content) == ("Reviews with care.", ["review", "care"], "Look twice.")
    assert ElementRevision.objects.filter(element=skill).count() == before + 1


def test_an_edit_from_a_stale_page_is_refused_and_changes_nothing(alice, skill):
    client = signed_in(alice)
    fields = form(client, SKILL, "/portfolio/edit")
    element_edit(caller=Caller.trusted(alice.user, via="mcp"), element=skill, changes={"content": "Changed meanwhile."})

    response = client.post("/portfolio/edit", {**fields, "description": "Mine.", "tags": "", "instructions": "",
                                               "content": "Overwrite."})

    assert response.status_code == 412 and "changed" in response.content.decode()
    skill.refresh_from_db()
    assert (skill.description, skill.content) == ("Reviews pull requests well.", "Changed meanwhile.")
    assert 'value="Mine."' in response.content.decode()  # what was typed is kept on the page


def test_an_invalid_edit_is_refused_with_why(alice, skill):
    client = signed_in(alice)
    fields = form(client, SKILL, "/portfolio/edit")

    response = client.post("/portfolio/edit", {**fields, "description": "x" * 600, "tags": "", "instructions": "",
                                               "content": "c"})

    assert response.status_code == 400
    skill.refresh_from_db()
    assert skill.description == "Reviews pull requests well."


def test_two_revisions_are_compared_line_by_line(alice, skill):
    created, edited = ElementRevision.objects.filter(element=skill).order_by("created_at", "id")

    html = signed_in(alice).get(PAGE, {**SKILL, "a": created.pk, "b": edited.pk}).content.decode()

    assert '<span class="diff-removed">-description: Reviews pull requests.</span>' in html
    assert '<span class="diff-added">+description: Reviews pull requests well.</span>' in html


def test_restoring_a_revision_brings_it_back(alice, skill):
    client = signed_in(alice)
    created = ElementRevision.objects.filter(element=skill).order_by("created_at", "id").first()
    fields = form(client, SKILL, "/portfolio/restore")

    response = client.post("/portfolio/restore", {**fields, "revision": created.pk})

    assert response.status_code == 302
    skill.refresh_from_db()
    assert skill.description == "Reviews pull requests."
    assert ElementRevision.objects.filter(element=skill, action="restore").count() == 1


def test_another_user_can_neither_see_edit_nor_restore(alice, bob, skill):
    created = ElementRevision.objects.filter(element=skill).first()
    client = signed_in(bob)
    token = hidden_inputs(client.get(PAGE).content.decode()).get("csrfmiddlewaretoken") or client.cookies[
        "csrftoken"].value

    assert client.get(PAGE, SKILL).status_code == 404
    edit = client.post("/portfolio/edit", {"csrfmiddlewaretoken": token, **SKILL, "description": "Bob's.",
                                           "version": "x", "tags": "", "instructions": "", "content": ""})
    client.post("/portfolio/restore", {"csrfmiddlewaretoken": token, **SKILL, "revision": created.pk})

    assert edit.status_code == 404
    skill.refresh_from_db()
    assert skill.description == "Reviews pull requests well."
    assert not ElementRevision.objects.filter(element=skill, action="restore").exists()


def test_the_forms_need_their_csrf_token(alice, skill):
    client = signed_in(alice)
    fields = {k: v for k, v in form(client, SKILL, "/portfolio/edit").items() if k != "csrfmiddlewaretoken"}

    assert client.post("/portfolio/edit", {**fields, "description": "No token."}).status_code == 403
    skill.refresh_from_db()
    assert skill.description == "Reviews pull requests well."
