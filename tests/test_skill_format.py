"""convert_skill_format: Agent Skills (SKILL.md plus files) to Dollhouse skills and back, losing nothing."""

import json

import pytest

from core.errors import InvalidInput
from elements.skill_format import (
    AGENT_DESCRIPTION_MAX,
    CONTENT_FILE,
    agent_to_dollhouse,
    convert,
    dollhouse_to_agent,
)
from elements.validation import safe_yaml_load

# Deliberately unlike what the converter writes: a comment, quoting, key order, an extra key, no blank line.
ORIGINAL_SKILL_MD = """---
# Kept exactly, comment included.
description: "Extracts text and tables from PDF files. Use when the user mentions PDFs."
name: pdf-processing
license: Apache-2.0
allowed-tools:   Bash(python:*)  Read
metadata:
  version: "1.0"
  author: example-org
  team: docs
created: 2024-05-01
---
# PDF processing
Run `scripts/extract.py` on the file, then summarise.
"""
ORIGINAL_FILES = {
    "scripts/extract.py": "import sys\nprint(sys.argv[1])",  # no final newline
    "references/REFERENCE.md": "# Reference\n\n```python\nextract('a.pdf')\n```\n",
}

RICH_DOLLHOUSE = {
    "element_name": "Code Review Helper",
    "description": "Reviews pull requests for correctness and style.",
    "instructions": "Read the diff first.\n\n- Flag bugs before style.\n",
    "content": "## Checklist\n\n1. Tests pass\n2. Names are clear\n",
    "tags": ["review", "quality"],
    "triggers": ["review", "pr"],
    "category": "development",
    "author": "alice",
    "version": "2.1.0",
    "metadata": {"proficiency_levels": {"basic": "spots typos"}, "agent_skill": {"license": "MIT"}},
}


def reimport(exported: dict) -> dict:
    """Feeds an export's SKILL.md and files back in, as a client that wrote the folder to disk would."""
    return agent_to_dollhouse({"skill_md": exported["skill_md"], "files": exported["agent_skill"]["files"]})


def frontmatter_of(skill_md: str) -> dict:
    return safe_yaml_load(skill_md.split("---\n")[1])


# --- Lossless round trips ---------------------------------------------------------------------


def test_an_agent_skill_comes_back_as_the_identical_skill_md_and_files():
    imported = agent_to_dollhouse({"skill_md": ORIGINAL_SKILL_MD, "files": ORIGINAL_FILES})

    exported = dollhouse_to_agent(imported["dollhouse"], roundtrip_state=imported["roundtrip_state"])

    assert exported["skill_md"] == ORIGINAL_SKILL_MD
    assert exported["agent_skill"]["files"] == ORIGINAL_FILES
    assert exported["agent_skill"]["name"] == "pdf-processing"
    assert exported["agent_skill"]["body"] == ("# PDF processing\n"
                                               "Run `scripts/extract.py` on the file, then summarise.\n")
    assert exported["warnings"] == []


def test_the_round_trip_also_works_from_the_dollhouse_markdown():
    imported = agent_to_dollhouse({"skill_md": ORIGINAL_SKILL_MD, "files": ORIGINAL_FILES})

    exported = dollhouse_to_agent(dollhouse_markdown=imported["dollhouse_markdown"],
                                  roundtrip_state=imported["roundtrip_state"])

    assert exported["skill_md"] == ORIGINAL_SKILL_MD
    assert exported["agent_skill"]["files"] == ORIGINAL_FILES
    assert exported["warnings"] == []


def test_a_skill_md_with_windows_line_endings_comes_back_byte_for_byte():
    original = "---\r\nname: crlf-skill\r\ndescription: Written on Windows.\r\n---\r\n\r\nStep one.\r\n"
    imported = agent_to_dollhouse({"skill_md": original})

    exported = dollhouse_to_agent(imported["dollhouse"], roundtrip_state=imported["roundtrip_state"])

    assert imported["dollhouse"]["instructions"] == "Step one.\r\n"
    assert exported["skill_md"] == original


def test_a_structured_agent_skill_round_trips_to_the_skill_md_it_describes():
    agent_skill = {"name": "release-notes", "description": "Drafts release notes from merged PRs.",
                   "body": "Group changes by area.\n", "compatibility": "Needs git and network access.",
                   "allowed_tools": ["Bash(git:*)", "Read"], "metadata": {"owner": "docs"},
                   "files": {"assets/template.md": "## {{version}}\n"}}
    imported = agent_to_dollhouse(agent_skill)

    exported = dollhouse_to_agent(imported["dollhouse"], roundtrip_state=imported["roundtrip_state"])

    assert exported["skill_md"] == imported["roundtrip_state"]["skill_md"]
    assert frontmatter_of(exported["skill_md"]) == {
        "name": "release-notes", "description": "Drafts release notes from merged PRs.",
        "compatibility": "Needs git and network access.", "allowed-tools": "Bash(git:*) Read",
        "metadata": {"owner": "docs"}}
    assert exported["skill_md"].endswith("---\n\nGroup changes by area.\n")
    assert exported["agent_skill"] == {**agent_skill, "allowed_tools": "Bash(git:*) Read"}


@pytest.mark.parametrize("via", ["skill_md", "structured agent_skill"])
def test_a_dollhouse_skill_keeps_every_field_through_an_agent_skill(via):
    exported = dollhouse_to_agent(RICH_DOLLHOUSE)

    reimported = reimport(exported) if via == "skill_md" else agent_to_dollhouse(exported["agent_skill"])

    assert reimported["dollhouse"] == RICH_DOLLHOUSE


def test_a_minimal_dollhouse_skill_keeps_its_empty_fields_through_an_agent_skill():
    minimal = {"element_name": "tiny", "description": "Does one thing."}

    exported = dollhouse_to_agent(minimal)

    assert exported["skill_md"] == "---\nname: tiny\ndescription: Does one thing.\n---\n"
    assert exported["agent_skill"]["files"] == {}
    assert reimport(exported)["dollhouse"] == {**minimal, "instructions": "", "content": "", "tags": [],
                                               "triggers": [], "category": "", "author": "", "version": "",
                                               "metadata": {}}


@pytest.mark.parametrize("instructions", [
    "no final newline",
    "  leading spaces\nand trailing spaces   \n",
    "tabs\tinside\n\n\n",
    "---\nlooks like frontmatter\n---\n",
    "\nstarts with a blank line\n",
    "ünïcödé and emoji 🙂\n",
    "key: value\n- not yaml, just text\n",
])
def test_awkward_instructions_survive_both_markdown_formats_exactly(instructions):
    imported = agent_to_dollhouse({"name": "awkward", "description": "Edge cases.", "body": instructions})

    from_markdown = dollhouse_to_agent(dollhouse_markdown=imported["dollhouse_markdown"],
                                       roundtrip_state=imported["roundtrip_state"])
    rebuilt = dollhouse_to_agent(imported["dollhouse"])

    assert imported["dollhouse"]["instructions"] == instructions
    assert from_markdown["warnings"] == []  # the markdown read back to the very same fields
    assert rebuilt["agent_skill"]["body"] == instructions
    assert reimport(rebuilt)["dollhouse"]["instructions"] == instructions


# --- Content and files ------------------------------------------------------------------------


def test_importing_maps_the_body_to_instructions_and_each_file_to_a_fenced_section():
    imported = agent_to_dollhouse({"name": "files-demo", "description": "Shows files.", "body": "Do it.\n",
                                   "files": {"scripts/run.sh": "echo hi\n", "assets/empty.txt": ""}})

    dollhouse = imported["dollhouse"]
    assert dollhouse["instructions"] == "Do it.\n"
    assert dollhouse["content"] == ("## File: scripts/run.sh\n\n```\necho hi\n```\n"
                                    "\n"
                                    "## File: assets/empty.txt\n\n```\n```\n")
    assert imported["roundtrip_state"]["files"] == {"scripts/run.sh": "echo hi\n", "assets/empty.txt": ""}


def test_a_fence_is_longer_than_any_backtick_run_inside_the_file():
    imported = agent_to_dollhouse({"name": "fences", "description": "Nested code.",
                                   "files": {"references/guide.md": "`````\ncode\n`````\n"}})

    assert imported["dollhouse"]["content"] == "## File: references/guide.md\n\n``````\n`````\ncode\n`````\n``````\n"


def test_dollhouse_content_made_of_file_sections_becomes_the_agent_skill_files():
    content = "## File: scripts/a.py\n\n```\nprint(1)\n```\n\n## File: references/b.md\n\n```\n# B\n```\n"

    exported = dollhouse_to_agent({"element_name": "split", "description": "Two files.", "content": content})

    assert exported["agent_skill"]["files"] == {"scripts/a.py": "print(1)\n", "references/b.md": "# B\n"}


def test_free_form_dollhouse_content_becomes_one_reference_file_read_back_verbatim():
    content = "# Background\n\nSome reference text without file sections."

    exported = dollhouse_to_agent({"element_name": "notes", "description": "Has notes.", "content": content})

    assert exported["agent_skill"]["files"] == {CONTENT_FILE: content}
    assert reimport(exported)["dollhouse"]["content"] == content


def test_text_after_the_file_sections_becomes_the_reference_file():
    content = "## File: scripts/a.py\n\n```\nprint(1)\n```\n\nClosing remarks.\n"

    exported = dollhouse_to_agent({"element_name": "mixed", "description": "Mixed.", "content": content})

    assert exported["agent_skill"]["files"] == {"scripts/a.py": "print(1)\n", CONTENT_FILE: "Closing remarks.\n"}
    assert reimport(exported)["dollhouse"]["content"] == content


@pytest.mark.parametrize("content", [
    "",
    "## File: a.txt\n\n```\nx\n```\n\n",  # a trailing blank line
    "## File: a.txt\n\n```\nx\n```\nglued text",
    "## File: a.txt\n\n```\nx\n```\n\n## File: a.txt\n\n```\ny\n```\n",  # the same path twice
    "## File: ../escape.sh\n\n```\nrm -rf /\n```\n",
    f"## File: {CONTENT_FILE}\n\n```\nx\n```\n",
    "## File: a.txt\n\n```\nhas ``` inside a line\n```\n",  # a fence the converter would not choose
    "## File: a.txt\n\n```\nunclosed\n",
])
def test_any_dollhouse_content_comes_back_unchanged_through_the_files(content):
    exported = dollhouse_to_agent({"element_name": "odd", "description": "Odd content.", "content": content})

    assert not any(path.startswith("..") for path in exported["agent_skill"]["files"])
    assert reimport(exported)["dollhouse"]["content"] == content


# --- Metadata mapping -------------------------------------------------------------------------


def test_spec_fields_and_extra_frontmatter_go_under_metadata_agent_skill():
    imported = agent_to_dollhouse({"skill_md": ORIGINAL_SKILL_MD, "files": ORIGINAL_FILES})

    dollhouse = imported["dollhouse"]
    assert (dollhouse["author"], dollhouse["version"]) == ("example-org", "1.0")
    assert dollhouse["metadata"] == {"agent_skill": {
        "license": "Apache-2.0", "allowed_tools": "Bash(python:*)  Read",
        "metadata": {"team": "docs"}, "extra_frontmatter": {"created": "2024-05-01"}}}


def test_yaml_dates_become_iso_strings_so_results_stay_json():
    imported = agent_to_dollhouse({"skill_md": ORIGINAL_SKILL_MD})

    assert json.loads(json.dumps(imported)) == imported
    assert imported["dollhouse"]["metadata"]["agent_skill"]["extra_frontmatter"]["created"] == "2024-05-01"


def test_extra_frontmatter_survives_an_export_without_state():
    imported = agent_to_dollhouse({"skill_md": ORIGINAL_SKILL_MD})

    exported = dollhouse_to_agent(imported["dollhouse"])

    assert frontmatter_of(exported["skill_md"])["created"] == "2024-05-01"
    assert exported["agent_skill"]["extra_frontmatter"] == {"created": "2024-05-01"}


def test_dollhouse_only_fields_travel_in_the_skill_md_metadata_map():
    exported = dollhouse_to_agent(RICH_DOLLHOUSE)

    assert frontmatter_of(exported["skill_md"])["metadata"] == {
        "author": "alice", "version": "2.1.0", "dollhouse-element-name": "Code Review Helper",
        "dollhouse-category": "development", "dollhouse-tags": '["review", "quality"]',
        "dollhouse-triggers": '["review", "pr"]',
        "dollhouse-metadata": '{"proficiency_levels": {"basic": "spots typos"}}'}
    assert frontmatter_of(exported["skill_md"])["license"] == "MIT"


def test_the_dollhouse_fields_win_over_stale_copies_left_in_the_agent_skill_metadata():
    stale_copies = {"author": "mallory", "dollhouse-tags": '["old"]', "team": "docs"}
    dollhouse = {"element_name": "owned", "description": "Edited since import.", "tags": ["new"],
                 "metadata": {"agent_skill": {"metadata": stale_copies}}}

    exported = dollhouse_to_agent(dollhouse)

    assert exported["agent_skill"]["metadata"] == {"team": "docs", "dollhouse-tags": '["new"]'}


def test_a_long_description_stays_on_one_line_in_the_skill_md():
    description = "Summarises long meeting transcripts into decisions, owners and deadlines " * 3

    exported = dollhouse_to_agent({"element_name": "minutes", "description": description.strip()})

    assert f"\ndescription: {description.strip()}\n" in exported["skill_md"]


# --- Name and description rules ---------------------------------------------------------------


@pytest.mark.parametrize(("element_name", "agent_name"), [
    ("Code Reviewer", "code-reviewer"),
    ("my_skill  v2", "my-skill-v2"),
    ("Café Crème!", "cafe-creme"),
    ("--Lead--Dev--", "lead-dev"),
    ("a" * 63 + "-b" + "c" * 10, "a" * 63),
])
def test_exporting_normalises_the_name_to_the_agent_skills_rule_with_a_warning(element_name, agent_name):
    exported = dollhouse_to_agent({"element_name": element_name, "description": "Named oddly."})

    assert exported["agent_skill"]["name"] == agent_name
    assert frontmatter_of(exported["skill_md"])["name"] == agent_name
    assert [w["code"] for w in exported["warnings"]] == ["name_normalised"]
    assert reimport(exported)["dollhouse"]["element_name"] == element_name


def test_a_name_that_already_follows_the_rule_is_left_alone_without_a_warning():
    exported = dollhouse_to_agent({"element_name": "already-fine-2", "description": "Fine."})

    assert exported["agent_skill"]["name"] == "already-fine-2"
    assert "metadata" not in exported["agent_skill"]
    assert exported["warnings"] == []


def test_exporting_cuts_a_long_description_to_1024_characters_with_a_warning():
    description = "word " * 300

    exported = dollhouse_to_agent({"element_name": "verbose", "description": description})

    assert exported["agent_skill"]["description"] == description[:AGENT_DESCRIPTION_MAX]
    assert [w["code"] for w in exported["warnings"]] == ["description_truncated"]
    assert reimport(exported)["dollhouse"]["description"] == description


def test_importing_warns_about_a_name_outside_the_rule_and_keeps_it():
    imported = agent_to_dollhouse({"name": "My Skill", "description": "Loosely named."})

    assert imported["dollhouse"]["element_name"] == "My Skill"
    assert [w["code"] for w in imported["warnings"]] == ["agent_name_nonstandard"]


def test_importing_warns_when_the_description_is_too_long_for_a_dollhouse_skill():
    imported = agent_to_dollhouse({"name": "wordy", "description": "x" * 501})

    assert [w["code"] for w in imported["warnings"]] == ["description_too_long"]
    assert "500" in imported["warnings"][0]["message"]


# --- Round-trip state -------------------------------------------------------------------------


def test_a_stale_roundtrip_state_is_ignored_with_a_warning():
    imported = agent_to_dollhouse({"skill_md": ORIGINAL_SKILL_MD, "files": ORIGINAL_FILES})
    edited = {**imported["dollhouse"], "instructions": "New instructions.\n"}

    exported = dollhouse_to_agent(edited, roundtrip_state=imported["roundtrip_state"])

    assert [w["code"] for w in exported["warnings"]] == ["roundtrip_state_stale"]
    assert exported["skill_md"] != ORIGINAL_SKILL_MD
    assert exported["skill_md"].endswith("---\n\nNew instructions.\n")
    assert exported["agent_skill"]["files"]["references/REFERENCE.md"] == ORIGINAL_FILES["references/REFERENCE.md"]


def test_a_roundtrip_state_from_another_skill_counts_as_stale():
    other = agent_to_dollhouse({"name": "other", "description": "Another skill."})

    exported = dollhouse_to_agent(RICH_DOLLHOUSE, roundtrip_state=other["roundtrip_state"])

    assert exported["agent_skill"]["name"] == "code-review-helper"
    assert [w["code"] for w in exported["warnings"]] == ["roundtrip_state_stale", "name_normalised"]


# --- Dollhouse markdown -----------------------------------------------------------------------


def test_dollhouse_markdown_is_read_into_every_field():
    markdown = """---
name: Incident Triage
description: Sorts incoming incidents.
type: skill
format_version: v2
unique_id: skills_incident-triage_2024
instructions: |
  Ask for the severity first.
tags: [ops, incidents]
triggers: [triage]
category: operations
author: bob
version: 1.2.0
metadata:
  sla_hours: 4
---
## Runbook links
"""
    exported = dollhouse_to_agent(dollhouse_markdown=markdown)

    assert reimport(exported)["dollhouse"] == {
        "element_name": "Incident Triage", "description": "Sorts incoming incidents.",
        "instructions": "Ask for the severity first.\n", "content": "## Runbook links\n",
        "tags": ["ops", "incidents"], "triggers": ["triage"], "category": "operations", "author": "bob",
        "version": "1.2.0", "metadata": {"sla_hours": 4, "unique_id": "skills_incident-triage_2024"}}


def test_the_dollhouse_markdown_written_on_import_has_the_documented_layout():
    imported = agent_to_dollhouse({"name": "layout", "description": "Layout check.", "body": "Line one.\n",
                                   "files": {"a.txt": "A\n"}})

    markdown = imported["dollhouse_markdown"]
    frontmatter_text, content = markdown.removeprefix("---\n").split("---\n", 1)
    assert list(safe_yaml_load(frontmatter_text)) == ["name", "description", "type", "format_version",
                                                      "instructions", "tags", "triggers", "category", "author",
                                                      "version", "metadata"]
    assert safe_yaml_load(frontmatter_text)["type"] == "skill"
    assert safe_yaml_load(frontmatter_text)["format_version"] == "v2"
    assert "instructions: |\n  Line one.\n" in frontmatter_text
    assert content == imported["dollhouse"]["content"]


def test_markdown_for_another_element_type_is_refused():
    with pytest.raises(InvalidInput, match="'persona' element, not a skill"):
        dollhouse_to_agent(dollhouse_markdown="---\nname: Bob\ndescription: A persona.\ntype: persona\n---\n")


# --- convert ----------------------------------------------------------------------------------


def test_convert_dispatches_each_direction_and_ignores_unset_parameters():
    to_dollhouse = convert("agent_to_dollhouse", agent_skill={"skill_md": ORIGINAL_SKILL_MD}, roundtrip_state=None)
    to_agent = convert("dollhouse_to_agent", dollhouse=to_dollhouse["dollhouse"], dollhouse_markdown=None,
                       roundtrip_state=to_dollhouse["roundtrip_state"])

    assert to_dollhouse == agent_to_dollhouse({"skill_md": ORIGINAL_SKILL_MD})
    assert to_agent["skill_md"] == ORIGINAL_SKILL_MD


def test_an_unknown_direction_is_refused_naming_both_valid_ones():
    with pytest.raises(InvalidInput, match="agent_to_dollhouse, dollhouse_to_agent") as raised:
        convert("sideways", agent_skill={"skill_md": ORIGINAL_SKILL_MD})

    assert raised.value.code == "unknown_direction"


@pytest.mark.parametrize(("direction", "params", "message"), [
    ("agent_to_dollhouse", {}, "agent_skill is required"),
    ("agent_to_dollhouse", {"agent_skill": {"name": "a", "description": "b"}, "dollhouse": {}},
     "dollhouse cannot be used with direction 'agent_to_dollhouse'"),
    ("dollhouse_to_agent", {"dollhouse": RICH_DOLLHOUSE, "agent_skill": {}},
     "agent_skill cannot be used with direction 'dollhouse_to_agent'"),
])
def test_convert_refuses_parameters_that_do_not_fit_the_direction(direction, params, message):
    with pytest.raises(InvalidInput, match=message):
        convert(direction, **params)


# --- Every input error ------------------------------------------------------------------------

SKILL_MD_ERRORS = [
    ("---\ndescription: No name.\n---\nBody\n", "name is required"),
    ("---\nname: no-description\n---\nBody\n", "description is required"),
    ("---\nname: ''\ndescription: Empty name.\n---\n", "name is required"),
    ("# Just markdown, no frontmatter\n", "must start with YAML frontmatter"),
    ("---\nname: unclosed\ndescription: Never ends.\n", "must start with YAML frontmatter"),
    ("---\nname: [unclosed\ndescription: x\n---\n", "not valid YAML"),
    ("---\n- a\n- list\n---\n", "must be a mapping"),
    ("---\nname: a\ndescription: " + "x" * (64 * 1024) + "\n---\n", "larger than 64 KB"),
    ("---\nname: &n aliased\ndescription: *n\n---\n", "YAML anchors and aliases are not allowed"),
    ("---\nname: a\ndescription: b\nallowed-tools: 7\n---\n", "allowed_tools must be"),
    ("---\nname: a\ndescription: b\nmetadata: [x]\n---\n", "metadata must be an object"),
    ("---\nname: a\ndescription: b\nlicense: 3\n---\n", "license must be text"),
    ("---\nname: a\ndescription: b\nmetadata:\n  dollhouse-tags: not json\n---\n", "'dollhouse-tags' must be"),
    ("---\nname: a\ndescription: b\nmetadata:\n  dollhouse-metadata: '[1]'\n---\n", "'dollhouse-metadata' must be"),
]


@pytest.mark.parametrize(("skill_md", "message"), SKILL_MD_ERRORS)
def test_a_bad_skill_md_is_refused_with_a_clear_message(skill_md, message):
    with pytest.raises(InvalidInput, match=message):
        agent_to_dollhouse({"skill_md": skill_md})


@pytest.mark.parametrize(("agent_skill", "message"), [
    ("---\nname: a\n---\n", "agent_skill must be an object"),
    ({"description": "No name."}, "agent_skill: name is required"),
    ({"name": "no-description"}, "agent_skill: description is required"),
    ({"name": "   ", "description": "Blank name."}, "name is required"),
    ({"SKILL.md": ORIGINAL_SKILL_MD}, "unknown keys: SKILL.md"),
    ({"skill_md": ORIGINAL_SKILL_MD, "name": "other"}, "skill_md together with name"),
    ({"skill_md": 42}, "skill_md must be the SKILL.md text"),
    ({"name": "a", "description": "b", "body": ["x"]}, "body must be text"),
    ({"name": "a", "description": "b", "allowed_tools": ["Read", ""]}, "allowed_tools must be"),
    ({"name": "a", "description": "b", "extra_frontmatter": {"license": "MIT"}}, "repeats spec fields: license"),
    ({"name": "a", "description": "b", "files": ["scripts/run.sh"]}, "must map relative paths"),
    ({"name": "a", "description": "b", "files": {"../outside.sh": "x"}}, "not a usable relative path"),
    ({"name": "a", "description": "b", "files": {"/etc/passwd": "x"}}, "not a usable relative path"),
    ({"name": "a", "description": "b", "files": {"SKILL.md": "x"}}, "not a usable relative path"),
    ({"name": "a", "description": "b", "files": {"scripts//run.sh": "x"}}, "not a usable relative path"),
    ({"name": "a", "description": "b", "files": {"scripts\\run.sh": "x"}}, "not a usable relative path"),
    ({"name": "a", "description": "b", "files": {"assets/logo.png": b"\x89PNG"}}, "must be text"),
])
def test_a_bad_agent_skill_is_refused_with_a_clear_message(agent_skill, message):
    with pytest.raises(InvalidInput, match=message):
        agent_to_dollhouse(agent_skill)


@pytest.mark.parametrize(("dollhouse", "message"), [
    ({"description": "No name."}, "dollhouse: element_name is required"),
    ({"element_name": "no-description"}, "dollhouse: description is required"),
    ({"name": "x", "element_name": "x", "description": "y"}, "unknown fields: name"),
    ({"element_name": "x", "description": "y", "tags": "one,two"}, "tags must be a list of strings"),
    ({"element_name": "x", "description": "y", "metadata": {"agent_skill": "MIT"}}, "agent_skill must be an object"),
    ({"element_name": "x", "description": "y", "metadata": {"agent_skill": {"metadata": ["x"]}}},
     "agent_skill.metadata must be an object"),
    ({"element_name": "x", "description": "y", "metadata": {"agent_skill": {"license": 1}}}, "license must be text"),
    ({"element_name": "日本語", "description": "y"}, "no letters or digits"),
    ("not an object", "dollhouse must be an object"),
])
def test_a_bad_dollhouse_skill_is_refused_with_a_clear_message(dollhouse, message):
    with pytest.raises(InvalidInput, match=message):
        dollhouse_to_agent(dollhouse)


@pytest.mark.parametrize(("markdown", "message"), [
    ("---\ndescription: No name.\n---\n", "name is required"),
    ("---\nname: x\n---\n", "description is required"),
    ("---\nname: x\ndescription: y\nmetadata: [1]\n---\n", "metadata must be an object"),
    ("---\nname: x\ndescription: : :\n---\n", "not valid YAML"),
    ("name: x\ndescription: y\n", "must start with YAML frontmatter"),
    (123, "dollhouse_markdown must be the serialised skill text"),
])
def test_bad_dollhouse_markdown_is_refused_with_a_clear_message(markdown, message):
    with pytest.raises(InvalidInput, match=message):
        dollhouse_to_agent(dollhouse_markdown=markdown)


def test_giving_both_dollhouse_and_dollhouse_markdown_is_refused():
    markdown = agent_to_dollhouse({"name": "a", "description": "b"})["dollhouse_markdown"]

    with pytest.raises(InvalidInput, match="exactly one of dollhouse or dollhouse_markdown"):
        dollhouse_to_agent(RICH_DOLLHOUSE, dollhouse_markdown=markdown)


def test_giving_neither_dollhouse_nor_dollhouse_markdown_is_refused():
    with pytest.raises(InvalidInput, match="exactly one of dollhouse or dollhouse_markdown"):
        dollhouse_to_agent(roundtrip_state=agent_to_dollhouse({"name": "a", "description": "b"})["roundtrip_state"])


@pytest.mark.parametrize("state", [
    "opaque",
    {"skill_md": "---\nname: a\ndescription: b\n---\n", "files": {}, "fields_sha256": "0"},
    {"format": "atrium.skill-roundtrip.v1", "files": {}, "fields_sha256": "0"},
])
def test_a_roundtrip_state_not_made_by_the_converter_is_refused(state):
    with pytest.raises(InvalidInput, match="roundtrip_state is not one made by agent_to_dollhouse"):
        dollhouse_to_agent(RICH_DOLLHOUSE, roundtrip_state=state)
