"""YAML from users is refused at a bound before anything walks it: an alias bomb of a few hundred
bytes, or brackets nested thousands deep, get a clear invalid-YAML error from every tool and
endpoint that reads workflow YAML, and from element imports."""

import pytest

from core.errors import InvalidInput
from elements import portfolio
from elements.validation import safe_yaml_load
from tests.conftest import Api
from tests.test_workflow_tools import Roscoe
from workflows.models import Workflow

pytestmark = pytest.mark.django_db

G = {"global": True}


def alias_bomb(levels: int) -> str:
    """Each level a list of nine aliases to the one before: nine to the power `levels` values."""
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


# Seven levels expand to millions of values; nine (under 600 bytes) to billions, which no walk finishes.
BOMB = "name: Bomb\nstart: done\nnodes:\n  done: {type: end}\n" + alias_bomb(6)
DEEP = "name: Deep\nnodes: " + "[" * 20_000 + "]" * 20_000 + "\n"
EXPANDS = "The YAML is refused: YAML expands to more than 200,000 values"
NESTED = "The YAML is refused: YAML nested too deeply at line 2: at most 64 levels."


def test_a_billion_laughs_bomb_is_under_600_bytes():
    assert len("name: x\n" + alias_bomb(8)) < 600


@pytest.mark.parametrize(("text", "message"), [(BOMB, EXPANDS), (DEEP, NESTED)])
def test_validate_and_lint_report_it_in_band_naming_the_bound(alice, text, message):
    roscoe = Roscoe(alice)

    validated = roscoe.ok("validate_workflow", config=text, **G)
    linted = roscoe.ok("lint_workflow", config=text, **G)

    assert validated["valid"] is False
    assert validated["errors"][0].startswith(message)
    assert linted["errors"][0].startswith(message)


@pytest.mark.parametrize(("text", "message"), [(BOMB, EXPANDS), (DEEP, NESTED)])
def test_audit_refuses_it_as_an_invalid_config(alice, text, message):
    audited = Roscoe(alice).err("audit_workflow", config=text, **G)

    assert audited["code"] == "invalid_config"
    assert audited["details"][0].startswith(message)


@pytest.mark.parametrize(("text", "message"), [(BOMB, EXPANDS), (DEEP, NESTED)])
def test_create_and_update_refuse_it_and_store_nothing(alice, text, message):
    roscoe = Roscoe(alice)
    roscoe.ok("create_workflow", id="kept", config="name: Kept\nstart: done\nnodes:\n  done: {type: end}\n", **G)

    created = roscoe.err("create_workflow", id="bomb", config=text, **G)
    updated = roscoe.err("update_workflow", id="kept", config=text, **G)

    assert created["code"] == updated["code"] == "invalid_config"
    assert message in created["error"] and message in updated["error"]
    assert list(Workflow.objects.values_list("workflow_id", "name")) == [("kept", "Kept")]


@pytest.mark.parametrize(("text", "message"), [(BOMB, EXPANDS), (DEEP, NESTED)])
def test_test_workflow_refuses_it(alice, text, message):
    result = Roscoe(alice).err("test_workflow", config=text, **G)

    assert (result["ok"], result["code"]) == (False, "invalid_config")
    assert result["details"][0].startswith(message)


@pytest.mark.parametrize(("text", "message"), [(BOMB, EXPANDS), (DEEP, NESTED)])
def test_the_rest_validate_endpoint_refuses_it(alice, text, message):
    response = Api(alice).post("/api/workflows/validate/", {"config": text, **G})

    assert response.status_code == 200
    assert response.json()["valid"] is False
    assert response.json()["errors"][0].startswith(message)


def test_element_yaml_with_aliases_allowed_is_still_bounded():
    with pytest.raises(InvalidInput) as refused:
        safe_yaml_load("name: x\n" + alias_bomb(8), allow_aliases=True)

    assert refused.value.code == "unsafe_yaml"


TRICKY_TEXT = ["trail \nnext", "a\r\nb", "a\rb", " lead\nx", "x\n\n\n", "\n", "é\u2028b", "\u0085", "010", "1e5",
               "yes", "null", "", "- x\ny", "#c\nd", "a: b\nc", "x" * 200 + "\ny " * 3, "end\n "]


@pytest.mark.parametrize("text", TRICKY_TEXT)
def test_element_exports_read_back_to_the_same_text(text):
    data = {"k": text, "l": [text], "m": {"n": text}}

    assert safe_yaml_load(portfolio.yaml_dump(data)) == data

