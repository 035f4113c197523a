"""One set of node types: what validates (the definition), what runs (the engine's runners and the
pausing handlers) and what test_workflow can mock agree, so no type passes one and stops another."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from runs import engine, testing
from runs.handlers import HANDLERS, node_types_check
from workflows.definition import NODE_TYPES


def test_the_engine_runs_exactly_the_types_the_definition_validates():
    assert set(engine.RUNNERS) == set(NODE_TYPES)
    assert set(HANDLERS) <= set(engine.RUNNERS)


def test_a_runner_table_missing_a_type_is_refused_at_load():
    with pytest.raises(ImproperlyConfigured, match="Node types differ"):
        node_types_check({name: None for name in NODE_TYPES if name != "map"})


def test_every_pausing_type_can_be_answered_from_a_mock():
    assert {handler.tool for handler in HANDLERS.values()} <= set(testing.ANSWER_BUILDERS)
