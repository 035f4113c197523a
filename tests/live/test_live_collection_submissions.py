"""Submitting to the collection through the official SDK client against a live server: Alice submits
a persona, a curator approves it, and then Bob finds it with search_collection and installs it."""

import asyncio

import pytest
from django.db import connections

from accounts.models import User
from core.caller import Caller
from elements import submissions
from elements.models import CollectionSubmission, Element
from tests.conftest import make_member
from tests.live.conftest import sdk_session
from tests.live.test_live_elements import CREATE, READ, Session

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SUBMISSION_OPERATIONS = ("submit_collection_content",)


def approve(submission_id: int) -> None:
    """A curator's approval, as the admin page makes it."""
    try:
        curator = User.objects.get(username="curator")
        submissions.submission_approve(caller=Caller.trusted(curator, via="admin"), submission_id=submission_id)
    finally:
        connections.close_all()  # this thread's own connection


async def walk(mcp_url: str, author: str, installer: str) -> dict:
    async with sdk_session(mcp_url, author) as client:
        alice = Session(client)
        await alice.ok(CREATE, "create_element", "persona", element_name="Flaky Test Hunter",
                       description="Finds why a test fails one run in ten.",
                       instructions="You hunt flaky tests. Ask for the last ten CI runs first.", tags=["testing"])
        submitted = await alice.ok(CREATE, "submit_collection_content", content="personas/Flaky Test Hunter")
        await asyncio.to_thread(approve, submitted["submission"]["submission_id"])
        status = await alice.ok(CREATE, "submit_collection_content", status=True)
    async with sdk_session(mcp_url, installer) as client:
        bob = Session(client)
        found = await bob.ok(READ, "search_collection", query="flaky test")
        installed = await bob.ok(CREATE, "install_collection_content", path=found["results"][0]["path"])
    return {"submitted": submitted, "status": status, "found": found, "installed": installed,
            "seen": alice.seen + bob.seen}


def test_a_submission_approved_by_a_curator_is_found_and_installed(live_atrium):
    alice, bob = make_member("alice"), make_member("bob")
    User.objects.create_superuser("curator", "curator@example.com", "pw")

    answers = asyncio.run(walk(live_atrium.mcp_url, alice.token, bob.token))

    assert answers["submitted"]["submission"]["status"] == "pending"
    assert answers["status"]["submissions"][0]["status"] == "approved"
    result = answers["found"]["results"][0]
    assert (result["name"], result["origin"], result["path"]) == (
        "Flaky Test Hunter", "submission", "library/personas/flaky-test-hunter.md")
    assert answers["installed"]["element_name"] == "Flaky Test Hunter" and answers["installed"]["created"]
    assert set(SUBMISSION_OPERATIONS) <= set(answers["seen"])
    assert Element.objects.get(owner=bob.user).instructions.startswith("You hunt flaky tests.")
    assert CollectionSubmission.objects.get().status == CollectionSubmission.Status.APPROVED
