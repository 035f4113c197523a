"""list_workflow_references with an id longer than any workflow's."""

import pytest

from tests.test_run_page import REVIEW, save

pytestmark = pytest.mark.django_db


def test_an_id_longer_than_any_workflows_has_no_referrers(alice, mcp_client):
    save(alice, "review", REVIEW)  # a workflow to scan, so the database has rows to match against
    client = mcp_client(alice)
    client.initialize()

    answer = client.call_expecting_success("list_workflow_references", {"workflow_id": "x" * 100_000, "global": True})

    assert answer == {"referrers": []}
