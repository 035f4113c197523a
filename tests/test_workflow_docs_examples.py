"""The complete workflows shown in the docs are valid: the docs are also what the server serves."""

import re
from pathlib import Path

import pytest

from workflows import analysis
from workflows.definition import config_check, config_normalize
from workflows.yamltext import yaml_load

DOCS = Path(__file__).parents[1] / "docs"
BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def complete_examples() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for number, block in enumerate(BLOCK.findall(page.read_text())):
            if re.search(r"^start:", block, re.MULTILINE):
                found.append((f"{page.name}#{number}", block))
    return found


def test_the_docs_show_complete_workflows():
    assert len(complete_examples()) >= 2


@pytest.mark.parametrize(("where", "text"), complete_examples())
def test_each_complete_workflow_in_the_docs_is_valid(where, text):
    config = config_normalize(yaml_load(text))
    assert config_check(config) == []
    assert analysis.integrity_check(config, workflow_id=None, lookup=lambda _: None) == []
    assert analysis.lint(config, models={"claude-sonnet-4-5"}) == []
