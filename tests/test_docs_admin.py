"""Curating the docs in admin: a save goes through page_edit, so the page is marked edited, its
sections are rebuilt and the edit is audited; the next import keeps it unless forced. The change
form shows the saved page rendered, and "Preview" renders unsaved text."""

import shutil
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.test import Client
from django_ace import AceWidget

from accounts.models import AuditEvent, User
from docs_kb.models import DocPage
from docs_kb.services import docs_import
from tests.conftest import hidden_inputs

pytestmark = pytest.mark.django_db

PAGES = "/admin/docs_kb/docpage/"
NEW_SECTION = "\n## Curators' corner\n\nA note added in admin.\n"


@pytest.fixture
def curator(db, client: Client) -> User:
    user = User.objects.create_superuser("curator", "curator@example.com", "pw")
    client.force_login(user)
    return user


@pytest.fixture
def runs(kb) -> DocPage:
    return DocPage.objects.get(slug="runs")


def change_data(client: Client, page: DocPage, **fields: str) -> dict[str, Any]:
    """What the change form posts: its hidden fields (the sections' formset) and the page's fields,
    with the markdown's lines as a browser sends them."""
    response = client.get(f"{PAGES}{page.pk}/change/")
    assert response.status_code == 200
    data = {"title": page.title, "description": page.description, "markdown": page.markdown, **fields}
    return {**hidden_inputs(response.content.decode()), **data, "markdown": data["markdown"].replace("\n", "\r\n")}


def test_the_list_shows_pages_and_filters_by_edited(runs, client: Client, curator: User):
    DocPage.objects.filter(slug="runs").update(edited=True)
    listing = client.get(PAGES).content.decode()
    assert "workflow-format" in listing and "runs" in listing
    edited = client.get(PAGES, {"edited__exact": "1"})
    assert list(edited.context["cl"].result_list) == [DocPage.objects.get(slug="runs")]
    found = client.get(PAGES, {"q": "workflow-format"})
    assert [page.slug for page in found.context["cl"].result_list] == ["workflow-format"]


def test_the_change_form_edits_the_markdown_in_a_markdown_editor_and_shows_it_rendered(runs, client: Client,
                                                                                      curator: User):
    page = client.get(f"{PAGES}{runs.pk}/change/")
    widget = page.context["adminform"].form.fields["markdown"].widget
    assert isinstance(widget, AceWidget) and (widget.mode, widget.useworker) == ("markdown", False)
    html = page.content.decode()
    assert 'data-mode="markdown"' in html and "/static/django_ace/widget.js" in html
    assert '<div class="docs-preview">' in html
    for heading_id in runs.sections.exclude(heading_id="").values_list("heading_id", flat=True):
        assert f'id="{heading_id}"' in html
    assert f'formaction="{PAGES}{runs.pk}/preview/"' in html


def test_saving_marks_the_page_edited_rebuilds_its_sections_and_audits(runs, client: Client, curator: User):
    markdown = runs.markdown + NEW_SECTION
    response = client.post(f"{PAGES}{runs.pk}/change/", change_data(client, runs, title="Runs, curated",
                                                                     markdown=markdown))
    assert response.status_code == 302, response.content.decode()[:2000]
    runs.refresh_from_db()
    assert (runs.title, runs.edited, runs.markdown) == ("Runs, curated", True, markdown)
    section = runs.sections.get(heading_id="curators-corner")
    assert (section.heading_text, section.level) == ("Curators' corner", 2)
    assert AuditEvent.objects.filter(action="docs.edit", target="docs page 'runs'", via="admin",
                                     actor=curator).exists()
    # The new heading is a section search finds, and an anchor on the public page and in the preview.
    assert client.get("/api/kb/search/", {"q": "curators corner"}).json()[0]["headingId"] == "curators-corner"
    assert 'id="curators-corner"' in client.get("/docs/runs").content.decode()
    assert 'id="curators-corner"' in client.get(f"{PAGES}{runs.pk}/change/").content.decode()


def test_saving_an_untouched_page_does_not_mark_it_edited(runs, client: Client, curator: User):
    response = client.post(f"{PAGES}{runs.pk}/change/", change_data(client, runs))
    assert response.status_code == 302
    runs.refresh_from_db()
    assert runs.edited is False
    assert not AuditEvent.objects.filter(action="docs.edit").exists()


def test_an_import_keeps_an_edited_page_and_a_forced_one_overwrites_it(runs, client: Client, curator: User,
                                                                        tmp_path: Path):
    client.post(f"{PAGES}{runs.pk}/change/", change_data(client, runs, markdown=runs.markdown + NEW_SECTION))
    docs = tmp_path / "docs"
    shutil.copytree(settings.BASE_DIR / "docs", docs)

    def kept() -> bool:
        runs.refresh_from_db()
        return runs.edited and runs.sections.filter(heading_id="curators-corner").exists()

    assert docs_import(directory=docs).kept_edited == ["runs"] and kept()  # its file has not changed
    with (docs / "runs.md").open("a") as source:
        source.write("\nA paragraph added to the file.\n")
    assert docs_import(directory=docs).kept_edited == ["runs"] and kept()

    assert "runs" in docs_import(directory=docs, force=True).updated
    runs.refresh_from_db()
    assert not runs.edited and runs.markdown.endswith("A paragraph added to the file.\n")
    assert not runs.sections.filter(heading_id="curators-corner").exists()


def test_preview_renders_unsaved_text_without_saving_it(runs, client: Client, curator: User):
    before = runs.markdown
    response = client.post(f"{PAGES}{runs.pk}/preview/", change_data(
        client, runs, markdown="# Runs\n\n## Draft heading\n\n<script>alert(1)</script> See [caps](runs.md#caps).\n"))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="draft-heading"' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert 'href="/docs/runs#caps"' in html
    runs.refresh_from_db()
    assert (runs.markdown, runs.edited) == (before, False)


def test_preview_is_for_curators_only(runs, client: Client):
    response = client.post(f"{PAGES}{runs.pk}/preview/", {"markdown": "# Hi"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert client.get(f"{PAGES}{runs.pk}/preview/").status_code == 302  # login first, whatever the method

    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.post(f"{PAGES}{runs.pk}/preview/", {"markdown": "# Hi"}).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="change_docpage"))
    assert client.post(f"{PAGES}{runs.pk}/preview/", {"markdown": "# Hi"}).status_code == 200
    assert client.get(f"{PAGES}{runs.pk}/preview/").status_code == 405


def test_pages_are_neither_added_nor_deleted_in_admin(runs, client: Client, curator: User):
    assert client.get(f"{PAGES}add/").status_code == 403
    assert client.get(f"{PAGES}{runs.pk}/delete/").status_code == 403
