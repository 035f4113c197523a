"""Finding skills (the Agent Skills standard) on disk, reading a skill's bundle, and pulling workflow YAML
out of a model's completion.

A skill is a Markdown file whose YAML front matter is a mapping with a non-empty string `name` and
`description`. Blog posts (Jekyll, Hugo) share that shape, so front matter with post keys, dated
file names and `_posts` folders are left out. Walks never enter directory symlinks: a link inside a
repository could otherwise lead the scan anywhere on the machine.
"""

from __future__ import annotations

import os
import re
import stat
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import safeyaml
from workflows.yamltext import YAML_BOUNDS

MAX_SKILL_BYTES = 256 * 1024
MAX_SCRIPT_BYTES = 256 * 1024
MAX_SCRIPTS = 50
SCAN_DEPTH = 6

USER_SKILL_ROOTS: tuple[str, ...] = (
    ".claude/skills", ".agents/skills", ".codex/skills", ".config/opencode/skills", ".gemini/skills",
)
CODEX_SKILL_ROOT = ".codex/skills"
PROJECT_SKILL_DIRS: tuple[str, ...] = (".claude/skills", ".agents/skills", ".opencode/skills")
EXCLUDED_DIRS = frozenset({".git", "node_modules", "dist", "build", ".next", ".turbo", ".nx", "coverage", ".cache"})
BUNDLE_SKIPPED_DIRS: tuple[str, ...] = ("assets", "examples", "references")

_BLOG_KEYS = frozenset({"layout", "permalink", "date", "categories", "draft"})
_DATED_NAME = re.compile(r"\d{4}-\d{2}-\d{2}-")
_FRONTMATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(?P<yaml>.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)",
                          re.DOTALL | re.MULTILINE)
# Opening fence (any indent, ``` or ~~~, optional info string), body, then a matching closing fence.
# A completion cut off mid-block has no closing fence; its block runs to the end.
_FENCED_BLOCK = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<tag>[^\s`]*)[^\n]*\n(?P<body>.*?)(?:^[ \t]*(?P=fence)[`~]*[ \t]*$|\Z)",
    re.DOTALL | re.MULTILINE,
)
_TOP_LEVEL_NODES = re.compile(r"^nodes:", re.MULTILINE)
_TOP_LEVEL_KEY = re.compile(r"^[A-Za-z_][\w-]*:", re.MULTILINE)
_SLUG_OUTSIDE = re.compile(r"[^a-z0-9_-]+")


class SkillError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class SkillCandidate:
    path: str
    name: str
    description: str


@dataclass(frozen=True)
class BundledFile:
    path: str  # relative to the bundle root, e.g. "scripts/check.sh"
    content: str
    executable: bool


@dataclass(frozen=True)
class SkillBundle:
    skill_file: str
    root: str
    name: str
    description: str
    text: str  # the whole SKILL.md
    body: str
    scripts: tuple[BundledFile, ...]
    skipped_dirs: tuple[str, ...]


def frontmatter_split(text: str) -> tuple[dict[str, Any] | None, str]:
    """The front matter mapping (None when absent, not YAML, or not a mapping) and the body after it."""
    match = _FRONTMATTER.match(text)
    if match is None:
        return None, text
    body = text[match.end():]
    try:
        data = safeyaml.load(match["yaml"], schema=safeyaml.WORKFLOW, bounds=YAML_BOUNDS)
    except safeyaml.InvalidYAML:
        return None, body
    return (data if isinstance(data, dict) else None), body


def skill_candidate(path: Path) -> SkillCandidate | None:
    """The skill a Markdown file declares, or None when it is not one (or is too large or not UTF-8)."""
    text = _small_text(path, MAX_SKILL_BYTES)
    if text is None or _is_blog_path(path):
        return None
    meta, _ = frontmatter_split(text)
    if meta is None or _BLOG_KEYS & meta.keys():
        return None
    fields = _name_and_description(meta)
    if fields is None:
        return None
    return SkillCandidate(path=str(path), name=fields[0], description=fields[1])


def _small_text(path: Path, limit: int) -> str | None:
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            return None
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _is_blog_path(path: Path) -> bool:
    return bool(_DATED_NAME.match(path.name)) or "_posts" in path.parts


def _name_and_description(meta: dict[str, Any]) -> tuple[str, str] | None:
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not isinstance(description, str):
        return None
    if not name.strip() or not description.strip():
        return None
    return name.strip(), description.strip()


def user_skill_roots(home: Path, env: Mapping[str, str]) -> list[tuple[Path, str]]:
    """The user-global skill folders as (base, relative path) pairs, with Codex's moved to
    `$CODEX_HOME/skills` when that is set."""
    codex_home = _codex_home(home, env)
    return [(codex_home, "skills") if rel == CODEX_SKILL_ROOT and codex_home else (home, rel)
            for rel in USER_SKILL_ROOTS]


def _codex_home(home: Path, env: Mapping[str, str]) -> Path | None:
    value = env.get("CODEX_HOME", "").strip()
    if value == "~" or value.startswith("~/"):
        return home / value[2:]
    # A relative CODEX_HOME depends on the client's own working directory, which we cannot know.
    return Path(value) if value.startswith("/") else None


def project_skill_dirs(start: Path | None, git_root: Path | None) -> list[tuple[Path, str]]:
    """The project-local skill folders as (base, relative path) pairs, nearest first: from `start` up to
    and including `git_root`."""
    return [(folder, rel) for folder in _folders_up(start, git_root) for rel in PROJECT_SKILL_DIRS]


def _folders_up(start: Path | None, git_root: Path | None) -> list[Path]:
    if start is None:
        return [git_root] if git_root is not None else []
    if git_root is None or not (start == git_root or git_root in start.parents):
        return [start]
    folders = [start]
    while folders[-1] != git_root:
        folders.append(folders[-1].parent)
    return folders


@dataclass
class _Scan:
    max_files: int
    examined: int = 0
    seen: set[str] = field(default_factory=set)
    found: list[SkillCandidate] = field(default_factory=list)

    @property
    def exhausted(self) -> bool:
        return self.examined >= self.max_files

    def tree(self, base: Path, rel: str = "") -> None:
        root = base / rel
        if self.exhausted or not _is_plain_dir(base, rel):
            return
        for entry in _file_entries(root, EXCLUDED_DIRS):
            if self.exhausted:
                return
            self.examined += 1
            self.file(Path(entry.path))

    def file(self, path: Path) -> None:
        if path.suffix.lower() != ".md" or not path.is_file():
            return
        real = os.path.realpath(path)
        if real in self.seen:
            return
        self.seen.add(real)
        candidate = skill_candidate(path)
        if candidate is not None:
            self.found.append(candidate)


def skills_scan(*, home: Path | None, env: Mapping[str, str], start: Path | None, git_root: Path | None,
                content_scan: bool, max_files: int = 20000) -> list[SkillCandidate]:
    """Every skill found, in order: user-global roots, project-local folders (nearest first), then,
    with `content_scan`, the rest of the repository. A file reached twice is reported once."""
    scan = _Scan(max_files=max_files)
    roots = user_skill_roots(home, env) if home is not None else []
    roots += project_skill_dirs(start, git_root)
    if content_scan and git_root is not None:
        roots.append((git_root, ""))
    for base, rel in roots:
        scan.tree(base.absolute(), rel)
    return scan.found


def _is_plain_dir(base: Path, rel: str = "") -> bool:
    """`base / rel` is a directory, and no folder of `rel` is a symlink (`base` itself may go through one)."""
    path = base
    for part in Path(rel).parts:
        path = path / part
        if path.is_symlink():
            return False
    return path.is_dir()


def _file_entries(directory: Path, excluded: frozenset[str], depth: int = 0) -> Iterator[os.DirEntry[str]]:
    """Every non-directory entry below `directory`, depth first in name order, at most SCAN_DEPTH folders
    down. Directory symlinks are not entered; they come out as entries, which callers check."""
    try:
        with os.scandir(directory) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError:
        return
    subdirs = []
    for entry in entries:
        if not _entry_is_dir(entry):
            yield entry
        elif entry.name not in excluded and depth < SCAN_DEPTH:
            subdirs.append(entry)
    for entry in subdirs:
        yield from _file_entries(Path(entry.path), excluded, depth + 1)


def _entry_is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def skill_bundle_read(skill_path: str) -> SkillBundle:
    """A skill's SKILL.md with its bundled scripts. `skill_path` is the skill file or the folder holding it."""
    skill_file = _skill_file(skill_path)
    text = _skill_text(skill_file)
    meta, body = frontmatter_split(text)
    fields = _name_and_description(meta) if meta is not None else None
    if fields is None:
        raise SkillError(f"{str(skill_file)!r} is not a skill: its front matter needs a non-empty name and "
                         "description.")
    root = skill_file.parent
    return SkillBundle(skill_file=str(skill_file), root=str(root), name=fields[0], description=fields[1],
                       text=text, body=body, scripts=_bundled_scripts(root), skipped_dirs=_skipped_dirs(root))


def _skill_file(skill_path: str) -> Path:
    if not skill_path or "\x00" in skill_path or not os.path.isabs(skill_path):
        raise SkillError(f"The skill path {skill_path!r} is not an absolute path.")
    path = Path(skill_path)
    if path.is_dir():
        for name in ("SKILL.md", "skill.md"):
            if (path / name).is_file():
                return path / name
        raise SkillError(f"The folder {skill_path!r} holds no SKILL.md.")
    if not path.exists():
        raise SkillError(f"The skill path {skill_path!r} does not exist.")
    if not path.is_file() or path.suffix.lower() != ".md":
        raise SkillError(f"The skill path {skill_path!r} is not a Markdown (.md) file.")
    return path


def _skill_text(skill_file: Path) -> str:
    try:
        if skill_file.stat().st_size > MAX_SKILL_BYTES:
            raise SkillError(f"The skill file {str(skill_file)!r} is larger than {MAX_SKILL_BYTES // 1024} KiB.")
        return skill_file.read_bytes().decode("utf-8")
    except OSError as exc:
        raise SkillError(f"The skill file {str(skill_file)!r} cannot be read: {exc.strerror or exc}.") from exc
    except UnicodeDecodeError as exc:
        raise SkillError(f"The skill file {str(skill_file)!r} is not UTF-8 text.") from exc


def _bundled_scripts(root: Path) -> tuple[BundledFile, ...]:
    """Text files under scripts/, sorted by path: regular files only (no symlinks), each small and UTF-8."""
    scripts_dir = root / "scripts"
    if not _is_plain_dir(root, "scripts"):
        return ()
    paths = sorted(Path(entry.path).relative_to(root).as_posix()
                   for entry in _file_entries(scripts_dir, frozenset()) if _is_regular_file(entry))
    bundled: list[BundledFile] = []
    for rel in paths:
        script = _bundled_file(root, rel)
        if script is not None:
            bundled.append(script)
        if len(bundled) == MAX_SCRIPTS:
            break
    return tuple(bundled)


def _is_regular_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _bundled_file(root: Path, rel: str) -> BundledFile | None:
    path = root / rel
    content = _small_text(path, MAX_SCRIPT_BYTES)
    # NUL bytes decode as UTF-8 but mark a binary file.
    if content is None or "\x00" in content:
        return None
    try:
        executable = bool(path.lstat().st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
    except OSError:
        return None
    return BundledFile(path=rel, content=content, executable=executable)


def _skipped_dirs(root: Path) -> tuple[str, ...]:
    return tuple(name for name in BUNDLE_SKIPPED_DIRS if (root / name).is_dir())


def completion_yaml(raw: str) -> str:
    """The workflow YAML in a model's completion: the first yaml/yml fenced block, else the first fenced
    block with a top-level `nodes:` key, else the first untagged block; without any of those, the text
    from the first top-level `key:` line on, else the whole text."""
    text = raw.replace("\r\n", "\n")
    blocks = [(match["tag"].lower(), textwrap.dedent(match["body"])) for match in _FENCED_BLOCK.finditer(text)]
    for wanted in (
        lambda tag, body: tag in ("yaml", "yml"),
        lambda tag, body: bool(_TOP_LEVEL_NODES.search(body)),
        lambda tag, body: tag == "",
    ):
        chosen = next((body for tag, body in blocks if wanted(tag, body)), None)
        if chosen is not None:
            return chosen.strip("\n").rstrip()
    key_line = _TOP_LEVEL_KEY.search(text)
    if key_line is not None:
        return text[key_line.start():].rstrip()
    return text.strip()


def slugify_id(name: str) -> str:
    """A lowercase id of letters, digits, `_` and `-`; empty when nothing of `name` survives."""
    return _SLUG_OUTSIDE.sub("-", name.lower()).strip("-")
