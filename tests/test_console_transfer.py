"""Import and export on the portfolio page: the portfolio as a zip in DollhouseMCP's layout (the files
export_portfolio writes), one element's file, and one file imported as import_element imports it."""

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client

from core.caller import Caller
from elements.models import Element
from elements.services import element_create, memory_entry_add
from elements.types import ElementType

pytestmark = pytest.mark.django_db

PERSONA = """---
name: Git Helper
description: Helps with git commands.
---
You help with git.
"""


def signed_in(member) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


@pytest.fixture
def portfolio_of_alice(alice, bob):
    caller = Caller.trusted(alice.user, via="mcp")
    element_create(caller=caller, element_type=ElementType.SKILL, name="code-review",
                   params={"description": "Reviews pull requests.", "content": "Read the diff."})
    notes = element_create(caller=caller, element_type=ElementType.MEMORY, name="notes",
                           params={"description": "Notes."})
    memory_entry_add(caller=caller, memory=notes, content="Small pull requests.", tags=[])
    element_create(caller=Caller.trusted(bob.user, via="mcp"), element_type=ElementType.SKILL, name="bobs",
                   params={"description": "Bob's.", "content": "Bob's."})


def test_the_zip_holds_exactly_what_export_portfolio_writes(alice, portfolio_of_alice, tmp_path):
    response = signed_in(alice).get("/portfolio/export")
    call_command("export_portfolio", str(tmp_path), "--user", "alice", stdout=io.StringIO())

    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    zipped = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    on_disk = {p.relative_to(tmp_path).as_posix(): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert {n.removeprefix("portfolio/"): zipped.read(n) for n in zipped.namelist()} == on_disk
    assert len(on_disk) == 2 and "skills/code-review.md" in on_disk  # bob's skill is not in alice's
    assert sum(path.startswith("memories/") for path in on_disk) == 1


def test_one_elements_file_is_downloaded_by_name(alice, bob, portfolio_of_alice):
    response = signed_in(alice).get("/portfolio/export", {"type": "skill", "name": "code-review"})

    assert response.status_code == 200 and 'filename="code-review.md"' in response["Content-Disposition"]
    assert b"Read the diff." in response.content
    assert signed_in(bob).get("/portfolio/export", {"type": "skill", "name": "code-review"}).status_code == 302


def test_a_file_is_imported_and_then_only_replaced_when_asked(alice):
    client = signed_in(alice)

    first = client.post("/portfolio/import", {"type": "persona", "file": SimpleUploadedFile("git-helper.md",
                                                                                            PERSONA.encode())})
    again = client.post("/portfolio/import", {"type": "persona", "file": SimpleUploadedFile(
        "git-helper.md", PERSONA.replace("with git commands", "with git").encode())}, follow=True)
    replaced = client.post("/portfolio/import", {"type": "persona", "overwrite": "on", "file": SimpleUploadedFile(
        "git-helper.md", PERSONA.replace("with git commands", "with git").encode())})

    assert first.status_code == 302 and "name=Git+Helper" in first["Location"]
    assert "already exists" in again.content.decode()
    assert replaced.status_code == 302
    assert Element.objects.get(owner=alice.user, name="Git Helper").description == "Helps with git."


@pytest.mark.parametrize(("name", "body", "words"), [
    ("notes.txt", b"hello", "ends .md"),
    ("bad.md", b"\xff\xfe", "not UTF-8"),
    ("huge.md", b"x" * (2 * 1024 * 1024 + 1), "at most"),
    ("broken.md", b"---\nname: [unclosed\n---\nx", "broken.md"),
])
def test_a_bad_file_is_refused_with_why_and_imports_nothing(alice, name, body, words):
    response = signed_in(alice).post("/portfolio/import", {"type": "persona", "file": SimpleUploadedFile(name, body)},
                                     follow=True)

    assert words in response.content.decode()
    assert not Element.objects.filter(owner=alice.user).exists()
