"""Curating elements in admin: every save, delete, restore, clear and publish goes through the
services; the Markdown and JSON fields are code editors, and Markdown previews as the console shows it."""

import html
import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone
from django_ace import AceWidget

from accounts.models import AuditEvent, McpSession, User
from core.caller import Caller
from core.errors import InvalidInput
from elements import services
from elements.models import Activation, Confirmation, Element, ElementRevision, MemoryEntry, UserSettings
from elements.services import element_create, element_delete, element_edit, memory_entry_add
from elements.types import MAX_CONTENT_LENGTH, ElementType
from tests.conftest import Member, hidden_inputs

pytestmark = pytest.mark.django_db

ELEMENTS = "/admin/elements/element/"
PREVIEW = "/admin/elements/element/preview/"
REVISIONS = "/admin/elements/elementrevision/"
INSTRUCTIONS = "You ARE a meticulous code reviewer. ALWAYS explain why."


@pytest.fixture
def curator(db, client: Client) -> User:
    user = User.objects.create_superuser("curator", "curator@example.com", "pw")
    client.force_login(user)
    return user


def as_owner(member: Member) -> Caller:
    return Caller.trusted(member.user, via="command")


def make(member: Member, element_type: str, name: str, **params: Any) -> Element:
    return element_create(caller=as_owner(member), element_type=ElementType(element_type), name=name, params=params)


def persona(member: Member, name: str = "code-reviewer", **params: Any) -> Element:
    return make(member, "persona", name, instructions=INSTRUCTIONS, **params)


def add_data(owner: User, **overrides: str) -> dict[str, Any]:
    data = {"owner": owner.pk, "element_type": "persona", "name": "reviewer", "format_version": "v2",
            "description": "Reviews code.", "category": "", "author": "", "version": "1.0.0", "tags": "",
            "triggers": "", "instructions": INSTRUCTIONS, "content": "", "metadata": "{}", "gatekeeper": ""}
    return {**data, **overrides}


def change_data(element: Element, **overrides: str) -> dict[str, Any]:
    """What the change form posts when the curator only edits `overrides`."""
    data = {"description": element.description, "category": element.category, "author": element.author,
            "version": element.version, "tags": ", ".join(element.tags), "triggers": ", ".join(element.triggers),
            "instructions": element.instructions, "content": element.content,
            "metadata": json.dumps(element.metadata, indent=2),
            "gatekeeper": json.dumps(element.gatekeeper) if element.gatekeeper else ""}
    return {**data, **overrides}


def written() -> tuple[int, ...]:
    return (Element.objects.count(), ElementRevision.objects.count(), AuditEvent.objects.count(),
            LogEntry.objects.count())


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def shown(elements: Any) -> set[str]:
    return {e.name for e in elements}


# --- the list -------------------------------------------------------------------------------------


def test_the_changelist_filters_by_type_format_category_owner_and_searches(curator, alice, bob, client):
    persona(alice, tags=["debugging"], category="development")
    make(alice, "skill", "sql-helper", content="Write SQL carefully.", description="Queries")
    persona(bob, "bobs-persona")

    def listed(query: str) -> set[str]:
        response = client.get(f"{ELEMENTS}?{query}")
        assert response.status_code == 200, query
        return shown(response.context["cl"].result_list)

    assert listed("") == {"code-reviewer", "sql-helper", "bobs-persona"}
    assert listed("element_type__exact=skill") == {"sql-helper"}
    assert listed("format_version__exact=v2&category=development") == {"code-reviewer"}
    assert listed(f"owner__id__exact={bob.user.pk}") == {"bobs-persona"}
    assert listed("q=debugging") == {"code-reviewer"}  # a tag
    assert listed("q=queries") == {"sql-helper"}  # the description
    assert listed("q=bob") == {"bobs-persona"}  # the owner
    page = client.get(ELEMENTS).content.decode()
    assert "?element_type__exact=memory" in page  # a quick link per type


# --- adding ---------------------------------------------------------------------------------------


def test_adding_creates_through_the_service(curator, alice, client):
    assert client.get(f"{ELEMENTS}add/").status_code == 200

    response = client.post(f"{ELEMENTS}add/", add_data(alice.user, tags="review, python", triggers="review",
                                                         metadata='{"audience": "backend"}'))

    assert response.status_code == 302, response.context["adminform"].form.errors
    element = Element.objects.get(name="reviewer")
    assert (element.owner, element.element_type, element.author) == (alice.user, "persona", "alice")
    assert (element.tags, element.triggers, element.metadata) == (["review", "python"], ["review"],
                                                                  {"audience": "backend"})
    assert ElementRevision.objects.filter(element=element, action="create").count() == 1
    event = AuditEvent.objects.get(action="element.create")
    assert (event.via, event.actor) == ("admin", curator)


@pytest.mark.parametrize(("overrides", "error"), [
    ({"instructions": ""}, "Persona instructions are required."),
    ({"metadata": "{not json"}, "Enter a valid JSON."),
    ({"metadata": "[1, 2]"}, "Enter a JSON object"),
    ({"gatekeeper": '{"sometimes": []}'}, "Unknown gatekeeper key(s): sometimes."),
    ({"name": "code-reviewer"}, "already exists"),
])
def test_invalid_input_is_shown_and_nothing_is_written(curator, alice, client, overrides, error):
    persona(alice)
    before = written()

    response = client.post(f"{ELEMENTS}add/", add_data(alice.user, **overrides))

    assert response.status_code == 200
    assert error in html.unescape(response.content.decode())
    assert written() == before


# --- changing -------------------------------------------------------------------------------------


def test_changing_edits_through_the_service_with_only_the_changed_fields(curator, alice, client):
    element = make(alice, "persona", "code-reviewer", description="Old words.",
                   instructions="You ARE a meticulous code reviewer.\nALWAYS explain why.")
    url = f"{ELEMENTS}{element.pk}/change/"
    # A browser sends the untouched instructions back with CRLF line ends.
    untouched = element.instructions.replace("\n", "\r\n")

    response = client.post(url, {**change_data(element, description="New words.", tags="a, b",
                                                instructions=untouched),
                                 "name": "renamed", "owner": curator.pk})

    assert response.status_code == 302, response.context["adminform"].form.errors
    element.refresh_from_db()
    assert (element.description, element.tags) == ("New words.", ["a", "b"])
    assert (element.name, element.owner) == ("code-reviewer", alice.user)  # read-only after creation
    assert ElementRevision.objects.filter(element=element, action="update").count() == 1
    event = AuditEvent.objects.get(action="element.update")
    assert (event.via, event.detail["fields"]) == ("admin", ["description", "tags"])


def test_emptying_the_gatekeeper_field_removes_the_policy(curator, alice, client):
    element = persona(alice, gatekeeper={"deny": ["delete_*"]})

    response = client.post(f"{ELEMENTS}{element.pk}/change/", change_data(element, gatekeeper=""))

    assert response.status_code == 302, response.context["adminform"].form.errors
    element.refresh_from_db()
    assert element.gatekeeper is None


def test_an_invalid_change_is_shown_and_nothing_is_written(curator, alice, client):
    element = persona(alice)
    before = written()

    response = client.post(f"{ELEMENTS}{element.pk}/change/", change_data(element, instructions=""))

    assert response.status_code == 200
    assert "Persona instructions are required." in response.content.decode()
    assert written() == before
    element.refresh_from_db()
    assert element.instructions == INSTRUCTIONS


def test_saving_an_editor_opened_before_another_change_is_refused_and_keeps_that_change(curator, alice, client):
    element = persona(alice, metadata={"audience": "backend"})
    url = f"{ELEMENTS}{element.pk}/change/"
    opened = hidden_inputs(client.get(url).content.decode())["loaded_version"]
    element_edit(caller=as_owner(alice), element=element, changes={"metadata": {"tone": "dry"}})
    before = written()

    response = client.post(url, {**change_data(element, metadata='{"audience": "frontend"}'),
                                 "loaded_version": opened})

    assert response.status_code == 200
    assert "changed since you read it" in html.unescape(response.content.decode())
    assert written() == before
    element.refresh_from_db()
    assert element.metadata == {"audience": "backend", "tone": "dry"}


def test_saving_an_editor_opened_after_the_last_change_goes_through(curator, alice, client):
    element = persona(alice, metadata={"audience": "backend"})
    url = f"{ELEMENTS}{element.pk}/change/"
    opened = hidden_inputs(client.get(url).content.decode())["loaded_version"]

    response = client.post(url, {**change_data(element, metadata='{"audience": "frontend"}'),
                                 "loaded_version": opened})

    assert response.status_code == 302, response.context["adminform"].form.errors
    element.refresh_from_db()
    assert element.metadata == {"audience": "frontend"}


@pytest.mark.parametrize(("stored", "posted", "field", "expected"), [
    ({"metadata": {"audience": "backend", "tone": "dry"}}, {"metadata": '{"audience": "backend"}'},
     "metadata", {"audience": "backend"}),
    ({"metadata": {"style": {"tone": "dry", "length": "short"}}}, {"metadata": '{"style": {"tone": "dry"}}'},
     "metadata", {"style": {"tone": "dry"}}),
    ({"gatekeeper": {"allow": ["get_*"], "deny": ["delete_*"]}}, {"gatekeeper": '{"allow": ["get_*"]}'},
     "gatekeeper", {"allow": ["get_*"]}),
])
def test_a_key_removed_in_the_editor_is_removed(curator, alice, client, stored, posted, field, expected):
    element = persona(alice, **stored)

    response = client.post(f"{ELEMENTS}{element.pk}/change/", change_data(element, **posted))

    assert response.status_code == 302, response.context["adminform"].form.errors
    element.refresh_from_db()
    assert getattr(element, field) == expected


def test_a_refusal_at_the_real_save_rolls_back_and_says_so(curator, alice, client, monkeypatch):
    element = persona(alice)
    real_edit = services.element_edit
    calls: list[int] = []

    def edit_refused_the_second_time(**kwargs: Any) -> Element:
        calls.append(1)
        if len(calls) > 1:
            raise InvalidInput("Someone else changed it meanwhile.")
        return real_edit(**kwargs)

    monkeypatch.setattr(services, "element_edit", edit_refused_the_second_time)
    before = written()

    response = client.post(f"{ELEMENTS}{element.pk}/change/", change_data(element, description="Mine."),
                           follow=True)

    assert messages_of(response) == ["Nothing was saved: Someone else changed it meanwhile."]
    assert written() == before
    element.refresh_from_db()
    assert element.description == ""


def test_the_change_page_links_to_the_revisions(curator, alice, client):
    element = persona(alice)
    element_edit(caller=as_owner(alice), element=element, changes={"description": "Edited."})
    persona(alice, "another")

    page = client.get(f"{ELEMENTS}{element.pk}/change/").content.decode()
    link = html.unescape(page.split(f'href="{REVISIONS}?', 1)[1].split('"', 1)[0])
    listed = client.get(f"{REVISIONS}?{link}").context["cl"].result_list

    assert "2 revision(s)" in page
    assert [(r.name, r.action) for r in listed] == [("code-reviewer", "update"), ("code-reviewer", "create")]


# --- deleting, history and restoring --------------------------------------------------------------


def test_deleting_keeps_a_backup_revision(curator, alice, client):
    element = persona(alice)

    response = client.post(f"{ELEMENTS}{element.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not Element.objects.exists()
    backup = ElementRevision.objects.get(action="delete")
    assert (backup.name, backup.snapshot["instructions"]) == ("code-reviewer", INSTRUCTIONS)
    assert AuditEvent.objects.filter(action="element.delete", via="admin", actor=curator).exists()


def test_deleting_several_keeps_a_backup_of_each(curator, alice, client):
    elements = [persona(alice), persona(alice, "another")]

    client.post(ELEMENTS, {"action": "delete_selected", "post": "yes", "_selected_action": [e.pk for e in elements]})

    assert not Element.objects.exists()
    assert set(ElementRevision.objects.filter(action="delete").values_list("name", flat=True)) == {
        "code-reviewer", "another"}


def test_the_element_admins_do_not_block_deleting_a_user(curator, alice, client):
    element = persona(alice)
    element_delete(caller=as_owner(alice), element=persona(alice, "gone"))
    session = McpSession.objects.create(id="s" * 32, user=alice.user, transport="http")
    Activation.objects.create(session=session, element=element)
    Confirmation.objects.create(session=session, operation="create_element", level="session")
    UserSettings.objects.create(user=alice.user, values={"theme": "dark"})

    response = client.get(f"/admin/accounts/user/{alice.user.pk}/delete/")

    assert response.status_code == 200
    # Only the models registered here; other admins may refuse deletes of their own.
    assert not response.context["perms_lacking"] & {"element", "element revision", "activation", "confirmation",
                                                    "user settings"}


def test_a_revision_shows_its_diff_from_the_previous_one(curator, alice, client):
    element = persona(alice, description="Old words.")
    element_edit(caller=as_owner(alice), element=element, changes={"description": "New words."})
    update = ElementRevision.objects.get(action="update")

    page = html.unescape(client.get(f"{REVISIONS}{update.pk}/change/").content.decode())

    assert '<span class="removed">-  "description": "Old words.",</span>' in page
    assert '<span class="added">+  "description": "New words.",</span>' in page
    assert f'<span class="context">   "instructions": "{INSTRUCTIONS}",</span>' in page
    assert "Restore this revision" in page


def test_the_first_revision_is_all_new_lines(curator, alice, client):
    persona(alice)
    create = ElementRevision.objects.get(action="create")

    page = html.unescape(client.get(f"{REVISIONS}{create.pk}/change/").content.decode())

    assert "The first revision of this element" in page
    assert f'<span class="added">+  "instructions": "{INSTRUCTIONS}",</span>' in page
    assert '<span class="removed">' not in page


def test_restoring_brings_back_a_deleted_element(curator, alice, client):
    backup = element_delete(caller=as_owner(alice), element=persona(alice, description="Kept."))

    response = client.post(f"{REVISIONS}{backup.pk}/restore/", follow=True)

    element = Element.objects.get(owner=alice.user, name="code-reviewer")
    assert (element.description, element.instructions) == ("Kept.", INSTRUCTIONS)
    assert response.redirect_chain[-1][0] == f"{ELEMENTS}{element.pk}/change/"
    assert messages_of(response)[0].startswith("Restored persona code-reviewer from its delete revision")
    assert ElementRevision.objects.filter(element=element, action="restore").exists()
    assert AuditEvent.objects.filter(action="element.restore", via="admin", actor=curator).exists()


def test_restoring_takes_a_post(curator, alice, client):
    backup = element_delete(caller=as_owner(alice), element=persona(alice))

    assert client.get(f"{REVISIONS}{backup.pk}/restore/").status_code == 405
    assert not Element.objects.exists()


def test_revisions_are_listed_filtered_and_searched(curator, alice, bob, client):
    element_delete(caller=as_owner(alice), element=persona(alice))
    persona(bob, "bobs-persona")

    def listed(query: str) -> list[tuple[str, str]]:
        response = client.get(f"{REVISIONS}?{query}")
        assert response.status_code == 200, query
        return [(r.name, r.action) for r in response.context["cl"].result_list]

    assert listed("action__exact=delete") == [("code-reviewer", "delete")]
    assert listed("q=bob") == [("bobs-persona", "create")]
    assert client.get(f"{REVISIONS}add/").status_code == 403


# --- export and memories --------------------------------------------------------------------------


def test_export_downloads_the_packages_of_the_selected_elements(curator, alice, client):
    reviewer = persona(alice, tags=["review"])
    notes = make(alice, "memory", "notes")
    memory_entry_add(caller=as_owner(alice), memory=notes, content="Remember the milk.")
    persona(alice, "not-selected")

    response = client.post(ELEMENTS, {"action": "export_elements", "_selected_action": [reviewer.pk, notes.pk]})

    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == 'attachment; filename="atrium-elements.json"'
    packages = {p["element_name"]: p for p in json.loads(response.content)}
    assert set(packages) == {"code-reviewer", "notes"}
    assert (packages["code-reviewer"]["instructions"], packages["code-reviewer"]["tags"]) == (INSTRUCTIONS,
                                                                                             ["review"])
    assert [e["content"] for e in packages["notes"]["entries"]] == ["Remember the milk."]
    assert AuditEvent.objects.filter(action="element.export", via="admin", actor=curator).exists()


def test_a_memory_shows_its_entries(curator, alice, client):
    notes = make(alice, "memory", "notes")
    entry = memory_entry_add(caller=as_owner(alice), memory=notes, content="Remember the milk.", tags=["shopping"])

    page = client.get(f"{ELEMENTS}{notes.pk}/change/").content.decode()

    assert entry.entry_id in page
    assert "Remember the milk." in page
    assert "shopping" in page


def test_a_memory_is_edited_without_touching_its_entries(curator, alice, client):
    notes = make(alice, "memory", "notes", metadata={"autoLoad": True})
    memory_entry_add(caller=as_owner(alice), memory=notes, content="Remember the milk.")
    url = f"{ELEMENTS}{notes.pk}/change/"
    inline = hidden_inputs(client.get(url).content.decode())
    # Content is read-only on a memory (its entries are its content), so a posted one is ignored.
    data = change_data(notes, description="Shopping.", content="Rewritten.")

    response = client.post(url, {**inline, **data})

    assert response.status_code == 302, response.context["adminform"].form.errors
    notes.refresh_from_db()
    assert (notes.description, notes.content) == ("Shopping.", "")
    assert MemoryEntry.objects.filter(memory=notes).count() == 1


def test_clear_entries_empties_the_selected_memories(curator, alice, client):
    notes = make(alice, "memory", "notes")
    for text in ("one", "two"):
        memory_entry_add(caller=as_owner(alice), memory=notes, content=text)
    reviewer = persona(alice)

    response = client.post(ELEMENTS, {"action": "clear_entries", "_selected_action": [notes.pk, reviewer.pk]},
                           follow=True)

    assert not MemoryEntry.objects.exists()
    assert ElementRevision.objects.filter(element=notes, action="clear").count() == 1
    assert messages_of(response) == ["Cleared 2 entries from 1 memory(ies).",
                                     "Skipped 1 selected element(s) that are not memories."]
    assert AuditEvent.objects.filter(action="element.clear", via="admin", actor=curator).exists()


# --- publishing and filters ------------------------------------------------------------------------


def test_publish_and_withdraw_put_the_selected_elements_in_and_out_of_the_collection(curator, alice, client):
    reviewer, helper = persona(alice), make(alice, "skill", "sql-helper", content="Write SQL carefully.")

    published = client.post(ELEMENTS, {"action": "publish", "_selected_action": [reviewer.pk, helper.pk]},
                            follow=True)

    assert messages_of(published) == ["2 element(s) are now in the collection."]
    assert set(Element.objects.filter(published=True).values_list("name", flat=True)) == {"code-reviewer",
                                                                                          "sql-helper"}
    assert AuditEvent.objects.filter(action="element.publish", via="admin", actor=curator).count() == 2

    withdrawn = client.post(ELEMENTS, {"action": "withdraw", "_selected_action": [helper.pk]}, follow=True)

    assert messages_of(withdrawn) == ["1 element(s) are now out of the collection."]
    assert list(Element.objects.filter(published=True).values_list("name", flat=True)) == ["code-reviewer"]
    assert AuditEvent.objects.filter(action="element.withdraw", target="skill 'sql-helper'").count() == 1


def test_the_changelist_filters_by_since_as_the_console_does(curator, alice, client):
    persona(alice)
    old = persona(alice, "old-reviewer")
    Element.objects.filter(pk=old.pk).update(modified=timezone.now() - timedelta(days=3))

    assert shown(client.get(ELEMENTS, {"since": "24h"}).context["cl"].result_list) == {"code-reviewer"}
    assert shown(client.get(ELEMENTS, {"since": "7d"}).context["cl"].result_list) == {"code-reviewer",
                                                                                      "old-reviewer"}


# --- the editors and the preview -------------------------------------------------------------------


def test_the_body_is_edited_in_markdown_editors_and_the_structured_fields_in_json_ones(curator, alice, client):
    reviewer = persona(alice)
    for url in (f"{ELEMENTS}add/", f"{ELEMENTS}{reviewer.pk}/change/"):
        page = client.get(url)
        fields = page.context["adminform"].form.fields
        modes = {name: fields[name].widget.mode for name in ("instructions", "content", "metadata", "gatekeeper")
                 if isinstance(fields[name].widget, AceWidget)}
        assert modes == {"instructions": "markdown", "content": "markdown", "metadata": "json",
                         "gatekeeper": "json"}
        text = page.content.decode()
        assert f'data-preview-url="{PREVIEW}"' in text and "/static/elements/markdown_preview.js" in text
    pretty = persona(alice, "pretty", metadata={"audience": "backend"})
    shown_metadata = client.get(f"{ELEMENTS}{pretty.pk}/change/").context["adminform"].form["metadata"].value()
    assert '\n  "audience": "backend"' in shown_metadata  # pretty-printed to be read and edited


def test_the_preview_renders_markdown_as_the_console_does_and_saves_nothing(curator, alice, client):
    reviewer = persona(alice)
    before = written()

    response = client.post(PREVIEW, {"markdown": "## Steps\r\n\n1. Read the **diff**.\n\n<script>alert(1)</script>\n\n"
                                                 "[bad](javascript:alert(2)) [good](https://example.com)"})

    assert response.status_code == 200
    body = response.content.decode()
    assert "<h2>Steps</h2>" in body and "<strong>diff</strong>" in body
    assert "<script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "javascript:" not in body and 'href="https://example.com"' in body
    assert written() == before
    reviewer.refresh_from_db()
    assert reviewer.instructions == INSTRUCTIONS


def test_the_preview_is_a_post_for_curators_only(curator, alice, client):
    assert client.get(PREVIEW).status_code == 405
    assert client.post(PREVIEW, {"markdown": "x" * (MAX_CONTENT_LENGTH + 1)}).status_code == 400
    assert "Nothing to preview" in client.post(PREVIEW, {"markdown": "  "}).content.decode()

    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.post(PREVIEW, {"markdown": "# Hi"}).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="change_element"))
    assert client.post(PREVIEW, {"markdown": "# Hi"}).status_code == 200

    client.logout()
    response = client.post(PREVIEW, {"markdown": "# Hi"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


# --- sessions and settings ------------------------------------------------------------------------


def test_activations_confirmations_and_settings_are_listed_read_only(curator, alice, client):
    session = McpSession.objects.create(id="abcdef0123456789" * 2, user=alice.user, transport="http")
    Activation.objects.create(session=session, element=persona(alice))
    Confirmation.objects.create(session=session, operation="create_element", level="session")
    settings_row = UserSettings.objects.create(user=alice.user, values={"theme": "dark"})

    for url, expected in [("/admin/elements/activation/", "abcdef0123…"),
                          ("/admin/elements/confirmation/", "create_element"),
                          ("/admin/elements/usersettings/", "dark")]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert expected in html.unescape(response.content.decode()), url
    assert client.get(f"/admin/elements/usersettings/{settings_row.pk}/change/").context["has_change_permission"] \
        is False
    assert client.get("/admin/elements/activation/add/").status_code == 403
