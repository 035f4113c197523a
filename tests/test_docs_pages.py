"""The public docs pages: the index with its search box, and each page rendered with a table of
contents whose anchors are the sections' stored heading ids, links between pages rewritten, and any
raw HTML a curator typed shown as text. Nobody needs to sign in."""

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.test import Client

from accounts.models import User
from core.caller import Caller
from docs_kb.models import DocPage, DocSection
from docs_kb.services import docs_import, page_edit

pytestmark = pytest.mark.django_db

HEADINGS = {f"h{level}" for level in range(1, 7)}
# [text](other-page.md#section) and [text](#section) in a page's markdown.
MARKDOWN_LINK = re.compile(r"\]\(([\w/-]+)\.md(#[\w-]+)?\)")
IN_PAGE_LINK = re.compile(r"\]\((#[\w-]+)\)")


class Anatomy(HTMLParser):
    """What a test needs of a page: every id, the ids on headings in order, and every link."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.heading_ids: list[str] = []
        self.links: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append(tag)
        if attributes.get("id"):
            self.ids.append(attributes["id"])
            if tag in HEADINGS:
                self.heading_ids.append(attributes["id"])
        if tag == "a" and attributes.get("href"):
            self.links.append(attributes["href"])


def anatomy(html: str) -> Anatomy:
    parser = Anatomy()
    parser.feed(html)
    return parser


def body(response) -> str:
    """The rendered article alone, without the site's header, table of contents and search box."""
    html = response.content.decode()
    return html[html.index('<article class="card docs-body">'):html.index("</article>")]


def heading_ids(page: DocPage) -> list[str]:
    return list(page.sections.exclude(heading_id="").order_by("position").values_list("heading_id", flat=True))


def is_subsequence(wanted: list[str], found: list[str]) -> bool:
    remaining = iter(found)
    return all(item in remaining for item in wanted)


@pytest.fixture
def curator(db) -> Caller:
    return Caller.trusted(User.objects.create_superuser("curator", "curator@example.com", "pw"), via="admin")


def test_every_page_under_docs_has_a_page(kb, client: Client):
    files = sorted(p.relative_to(settings.BASE_DIR / "docs").with_suffix("").as_posix()
                   for p in (settings.BASE_DIR / "docs").rglob("*.md"))
    assert sorted(DocPage.objects.values_list("slug", flat=True)) == files
    for slug in files:
        assert client.get(f"/docs/{slug}").status_code == 200, slug


def test_every_section_of_every_page_has_its_heading_id_as_an_anchor(kb, client: Client):
    for page in DocPage.objects.all():
        wanted = heading_ids(page)
        assert wanted, page.slug
        found = anatomy(body(client.get(f"/docs/{page.slug}")))
        # On the section's own heading, in document order, and nowhere else on the page.
        assert is_subsequence(wanted, found.heading_ids), (page.slug, set(wanted) - set(found.heading_ids))
        assert len(found.ids) == len(set(found.ids)), page.slug


def test_the_table_of_contents_links_to_every_section(kb, client: Client):
    page = DocPage.objects.get(slug="workflow-format")
    links = anatomy(client.get("/docs/workflow-format").content.decode()).links
    assert is_subsequence([f"#{heading_id}" for heading_id in heading_ids(page)], links)
    assert '<a class="anchor" href="#subworkflows"' in body(client.get("/docs/workflow-format"))


def test_links_between_pages_go_to_the_pages_and_their_sections(kb, client: Client):
    rewritten = 0
    for page in DocPage.objects.all():
        links = set(anatomy(body(client.get(f"/docs/{page.slug}"))).links)
        for target, fragment in MARKDOWN_LINK.findall(page.markdown):
            assert f"/docs/{target}{fragment}" in links, (page.slug, target + fragment)
            rewritten += 1
        for fragment in IN_PAGE_LINK.findall(page.markdown):
            assert fragment in links, (page.slug, fragment)  # a link within the page stays as it was
    assert rewritten > 10


def test_every_link_between_pages_lands_on_a_page_and_heading(kb, client: Client):
    anchors: dict[str, set[str]] = {}
    for page in DocPage.objects.all():
        for link in anatomy(body(client.get(f"/docs/{page.slug}"))).links:
            assert not urlsplit(link).path.endswith(".md"), (page.slug, link)
            if not link.startswith("/docs/"):
                continue
            target = urlsplit(link)
            slug = target.path.removeprefix("/docs/")
            assert DocPage.objects.filter(slug=slug).exists(), (page.slug, link)
            if target.fragment:
                if slug not in anchors:
                    anchors[slug] = set(anatomy(body(client.get(target.path))).heading_ids)
                assert target.fragment in anchors[slug], (page.slug, link)


def test_links_from_a_page_in_a_folder_resolve_from_that_folder(db, client: Client, tmp_path: Path):
    (tmp_path / "guides").mkdir()
    (tmp_path / "runs.md").write_text("# Runs\n\n## Caps\n\nStop early.\n")
    (tmp_path / "guides" / "setup.md").write_text(
        "# Setup\n\nSee [caps](../runs.md#caps), [next](next.md) and [the site](https://example.com/a.md).\n")
    (tmp_path / "guides" / "next.md").write_text("# Next\n")
    docs_import(directory=tmp_path)
    links = anatomy(body(client.get("/docs/guides/setup"))).links
    assert {"/docs/runs#caps", "/docs/guides/next", "https://example.com/a.md"} <= set(links)


def test_raw_html_in_an_edited_page_is_shown_as_text(kb, client: Client, curator: Caller):
    page = DocPage.objects.get(slug="runs")
    page_edit(caller=curator, page=page, title=page.title, description=page.description, markdown=(
        "# Runs\n\n<script>alert('block')</script>\n\n"
        "Inline <img src=x onerror=alert('inline')> and <b>bold</b>.\n\n"
        "[click](javascript:alert('link')) [also](JaVa\tScRiPt:alert(1)) [fine](https://example.com)\n\n"
        "## <script>alert('heading')</script> Caps\n"))
    response = client.get("/docs/runs")
    assert response.status_code == 200
    html = body(response)
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert "&lt;script&gt;alert('block')&lt;/script&gt;" in html.replace("&#x27;", "'")
    assert "&lt;img src=x onerror=alert(" in html
    found = anatomy(html)
    assert "https://example.com" in found.links
    assert not [link for link in found.links if "script" in link.lower()]
    assert set(found.tags) <= {"article", "a", "p", "h1", "h2"}
    assert heading_ids(page) == ["alertheading-caps"] == found.heading_ids[1:]


def test_the_index_lists_every_page(kb, client: Client):
    response = client.get("/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    for page in DocPage.objects.all():
        assert f'href="/docs/{page.slug}"' in html
        assert page.title in html
    assert 'name="q"' in html


def test_the_search_box_finds_a_typo_and_links_to_its_section(kb, client: Client):
    response = client.get("/docs/", {"q": "subworkflw"})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'href="/docs/workflow-format#subworkflows"' in html
    section = DocSection.objects.get(page__slug="workflow-format", heading_id="subworkflows")
    assert f"{section.page.title} \u203a {section.heading_text}" in html
    assert 'value="subworkflw"' in html  # the query stays in the box


def test_a_search_without_hits_says_so(kb, client: Client):
    html = client.get("/docs/", {"q": "xyzzyplughqwv"}).content.decode()
    assert "No results for “xyzzyplughqwv”" in html


def test_a_blank_search_shows_the_index(kb, client: Client):
    html = client.get("/docs/", {"q": "   "}).content.decode()
    assert "Results for" not in html and "No results" not in html
    assert 'href="/docs/runs"' in html


def test_an_unknown_page_is_404(kb, client: Client):
    response = client.get("/docs/no-such-page")
    assert response.status_code == 404
    assert "No docs page “no-such-page”" in response.content.decode()


def test_a_page_named_with_md_or_a_trailing_slash_redirects_to_the_page(kb, client: Client):
    for path in ("/docs/runs.md", "/docs/runs/"):
        response = client.get(path)
        assert (response.status_code, response["Location"]) == (302, "/docs/runs"), path


def test_the_docs_need_no_sign_in(kb):
    anonymous = Client()
    assert anonymous.get("/docs/").status_code == 200
    assert anonymous.get("/docs/runs").status_code == 200
    assert anonymous.get("/docs/", {"q": "caps"}).status_code == 200
