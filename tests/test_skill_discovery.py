"""workflows.skills: finding Agent Skills on disk, reading a skill's bundle, and pulling YAML out of completions."""

import os
from pathlib import Path

import pytest

from workflows.skills import (
    EXCLUDED_DIRS,
    MAX_SCRIPTS,
    SCAN_DEPTH,
    BundledFile,
    SkillCandidate,
    SkillError,
    completion_yaml,
    frontmatter_split,
    skill_bundle_read,
    skill_candidate,
    skills_scan,
    slugify_id,
)


def skill_md(name: str, description: str = "Does a thing.", extra: str = "", body: str = "# Steps\n") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_skill(folder: Path, name: str, **kwargs: str) -> Path:
    return write(folder / "SKILL.md", skill_md(name, **kwargs))


def names(found: list[SkillCandidate]) -> list[str]:
    return [candidate.name for candidate in found]


def scan(*, home: Path | None = None, env: dict[str, str] | None = None, start: Path | None = None,
         git_root: Path | None = None, content_scan: bool = False, **kwargs: int) -> list[SkillCandidate]:
    return skills_scan(home=home, env=env or {}, start=start, git_root=git_root, content_scan=content_scan, **kwargs)


# frontmatter_split


def test_it_splits_front_matter_from_the_body():
    meta, body = frontmatter_split("---\nname: pdf\ndescription: Reads PDFs.\n---\n# PDF\nText.\n")
    assert meta == {"name": "pdf", "description": "Reads PDFs."}
    assert body == "# PDF\nText.\n"


def test_it_accepts_a_yaml_document_end_marker_and_windows_line_endings():
    meta, body = frontmatter_split("---\r\nname: pdf\r\n...\r\nBody")
    assert meta == {"name": "pdf"}
    assert body == "Body"


@pytest.mark.parametrize("text", ["# Just markdown\n", "Intro\n---\nname: x\n---\n", "---\nname: never closed\n"])
def test_it_finds_no_front_matter_unless_the_file_opens_with_a_closed_block(text):
    assert frontmatter_split(text) == (None, text)


@pytest.mark.parametrize("yaml_text", ["name: [unclosed\n", "- a list\n- not a mapping\n", "just a string\n", ""])
def test_it_gives_no_mapping_for_invalid_or_non_mapping_front_matter(yaml_text):
    assert frontmatter_split(f"---\n{yaml_text}---\nBody\n") == (None, "Body\n")


# skill_candidate


def test_it_recognizes_a_skill_file(tmp_path):
    path = write(tmp_path / "pdf" / "SKILL.md", skill_md("pdf", "  Reads PDFs.  "))
    assert skill_candidate(path) == SkillCandidate(path=str(path), name="pdf", description="Reads PDFs.")


@pytest.mark.parametrize("text", [
    "---\nname: pdf\n---\n",
    "---\ndescription: Reads PDFs.\n---\n",
    "---\nname: ''\ndescription: Reads PDFs.\n---\n",
    "---\nname: pdf\ndescription: '   '\n---\n",
    "---\nname: 42\ndescription: Reads PDFs.\n---\n",
    "---\nname: pdf\ndescription: [a, b]\n---\n",
    "# No front matter\n",
])
def test_it_rejects_a_file_without_a_string_name_and_description(tmp_path, text):
    assert skill_candidate(write(tmp_path / "SKILL.md", text)) is None


@pytest.mark.parametrize("key_line", ["layout: post\n", "permalink: /x/\n", "date: 2024-05-01\n",
                                      "categories: [news]\n", "draft: true\n"])
def test_it_rejects_a_blog_post_by_its_front_matter(tmp_path, key_line):
    assert skill_candidate(write(tmp_path / "post.md", skill_md("post", extra=key_line))) is None


def test_it_rejects_a_blog_post_by_its_dated_name_or_posts_folder(tmp_path):
    assert skill_candidate(write(tmp_path / "2024-05-01-launch.md", skill_md("launch"))) is None
    assert skill_candidate(write(tmp_path / "_posts" / "launch.md", skill_md("launch"))) is None
    assert skill_candidate(write(tmp_path / "posts" / "launch.md", skill_md("launch"))) is not None


def test_it_rejects_an_oversize_or_non_utf8_file(tmp_path):
    big = write(tmp_path / "big.md", skill_md("big", body="x" * (256 * 1024)))
    latin = tmp_path / "latin.md"
    latin.write_bytes(skill_md("caf\xe9").encode("latin-1"))
    assert skill_candidate(big) is None
    assert skill_candidate(latin) is None


def test_it_rejects_a_file_it_cannot_read(tmp_path):
    assert skill_candidate(tmp_path / "missing.md") is None


# skills_scan


def test_it_scans_user_roots_then_project_folders_then_the_repository(tmp_path):
    home, repo = tmp_path / "home", tmp_path / "repo"
    for index, root in enumerate([".claude/skills", ".agents/skills", ".codex/skills", ".config/opencode/skills",
                                  ".gemini/skills"]):
        write_skill(home / root / f"user{index}", f"user-{index}")
    (repo / ".git").mkdir(parents=True)
    start = repo / "packages" / "web"
    write_skill(start / ".opencode" / "skills" / "near", "near")
    write_skill(repo / ".claude" / "skills" / "top", "top-claude")
    write_skill(repo / ".agents" / "skills" / "top", "top-agents")
    write_skill(repo / "docs" / "guide", "in-docs")
    found = scan(home=home, start=start, git_root=repo, content_scan=True)
    assert names(found) == ["user-0", "user-1", "user-2", "user-3", "user-4", "near", "top-claude", "top-agents",
                            "in-docs"]
    assert all(os.path.isabs(candidate.path) for candidate in found)
    assert found[-1].path == str(repo / "docs" / "guide" / "SKILL.md")


def test_it_leaves_the_rest_of_the_repository_alone_without_content_scan(tmp_path):
    repo = tmp_path / "repo"
    write_skill(repo / ".claude" / "skills" / "top", "top")
    write_skill(repo / "docs" / "guide", "in-docs")
    assert names(scan(start=repo, git_root=repo)) == ["top"]
    assert names(scan(start=repo, git_root=repo, content_scan=True)) == ["top", "in-docs"]


def test_it_does_not_walk_above_the_git_root(tmp_path):
    write_skill(tmp_path / ".claude" / "skills" / "outside", "outside")
    repo = tmp_path / "repo"
    write_skill(repo / ".claude" / "skills" / "inside", "inside")
    assert names(scan(start=repo / "src", git_root=repo)) == ["inside"]


def test_it_looks_only_at_the_start_folder_without_a_git_root(tmp_path):
    write_skill(tmp_path / ".claude" / "skills" / "parent", "parent")
    start = tmp_path / "work"
    write_skill(start / ".agents" / "skills" / "here", "here")
    assert names(scan(start=start, content_scan=True)) == ["here"]


def test_it_skips_user_roots_without_a_home(tmp_path):
    write_skill(tmp_path / ".claude" / "skills" / "mine", "mine")
    assert scan(home=None, env={"CODEX_HOME": str(tmp_path / ".claude")}) == []


def test_it_reads_codex_skills_from_codex_home_when_set(tmp_path):
    home, codex_home = tmp_path / "home", tmp_path / "elsewhere" / "codex"
    write_skill(home / ".codex" / "skills" / "default", "default-codex")
    write_skill(codex_home / "skills" / "moved", "moved-codex")
    assert names(scan(home=home)) == ["default-codex"]
    assert names(scan(home=home, env={"CODEX_HOME": str(codex_home)})) == ["moved-codex"]


def test_it_reads_a_home_relative_codex_home_against_the_given_home(tmp_path):
    home = tmp_path / "home"
    write_skill(home / "codex-data" / "skills" / "moved", "moved-codex")
    assert names(scan(home=home, env={"CODEX_HOME": "~/codex-data"})) == ["moved-codex"]


@pytest.mark.parametrize("excluded", sorted(EXCLUDED_DIRS))
def test_it_skips_excluded_folders(tmp_path, excluded):
    repo = tmp_path / "repo"
    write_skill(repo / excluded / "pkg", "hidden")
    write_skill(repo / ".claude" / "skills" / excluded / "pkg", "hidden-in-root")
    write_skill(repo / "src" / "pkg", "visible")
    assert names(scan(start=repo, git_root=repo, content_scan=True)) == ["visible"]


def test_it_stops_descending_below_the_scan_depth(tmp_path):
    repo = tmp_path / "repo"
    deepest_allowed = repo.joinpath(*[f"d{level}" for level in range(SCAN_DEPTH)])
    write(deepest_allowed / "ok.md", skill_md("at-depth-6"))
    write(deepest_allowed / "d6" / "deep.md", skill_md("at-depth-7"))
    write(repo / "top.md", skill_md("at-depth-0"))
    assert names(scan(git_root=repo, content_scan=True)) == ["at-depth-0", "at-depth-6"]


def test_it_counts_depth_from_each_skill_root(tmp_path):
    skills = tmp_path / "home" / ".claude" / "skills"
    write(skills.joinpath(*["n"] * SCAN_DEPTH) / "ok.md", skill_md("deep-ok"))
    write(skills.joinpath(*["n"] * (SCAN_DEPTH + 1)) / "too.md", skill_md("too-deep"))
    assert names(scan(home=tmp_path / "home")) == ["deep-ok"]


def test_it_skips_blog_posts_and_non_markdown_files(tmp_path):
    repo = tmp_path / "repo"
    write(repo / "_posts" / "hello.md", skill_md("post-folder"))
    write(repo / "blog" / "2024-01-02-hello.md", skill_md("dated"))
    write(repo / "blog" / "hello.md", skill_md("layout", extra="layout: post\n"))
    write(repo / "notes.txt", skill_md("not-markdown"))
    write(repo / "README.MD", skill_md("upper-case-suffix"))
    assert names(scan(git_root=repo, content_scan=True)) == ["upper-case-suffix"]


def test_it_does_not_follow_directory_symlinks(tmp_path):
    outside = tmp_path / "outside"
    write_skill(outside / "secret", "outside-skill")
    repo = tmp_path / "repo"
    write_skill(repo / "src" / "real", "real")
    (repo / "src" / "linked").symlink_to(outside, target_is_directory=True)
    (repo / ".agents").mkdir()
    (repo / ".agents" / "skills").symlink_to(outside, target_is_directory=True)
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "skills").symlink_to(outside, target_is_directory=True)
    assert names(scan(home=home, start=repo, git_root=repo, content_scan=True)) == ["real"]


def test_it_does_not_enter_a_project_folder_reached_through_a_symlinked_parent(tmp_path):
    outside = tmp_path / "outside"
    write_skill(outside / "skills" / "secret", "outside-skill")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".claude").symlink_to(outside, target_is_directory=True)
    assert scan(start=repo, git_root=repo) == []


def test_it_reports_a_file_reached_twice_once_at_its_first_place(tmp_path):
    repo = tmp_path / "repo"
    first = write_skill(repo / ".claude" / "skills" / "shared", "shared")
    (repo / "docs").mkdir()
    (repo / "docs" / "alias.md").symlink_to(first)
    found = scan(start=repo, git_root=repo, content_scan=True)
    assert found == [SkillCandidate(path=str(first), name="shared", description="Does a thing.")]


def test_it_reports_a_project_skill_once_when_start_is_the_git_root(tmp_path):
    repo = tmp_path / "repo"
    write_skill(repo / ".claude" / "skills" / "one", "one")
    assert names(scan(home=repo, start=repo, git_root=repo, content_scan=True)) == ["one"]


def test_it_stops_after_examining_max_files(tmp_path):
    repo = tmp_path / "repo"
    for index in range(5):
        write(repo / f"skill{index}.md", skill_md(f"s{index}"))
    assert names(scan(git_root=repo, content_scan=True, max_files=3)) == ["s0", "s1", "s2"]


def test_it_counts_every_file_examined_toward_max_files(tmp_path):
    repo = tmp_path / "repo"
    write(repo / "a.txt", "not markdown")
    write(repo / "b.md", skill_md("b"))
    assert scan(git_root=repo, content_scan=True, max_files=1) == []


# skill_bundle_read


def make_bundle(root: Path) -> Path:
    write_skill(root, "checker", description="Checks things.", body="# Checker\nRun scripts/check.sh.\n")
    write(root / "scripts" / "check.sh", "#!/bin/sh\necho ok\n").chmod(0o755)
    write(root / "scripts" / "lib" / "helpers.py", "def helper():\n    return 1\n")
    write(root / "references" / "REFERENCE.md", "# Reference\n")
    write(root / "assets" / "logo.txt", "logo")
    return root


def test_it_reads_a_bundle_from_its_folder(tmp_path):
    root = make_bundle(tmp_path / "checker")
    bundle = skill_bundle_read(str(root))
    assert bundle.skill_file == str(root / "SKILL.md")
    assert bundle.root == str(root)
    assert (bundle.name, bundle.description) == ("checker", "Checks things.")
    assert bundle.text == (root / "SKILL.md").read_text()
    assert bundle.body == "# Checker\nRun scripts/check.sh.\n"
    assert bundle.scripts == (
        BundledFile(path="scripts/check.sh", content="#!/bin/sh\necho ok\n", executable=True),
        BundledFile(path="scripts/lib/helpers.py", content="def helper():\n    return 1\n", executable=False),
    )
    assert bundle.skipped_dirs == ("assets", "references")


def test_it_reads_a_bundle_from_its_skill_file(tmp_path):
    root = make_bundle(tmp_path / "checker")
    assert skill_bundle_read(str(root / "SKILL.md")) == skill_bundle_read(str(root))


def test_it_accepts_a_lower_case_skill_file_and_any_markdown_file(tmp_path):
    write(tmp_path / "lower" / "skill.md", skill_md("lower"))
    write(tmp_path / "named" / "review.md", skill_md("named"))
    assert skill_bundle_read(str(tmp_path / "lower")).name == "lower"
    named = skill_bundle_read(str(tmp_path / "named" / "review.md"))
    assert (named.name, named.root, named.scripts, named.skipped_dirs) == ("named", str(tmp_path / "named"), (), ())


def test_it_skips_oversize_binary_and_symlinked_scripts(tmp_path):
    root = tmp_path / "skill"
    write_skill(root, "skill")
    scripts = root / "scripts"
    write(scripts / "big.sh", "x" * (256 * 1024 + 1))
    (scripts / "binary.bin").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    (scripts / "nul.dat").write_bytes(b"ab\x00cd")
    (scripts / "link.sh").symlink_to(tmp_path / "secret.txt")
    write(tmp_path / "secret.txt", "secret")
    (scripts / "linked-dir").symlink_to(tmp_path, target_is_directory=True)
    write(scripts / "ok.sh", "echo ok\n")
    assert [script.path for script in skill_bundle_read(str(root)).scripts] == ["scripts/ok.sh"]


def test_it_bundles_at_most_fifty_scripts_in_path_order(tmp_path):
    root = tmp_path / "skill"
    write_skill(root, "skill")
    for index in range(MAX_SCRIPTS + 5):
        write(root / "scripts" / f"s{index:02d}.sh", f"echo {index}\n")
    scripts = skill_bundle_read(str(root)).scripts
    assert len(scripts) == MAX_SCRIPTS
    assert [script.path for script in scripts] == [f"scripts/s{index:02d}.sh" for index in range(MAX_SCRIPTS)]


def test_it_ignores_a_symlinked_scripts_folder(tmp_path):
    root = tmp_path / "skill"
    write_skill(root, "skill")
    write(tmp_path / "elsewhere" / "run.sh", "echo hi\n")
    (root / "scripts").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert skill_bundle_read(str(root)).scripts == ()


def test_it_refuses_a_relative_path():
    with pytest.raises(SkillError) as caught:
        skill_bundle_read("skills/checker")
    assert "skills/checker" in caught.value.message


@pytest.mark.parametrize(("setup", "expected"), [
    (lambda base: base / "missing", "does not exist"),
    (lambda base: (base / "empty").mkdir() or base / "empty", "holds no SKILL.md"),
    (lambda base: write(base / "notes.txt", skill_md("txt")), "not a Markdown"),
    (lambda base: write(base / "plain.md", "# Not a skill\n"), "is not a skill"),
    (lambda base: write(base / "big.md", skill_md("big", body="x" * (256 * 1024))), "larger than"),
])
def test_it_refuses_what_is_not_a_readable_skill(tmp_path, setup, expected):
    with pytest.raises(SkillError) as caught:
        skill_bundle_read(str(setup(tmp_path)))
    assert expected in caught.value.message


def test_it_refuses_a_skill_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "SKILL.md"
    path.write_bytes(skill_md("caf\xe9").encode("latin-1"))
    with pytest.raises(SkillError, match="not UTF-8"):
        skill_bundle_read(str(path))


# completion_yaml

WORKFLOW = "name: review\nnodes:\n  - id: read\n    type: prompt\n"


def test_it_takes_a_fenced_yaml_block_out_of_prose():
    raw = f"Here is the workflow:\n\n```yaml\n{WORKFLOW}```\n\nLet me know if you want changes.\n"
    assert completion_yaml(raw) == WORKFLOW.rstrip()


def test_it_prefers_the_yaml_tagged_block_over_earlier_blocks():
    raw = f"```\nnot this\n```\n```json\n{{}}\n```\n```yml\n{WORKFLOW}```\n"
    assert completion_yaml(raw) == WORKFLOW.rstrip()


def test_it_takes_a_tilde_fence_with_leading_spaces():
    indented = "".join(f"   {line}\n" for line in WORKFLOW.splitlines())
    raw = f"Sure.\n   ~~~yaml\n{indented}   ~~~\n"
    assert completion_yaml(raw) == WORKFLOW.rstrip()


def test_it_takes_a_block_of_any_tag_with_top_level_nodes():
    raw = f"```python\nprint('hi')\n```\n```text\n{WORKFLOW}```\n```\nuntagged: true\n```\n"
    assert completion_yaml(raw) == WORKFLOW.rstrip()


def test_it_falls_back_to_the_first_untagged_block():
    raw = "```python\nprint('hi')\n```\n```\nname: review\n```\n"
    assert completion_yaml(raw) == "name: review"


def test_it_takes_an_unclosed_fence_to_the_end():
    assert completion_yaml(f"```yaml\n{WORKFLOW}") == WORKFLOW.rstrip()


def test_it_drops_a_prose_line_before_bare_yaml():
    raw = f"Here is the workflow you asked for.\n{WORKFLOW}"
    assert completion_yaml(raw) == WORKFLOW.rstrip()


def test_it_keeps_plain_bare_yaml():
    assert completion_yaml(WORKFLOW) == WORKFLOW.rstrip()
    assert completion_yaml(WORKFLOW.replace("\n", "\r\n")) == WORKFLOW.rstrip()


def test_it_returns_the_stripped_text_when_nothing_looks_like_yaml():
    assert completion_yaml("  I could not build a workflow for that.  \n") == "I could not build a workflow for that."


# slugify_id


@pytest.mark.parametrize(("name", "expected"), [
    ("Code Review", "code-review"),
    ("  PDF: extract & summarise!  ", "pdf-extract-summarise"),
    ("already_ok-id", "already_ok-id"),
    ("Café Menu", "caf-menu"),
    ("!!!", ""),
    ("", ""),
])
def test_it_slugifies_a_name_into_an_id(name, expected):
    assert slugify_id(name) == expected
