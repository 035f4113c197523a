"""import_portfolio and export_portfolio: DollhouseMCP's on-disk portfolio in and out of the database."""

import io
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, OutputWrapper

from core.caller import Caller
from elements.management.commands.import_portfolio import Progress
from elements.models import Element, MemoryEntry
from elements.packages import element_package
from elements.portfolio import (
    filename_for,
    iter_portfolio,
    markdown_from_package,
    package_from_markdown,
    package_path,
)
from elements.selectors import memory_entries
from elements.services import element_import
from elements.types import ElementType
from tests.conftest import make_member

pytestmark = pytest.mark.django_db

FIXTURE = Path(__file__).parent / "fixtures" / "portfolio"
READABLE = 8  # the fixture's files, less the two that are refused


def run(command: str, *args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def run_refused(*args: str, refused: int) -> tuple[str, str]:
    """import_portfolio over a folder with `refused` bad files: it imports the rest, reports, and fails."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match=rf"^{refused} of \d+ file\(s\) refused \(listed above\)"):
        call_command("import_portfolio", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def counts(summary: str) -> dict[str, int]:
    return {outcome: int(re.search(rf"^  {outcome}\s+(\d+)", summary, re.MULTILINE)[1])
            for outcome in ("created", "updated", "skipped", "refused")}


def packages(user: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """Every element of `user` as its export package, less `modified`, which an import sets to now."""
    found = {}
    for element in Element.objects.filter(owner=user):
        entries = memory_entries(memory=element) if element.element_type == ElementType.MEMORY else None
        package = element_package(element, entries=entries)
        package.pop("modified")
        found[element.element_type, element.name] = package
    return found


def test_the_fixture_imports_with_every_field_in_place(alice):
    out, err = run_refused(str(FIXTURE), "--user", "alice", refused=2)

    assert counts(out) == {"created": READABLE, "updated": 0, "skipped": 0, "refused": 2}
    assert "personas/sneaky-helper.md: Instructions contain security threats" in out
    assert "skills/broken-skill.md: Invalid YAML" in out
    assert err.splitlines()[0] == "1/10 personas/creative-writer.md"
    assert err.splitlines()[-1] == "10/10 ensembles/full-stack-review.md"
    elements = {(e.element_type, e.name): e for e in Element.objects.filter(owner=alice.user)}
    assert len(elements) == READABLE

    detective = elements["persona", "Debug Detective"]
    assert detective.format_version == "v2"
    assert detective.instructions.startswith("You ARE Debug Detective")
    assert detective.content.startswith("## Field notes")  # the `# Debug Detective` heading is gone
    assert detective.unique_id == "debug-detective_20250302-091500_dollhousemcp"
    assert (detective.tags, detective.triggers, detective.version) == (["debugging", "troubleshooting"],
                                                                       ["debug", "investigate"], "1.2.0")
    assert detective.created.isoformat() == "2025-03-02T09:15:00+00:00"

    writer = elements["persona", "Creative Writer"]
    assert writer.format_version == "v1"
    assert writer.instructions.startswith("# Creative Writer\n\nYou are an imaginative storyteller.")
    assert writer.content == ""
    assert writer.metadata["license"] == "CC-BY-SA-4.0" and writer.metadata["ai_generated"] is False

    review = elements["skill", "Code Review"]
    assert review.format_version == "v2"
    assert review.instructions.startswith("ALWAYS read the whole change")
    assert review.content.startswith("## Checklist")
    assert review.category == "development"
    assert review.metadata["parameters"][0]["name"] == "strictness"

    notes = elements["template", "Meeting Notes"]
    assert notes.format_version == "v1"
    assert "{{attendees}}" in notes.content
    assert [v["name"] for v in notes.metadata["variables"]] == ["title", "date", "attendees"]
    assert notes.metadata["output_format"] == "markdown"

    captain = elements["agent", "Release Captain"]
    assert captain.metadata["goal"]["template"] == "Ship release {version} of {project}"
    assert captain.metadata["activates"]["skills"] == ["Code Review"]
    assert captain.metadata["autonomy"]["maxAutonomousSteps"] == 10

    ensemble = elements["ensemble", "Full Stack Review"]
    assert [(m["element_name"], m["role"]) for m in ensemble.metadata["elements"]] == [
        ("Debug Detective", "primary"), ("Code Review", "support")]
    assert ensemble.metadata["activationStrategy"] == "priority"

    context = elements["memory", "project-context"]
    assert context.format_version == "v2"
    assert context.metadata == {"autoLoad": True, "priority": 10, "retention": "90 days"}
    entries = list(context.entries.order_by("timestamp"))
    assert [e.entry_id for e in entries] == ["mem_1736929800000_k3v9x0a1b", "mem_1737021600000_p0q8w2e4r",
                                             "mem_1737129900000_z7y6x5w4v"]
    assert (entries[0].tags, entries[0].metadata, entries[0].source) == (["decision", "database"],
                                                                         {"meeting": "kickoff"}, "user")
    assert (entries[1].privacy_level, entries[1].trust_level) == ("public", "validated")
    assert entries[2].expires_at.isoformat() == "2025-04-17T16:05:00+00:00"

    legacy = elements["memory", "standup-notes"]
    assert legacy.format_version == "v1"
    assert [e.content for e in legacy.entries.all()] == ["Alice is on call this week; Bob covers the release."]


def test_a_second_import_skips_what_exists_unless_told_to_overwrite(alice):
    run_refused(str(FIXTURE), "--user", "alice", refused=2)
    first = set(Element.objects.values_list("pk", flat=True))

    again, _ = run_refused(str(FIXTURE), "--user", "alice", refused=2)
    overwritten, _ = run_refused(str(FIXTURE), "--user", "alice", "--overwrite", refused=2)

    assert counts(again) == {"created": 0, "updated": 0, "skipped": READABLE, "refused": 2}
    assert "--overwrite replaces them" in again
    assert counts(overwritten) == {"created": 0, "updated": READABLE, "skipped": 0, "refused": 2}
    # Overwriting updates in place: the same rows, so activations and history stay attached.
    assert set(Element.objects.values_list("pk", flat=True)) == first
    assert MemoryEntry.objects.count() == 4


def test_a_dry_run_reports_the_outcome_and_writes_nothing(alice):
    out, _ = run_refused(str(FIXTURE), "--user", "alice", "--dry-run", refused=2)

    assert "dry run: nothing was written" in out
    assert counts(out) == {"created": READABLE, "updated": 0, "skipped": 0, "refused": 2}
    assert not Element.objects.exists() and not MemoryEntry.objects.exists()


def _import(caller: Caller, **package: Any) -> None:
    element_import(caller=caller, package={"exportVersion": "1.0", "version": "1.0.0", **package})


def test_export_then_import_gives_the_same_packages(alice, tmp_path):
    run_refused(str(FIXTURE), "--user", "alice", refused=2)
    caller = Caller.trusted(alice.user, via="command")
    # What the fixture lacks: bodies whose layout matters, strings YAML could mistake for other
    # types, a v1 skill holding instructions, a persona without content, and two names one file name.
    _import(caller, element_type="skill", element_name="Shell Tricks", format_version="v1", author="",
            instructions="ALWAYS quote variables.", content="",
            metadata={"octal": "0o17", "exponent": "1e5", "yes": "yes", "day": "2025-01-15", "none": None,
                      "empty": [], "off": False, "name": "not the element's name", "nested": {"a": [1, 2.5]}})
    _import(caller, element_type="persona", element_name="Quiet One", description="Says little.",
            instructions="You ARE terse.")
    _import(caller, element_type="template", element_name="Name Clash", content="\n  indented {{x}}\r\nline\n\n")
    _import(caller, element_type="template", element_name="name_clash", content="---\nnot front matter\n---")
    before = packages(alice.user)

    exported, _ = run("export_portfolio", str(tmp_path), "--user", "alice")
    bob = make_member("bob")
    imported, _ = run("import_portfolio", str(tmp_path), "--user", "bob")

    assert "Exported 12 elements of alice" in exported and re.search(r"memories\s+2", exported)
    assert (tmp_path / "templates" / "name-clash.md").exists() and (tmp_path / "templates" / "name-clash-2.md").exists()
    assert (tmp_path / "memories" / "2025-01-15" / "project-context.yaml").exists()
    assert (tmp_path / "memories" / "2024-11-02" / "standup-notes.yaml").exists()
    assert counts(imported) == {"created": 12, "updated": 0, "skipped": 0, "refused": 0}
    assert packages(bob.user) == before


def test_the_exported_memory_has_stats_and_entries(alice, tmp_path):
    run_refused(str(FIXTURE), "--user", "alice", refused=2)

    run("export_portfolio", str(tmp_path), "--user", "alice")

    text = (tmp_path / "memories" / "2025-01-15" / "project-context.yaml").read_text()
    assert "stats:\n  newestEntry: '2025-01-17T16:05:00+00:00'" in text
    assert "  topTags:\n  - count: 2\n    tag: decision\n" in text
    assert "  totalEntries: 3\n  totalSize: 133\n" in text
    assert "instructions: Treat these entries as settled decisions" in text
    assert "metadata:\n  author: dollhousemcp\n  autoLoad: true\n" in text
    assert "entries:\n- content: We use PostgreSQL in production and SQLite for development.\n" in text


def test_export_refuses_a_folder_that_is_not_empty(alice, tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")

    with pytest.raises(CommandError, match="not empty; pass --force"):
        run("export_portfolio", str(tmp_path), "--user", "alice")
    run("export_portfolio", str(tmp_path), "--user", "alice", "--force")

    assert (tmp_path / "notes.txt").read_text() == "keep me" and (tmp_path / "personas").is_dir()


@pytest.mark.parametrize("command", ["import_portfolio", "export_portfolio"])
def test_an_unknown_user_is_an_error(db, command, tmp_path):
    with pytest.raises(CommandError, match="No user 'nobody'"):
        run(command, str(FIXTURE if command == "import_portfolio" else tmp_path), "--user", "nobody")


def test_files_that_are_too_large_are_refused_by_name(alice, tmp_path):
    personas = tmp_path / "personas"
    personas.mkdir()
    (personas / "fine.md").write_text("---\nname: Fine\ninstructions: You ARE fine.\n---\n")
    (personas / "huge.md").write_text("---\nname: Huge\ninstructions: You ARE big.\n---\n" + "x" * (2 * 1024 * 1024))
    (personas / "wide.md").write_text(f"---\nname: Wide\ndescription: {'y' * 70_000}\n---\nYou ARE wide.\n")

    out, _ = run_refused(str(tmp_path), "--user", "alice", refused=2)

    assert counts(out) == {"created": 1, "updated": 0, "skipped": 0, "refused": 2}
    assert Element.objects.get(owner=alice.user).name == "Fine"
    assert "personas/huge.md: file too large: at most 2,097,152 bytes" in out
    assert "personas/wide.md: front matter too large: at most 65,536 bytes" in out


def test_a_portfolio_with_nothing_readable_is_an_error(alice, tmp_path):
    with pytest.raises(CommandError, match="No element files"):
        run("import_portfolio", str(tmp_path), "--user", "alice")
    (tmp_path / "skills").mkdir()
    shutil.copy(FIXTURE / "skills" / "broken-skill.md", tmp_path / "skills")

    with pytest.raises(CommandError, match="Nothing could be read"):
        run("import_portfolio", str(tmp_path), "--user", "alice")


def test_backups_indexes_and_hidden_folders_are_not_elements(tmp_path):
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    for extra in ("memories/backups/user/2025-01-01/old.yaml", "memories/.trash/gone.yaml", "agents/.state/x.md"):
        (tmp_path / extra).parent.mkdir(parents=True)
        (tmp_path / extra).write_text("not: read")
    (tmp_path / "memories" / "_index.json").write_text("{}")
    (tmp_path / "personas" / "notes.txt").write_text("not an element")

    found = [path.relative_to(tmp_path).as_posix() for path, _ in iter_portfolio(tmp_path)]

    assert found == [path.relative_to(FIXTURE).as_posix() for path, _ in iter_portfolio(FIXTURE)]
    assert len(found) == 10


def test_a_file_whose_type_disagrees_with_its_folder_is_refused():
    text = "---\nname: Misplaced\ntype: skill\n---\nbody\n"

    with pytest.raises(Exception, match=r"personas/misplaced.md: type 'skill' does not match its folder"):
        package_from_markdown(text, element_type=ElementType.PERSONA, filename="personas/misplaced.md")


@pytest.mark.parametrize(("name", "filename"), [
    ("Debug Detective", "debug-detective"), ("codeReviewer", "code-reviewer"), ("snake_case name", "snake-case-name"),
    ("Café & Co.", "caf-co"), ("--", "unnamed"),
])
def test_file_names_are_normalised_as_the_original_does(name, filename):
    assert filename_for(name) == filename


def test_a_persona_is_written_with_its_heading_and_its_description_stands_in_for_missing_content():
    package = {"element_type": "persona", "element_name": "Quiet One", "description": "Says little.",
               "instructions": "You ARE terse.", "content": "", "format_version": "v2", "metadata": {}}

    text = markdown_from_package(package)

    assert text.endswith("instructions: You ARE terse.\nname: Quiet One\ntype: persona\n---\n\n# Quiet One\n\n"
                         "Says little.\n")
    assert package_path(package) == Path("personas", "quiet-one.md")
    read = package_from_markdown(text, element_type=ElementType.PERSONA, filename="personas/quiet-one.md")
    assert (read["instructions"], read["content"]) == ("You ARE terse.", "")


def test_the_progress_bar_redraws_in_place_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    progress = Progress(OutputWrapper(stream), total=4)

    progress.advance(1, "personas/a.md")
    progress.advance(4, "personas/b.md")
    progress.finish()

    assert stream.getvalue() == f"\r[{'#' * 7}{'.' * 23}] 1/4\r[{'#' * 30}] 4/4\n"


def test_batches_commit_together_and_a_refused_file_takes_none_of_its_batch_with_it(alice, monkeypatch):
    from elements.management.commands import import_portfolio

    monkeypatch.setattr(import_portfolio, "BATCH", 3)  # the fixture's 10 files in four batches
    monkeypatch.setattr(import_portfolio.Statistics, "min_rows", 2)
    refreshed = []
    real_refresh = import_portfolio.Statistics.refresh
    monkeypatch.setattr(import_portfolio.Statistics, "refresh", staticmethod(lambda: refreshed.append(real_refresh())))

    out, _ = run_refused(str(FIXTURE), "--user", "alice", refused=2)

    assert counts(out) == {"created": READABLE, "updated": 0, "skipped": 0, "refused": 2}
    assert Element.objects.filter(owner=alice.user).count() == READABLE
    # Refreshed each time the import had added as many rows as the table held at the last refresh.
    assert len(refreshed) == 3
