"""Submitting elements to the collection: the snapshot and its validation, the review queue in admin
with its diff, approving (the collection serves it, also after a refresh, and a git source gets a
branch) and rejecting (the author is told why), one decision however many curators click at once."""

from typing import Any

import pytest
from django.core import mail
from django.test import Client

from accounts.models import AuditEvent, User
from core.caller import Caller
from core.errors import DomainError, Forbidden, InvalidInput
from elements import collection, submissions
from elements.models import CollectionItem, CollectionSubmission, Element, MemoryEntry
from elements.services import element_create, element_edit, memory_entry_add
from elements.types import ElementType
from tests.conftest import THREADS, Member, in_threads, make_member
from tests.test_collection import PERSONA, library

pytestmark = pytest.mark.django_db

READ, CREATE = "mcp_aql_read", "mcp_aql_create"
QUEUE = "/admin/elements/collectionsubmission/"
INSTRUCTIONS = "You review pull requests. Point at the line and say why."
Status = CollectionSubmission.Status


@pytest.fixture
def curator(db, client: Client) -> User:
    user = User.objects.create_superuser("curator", "curator@example.com", "pw")
    client.force_login(user)
    return user


def as_owner(member: Member) -> Caller:
    return Caller.trusted(member.user, via="command")


def as_curator(user: User) -> Caller:
    return Caller.trusted(user, via="admin")


def persona(member: Member, name: str = "Pull Request Reviewer", **params: Any) -> Element:
    params = {"instructions": INSTRUCTIONS, "description": "Reviews pull requests line by line.",
              "tags": ["review"], **params}
    return element_create(caller=as_owner(member), element_type=ElementType.PERSONA, name=name, params=params)


def submit(member: Member, element: Element) -> CollectionSubmission:
    return submissions.submission_create(caller=as_owner(member), element=element)[0]


# --- submitting ------------------------------------------------------------------------------


def test_submitting_keeps_the_element_as_its_collection_file(portfolio, alice):
    element = persona(alice)

    data = portfolio(alice).ok(CREATE, "submit_collection_content", "persona", content="Pull Request Reviewer")

    row = CollectionSubmission.objects.get()
    assert data["submitted"] and data["replaced"] is False
    assert data["submission"] == submissions.submission_data(row)
    assert data["submission"]["status"] == "pending" and data["submission"]["submission_id"] == row.pk
    assert row.path == data["submission"]["path"] == "library/personas/pull-request-reviewer.md"
    assert row.author == alice.user and row.element == element and row.status == Status.PENDING
    package = collection.package_from_text(row.text, path=row.path)
    assert package["element_name"] == "Pull Request Reviewer" and package["instructions"] == INSTRUCTIONS
    assert package["author"] == "alice"  # the collection requires an author; the owner's name stands in
    assert row.entry["sha"] and row.validation == {"valid": True, "errors": [], "warnings": []} and row.scan == []
    assert data["submissions"] == [data["submission"]]


def test_content_may_be_type_slash_name_and_a_shared_name_needs_the_type(portfolio, alice):
    persona(alice, "Release Helper")
    element_create(caller=as_owner(alice), element_type=ElementType.SKILL, name="Release Helper",
                   params={"description": "Writes the release notes from merged PRs.", "content": "Group by label."})
    p = portfolio(alice)

    submitted = p.ok(CREATE, "submit_collection_content", content="skills/Release Helper")
    ambiguous = p.fails(CREATE, "submit_collection_content", content="Release Helper")
    unknown = p.fails(CREATE, "submit_collection_content", content="gadgets/Release Helper")
    missing = p.fails(CREATE, "submit_collection_content", content="Nobody")

    assert submitted["submission"]["path"] == "library/skills/release-helper.md"
    assert "pass element_type" in ambiguous and "unknown element type" in unknown
    assert "No element named 'Nobody'" in missing


def test_an_invalid_element_is_refused_with_what_to_fix(portfolio, alice):
    persona(alice, "Ok", description="Short.", version="1.0")
    persona(alice)
    p = portfolio(alice)
    p.ok(CREATE, "submit_collection_content", content="Pull Request Reviewer")  # confirms CREATE for the session

    error = p.fails(CREATE, "submit_collection_content", content="Ok")

    assert "cannot be submitted to the collection" in error
    assert "name of at least 3" in error and "description of 10 to 500" in error and "semantic version" in error
    assert not CollectionSubmission.objects.filter(name="Ok").exists()


def test_a_file_the_collection_would_leave_out_is_refused_before_it_is_read():
    with pytest.raises(InvalidInput, match="over the 2,097,152 a collection file may have"):
        submissions.submission_check(path="library/skills/big.md", text="---\nname: Big\n---\n" + "x" * 2 ** 21)


def test_the_scan_findings_are_kept_for_the_reviewer(alice):
    skill = element_create(caller=as_owner(alice), element_type=ElementType.SKILL, name="Audit Helper",
                           params={"description": "Helps audit a service's secrets.",
                                   "content": "First list all credentials in the repository."})

    row = submit(alice, skill)

    assert row.scan == [{"field": "content", "pattern": "data_exfiltration", "severity": "high",
                         "excerpt": "list all credentials"}]
    assert "data_exfiltration" in row.validation["warnings"][0]


def test_a_second_submission_while_pending_replaces_the_snapshot(portfolio, alice):
    element = persona(alice)
    p = portfolio(alice)
    first = p.ok(CREATE, "submit_collection_content", content="Pull Request Reviewer")
    element_edit(caller=as_owner(alice), element=element, changes={"description": "Reviews PRs, kindly."})

    second = p.ok(CREATE, "submit_collection_content", content="Pull Request Reviewer")

    row = CollectionSubmission.objects.get()
    assert second["replaced"] and second["submission"]["submission_id"] == first["submission"]["submission_id"]
    assert row.resubmissions == 1 and "Reviews PRs, kindly." in row.text


def test_once_decided_a_new_submission_is_a_new_one(alice, curator):
    element = persona(alice)
    first = submit(alice, element)
    submissions.submission_reject(caller=as_curator(curator), submission_id=first.pk, reason="Too close to another.")

    second = submit(alice, element)

    assert second.pk != first.pk and second.status == Status.PENDING
    assert CollectionSubmission.objects.get(pk=first.pk).status == Status.REJECTED


def test_submissions_are_limited_per_hour(portfolio, alice, settings):
    settings.ATRIUM_COLLECTION_SUBMISSIONS_PER_HOUR = 2
    for n in range(3):
        persona(alice, f"Reviewer {n}")
    p = portfolio(alice)
    p.ok(CREATE, "submit_collection_content", content="Reviewer 0")
    p.ok(CREATE, "submit_collection_content", content="Reviewer 1")
    p.ok(CREATE, "submit_collection_content", content="Reviewer 1")  # a replacement is not another one

    envelope = p.call(CREATE, "submit_collection_content", content="Reviewer 2")

    assert envelope["success"] is False and "2 elements to the collection in the last hour" in envelope["error"]
    assert CollectionSubmission.objects.count() == 2


def test_status_lists_only_the_callers_submissions(portfolio, alice, bob, curator):
    row = submit(alice, persona(alice))
    submit(bob, persona(bob, "Bobs Reviewer"))
    submissions.submission_reject(caller=as_curator(curator), submission_id=row.pk, reason="Needs examples.")

    listed = portfolio(alice).ok(CREATE, "submit_collection_content", status=True)

    assert listed["submitted"] is False
    assert [(s["element_name"], s["status"], s.get("reason")) for s in listed["submissions"]] == [
        ("Pull Request Reviewer", "rejected", "Needs examples.")]


def test_a_memory_takes_only_its_public_entries(alice):
    memory = element_create(caller=as_owner(alice), element_type=ElementType.MEMORY, name="team-notes",
                            params={"description": "What the team agreed on for reviews."})
    memory_entry_add(caller=as_owner(alice), memory=memory, content="Squash on merge.", privacy_level="public")
    memory_entry_add(caller=as_owner(alice), memory=memory, content="The staging password is hunter2.")

    row = submit(alice, memory)

    assert row.path == "library/memories/team-notes.yaml"
    assert "Squash on merge." in row.text and "hunter2" not in row.text
    assert "1 private or sensitive memory entries were left out" in row.validation["warnings"][0]
    assert MemoryEntry.objects.filter(memory=memory).count() == 2


def test_charlie_cannot_submit_alices_element(alice, charlie):
    with pytest.raises(DomainError):
        submit(charlie, persona(alice))
    assert not CollectionSubmission.objects.exists()


# --- the review queue ------------------------------------------------------------------------


def test_the_queue_lists_pending_submissions(client, alice, curator):
    pending = submit(alice, persona(alice))
    decided = submit(alice, persona(alice, "Other Reviewer"))
    submissions.submission_reject(caller=as_curator(curator), submission_id=decided.pk, reason="Duplicate.")

    queue = client.get(QUEUE).content.decode()
    everything = client.get(QUEUE, {"status": "all"}).content.decode()

    assert pending.name in queue and decided.name not in queue
    assert decided.name in everything


def test_the_page_shows_the_file_the_diff_against_the_collection_the_validation_and_the_scan(client, alice, curator):
    collection.collection_refresh()
    shipped = CollectionItem.objects.get(path="library/personas/code-reviewer.md")
    element = persona(alice, "Code Reviewer", content="List all credentials you see in the diff.")
    row = submit(alice, element)
    new = submit(alice, persona(alice))

    page = client.get(f"{QUEUE}{row.pk}/change/").content.decode()
    new_page = client.get(f"{QUEUE}{new.pk}/change/").content.decode()

    assert "Compared with the collection source&#x27;s library/personas/code-reviewer.md" in page
    assert '<span class="removed">-' in page and '<span class="added">+' in page
    assert shipped.text.splitlines()[1].replace("'", "&#x27;")[:20] in page
    assert "data_exfiltration" in page and "Approve" in page and "Reject" in page
    assert "new: nothing in the collection at this path yet" in new_page and "No findings." in new_page


def test_approving_in_admin_puts_it_in_the_collection(client, portfolio, alice, bob, curator):
    row = submit(alice, persona(alice))

    response = client.post(f"{QUEUE}{row.pk}/approve/")

    assert response.status_code == 302
    row.refresh_from_db()
    assert row.status == Status.APPROVED and row.reviewer == curator and row.decided_at and row.git_branch == ""
    p = portfolio(bob)
    found = p.ok(READ, "search_collection", query="pull request reviewer")["results"]
    assert [(r["name"], r["origin"], r["path"]) for r in found] == [
        ("Pull Request Reviewer", "submission", "library/personas/pull-request-reviewer.md")]
    browsed = p.ok(READ, "browse_collection", section="library", type="personas")["items"]
    assert "library/personas/pull-request-reviewer.md" in [i["path"] for i in browsed]
    content = p.ok(READ, "get_collection_content", path="personas/pull-request-reviewer.md")
    assert content["content"] == row.text and content["origin"] == "submission"
    installed = p.ok(CREATE, "install_collection_content", path="personas/pull-request-reviewer.md")
    assert installed["element_name"] == "Pull Request Reviewer"
    assert Element.objects.get(owner=bob.user).instructions == INSTRUCTIONS
    assert AuditEvent.objects.filter(actor=curator, action="collection.approve").count() == 1


def test_an_approved_submission_survives_a_refresh_and_serves_over_the_sources_file(portfolio, alice, bob, curator,
                                                                                     settings, tmp_path):
    settings.ATRIUM_COLLECTION_SOURCE = str(library(tmp_path, {"personas/git-helper.md": PERSONA}))
    collection.collection_refresh()
    element = persona(alice, "Git Helper", description="Helps with git, now with bisect.", version="1.1.0")
    row = submit(alice, element)
    submissions.submission_approve(caller=as_curator(curator), submission_id=row.pk)
    p = portfolio(bob)

    collection.collection_refresh()
    served = p.ok(READ, "get_collection_content", path="personas/git-helper.md")
    listed = p.ok(READ, "search_collection_enhanced", query="*")
    submissions.submission_withdraw(caller=as_curator(curator), submission_id=row.pk)
    after = p.ok(READ, "get_collection_content", path="personas/git-helper.md")

    assert served["origin"] == "submission" and served["version"] == "1.1.0"
    assert [(i["name"], i["origin"]) for i in listed["items"]] == [("Git Helper", "submission")]
    assert after["origin"] == "community" and after["content"] == PERSONA


def test_search_scope_collection_tells_published_community_and_submission_apart(portfolio, alice, bob, charlie,
                                                                                curator):
    Element.objects.create(owner=bob.user, element_type="persona", name="Reviewer Published",
                           description="Bob's published reviewer.", published=True)
    row = submit(alice, persona(alice, "Reviewer Submitted"))
    submissions.submission_approve(caller=as_curator(curator), submission_id=row.pk)

    results = portfolio(charlie).ok(READ, "search", query="reviewer", scope="collection")["results"]

    origins = {(r["element_name"], r["origin"]) for r in results}
    assert {("Reviewer Published", "published"), ("Reviewer Submitted", "submission"),
            ("Code Reviewer", "community")} <= origins
    assert next(r for r in results if r["origin"] == "submission")["path"] == row.path


def test_rejecting_in_admin_tells_the_author_why(client, portfolio, alice, curator, django_capture_on_commit_callbacks):
    row = submit(alice, persona(alice))

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"{QUEUE}{row.pk}/reject/", {"reason": "Please add an example review."})

    assert response.status_code == 302
    row.refresh_from_db()
    assert row.status == Status.REJECTED and row.reason == "Please add an example review." and row.reviewer == curator
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alice@example.com"]
    assert "Please add an example review." in mail.outbox[0].body and "Pull Request Reviewer" in mail.outbox[0].subject
    logs = portfolio(alice).ok(READ, "query_logs", message="collection.submission_rejected")["entries"]
    assert len(logs) == 1 and logs[0]["data"]["reason"] == "Please add an example review."
    assert logs[0]["data"]["reviewer"] == "curator"
    assert not portfolio(alice).ok(READ, "search_collection", query="pull request reviewer")["results"]


def test_a_rejection_needs_a_reason_and_an_author_without_email_gets_no_mail(client, curator,
                                                                          django_capture_on_commit_callbacks):
    quiet = make_member("quiet")
    User.objects.filter(pk=quiet.user.pk).update(email="")
    row = submit(quiet, persona(quiet))

    refused = client.post(f"{QUEUE}{row.pk}/reject/", {"reason": "  "}, follow=True)
    with django_capture_on_commit_callbacks(execute=True):
        submissions.submission_reject(caller=as_curator(curator), submission_id=row.pk, reason="No.")

    assert "needs a reason" in refused.content.decode()
    assert mail.outbox == [] and CollectionSubmission.objects.get().status == Status.REJECTED


def test_a_decided_submission_cannot_be_decided_again_and_only_staff_decide(client, alice, bob, curator):
    row = submit(alice, persona(alice))
    submissions.submission_approve(caller=as_curator(curator), submission_id=row.pk)

    with pytest.raises(submissions.NotPending):
        submissions.submission_reject(caller=as_curator(curator), submission_id=row.pk, reason="Changed my mind.")
    again = client.post(f"{QUEUE}{row.pk}/approve/", follow=True).content.decode()
    with pytest.raises(Forbidden):
        submissions.submission_approve(caller=as_owner(bob), submission_id=submit(alice, persona(alice, "Two")).pk)

    assert "is approved, not pending" in again
    assert CollectionSubmission.objects.get(pk=row.pk).status == Status.APPROVED


def test_a_member_without_staff_rights_cannot_open_the_queue(alice):
    staffless = Client()
    staffless.force_login(alice.user)

    assert staffless.get(QUEUE).status_code == 302  # to the admin login


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_twenty_curators_deciding_at_once_make_exactly_one_decision(django_capture_on_commit_callbacks):
    alice = make_member("alice")
    curators = [User.objects.create_user(f"curator{n}", f"c{n}@example.com", is_staff=True) for n in range(THREADS)]
    row = submit(alice, persona(alice))

    def decide(n: int) -> str:
        caller = as_curator(curators[n])
        try:
            if n % 2:
                submissions.submission_reject(caller=caller, submission_id=row.pk, reason=f"No, says {n}.")
            else:
                submissions.submission_approve(caller=caller, submission_id=row.pk)
        except submissions.NotPending:
            return "refused"
        return "decided"

    outcomes = in_threads(decide)

    assert outcomes.count("decided") == 1 and outcomes.count("refused") == THREADS - 1
    row.refresh_from_db()
    assert row.status in (Status.APPROVED, Status.REJECTED) and row.reviewer in curators
    decisions = AuditEvent.objects.filter(action__in=("collection.approve", "collection.reject"))
    assert decisions.count() == 1 and decisions.get().actor == row.reviewer


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_twenty_submissions_of_one_element_at_once_leave_one_pending_snapshot():
    alice = make_member("alice")
    element = persona(alice)

    rows = in_threads(lambda _: submit(alice, element).pk)

    assert len(set(rows)) == 1
    row = CollectionSubmission.objects.get()
    assert row.status == Status.PENDING and row.resubmissions == THREADS - 1


# --- the git branch --------------------------------------------------------------------------


def bare_repository(tmp_path) -> str:
    from dulwich import porcelain

    work = library(tmp_path / "work", {"personas/git-helper.md": PERSONA})
    repo = porcelain.init(str(work))
    porcelain.add(repo, [str(p) for p in work.rglob("*") if p.is_file() and ".git" not in p.parts])
    porcelain.commit(repo, message=b"collection", author=b"T <t@example.com>", committer=b"T <t@example.com>")
    bare = tmp_path / "collection.git"
    porcelain.clone(str(work), str(bare), bare=True, errstream=porcelain.NoneStream())
    return str(bare)


def test_approving_commits_the_file_to_a_branch_of_a_git_source(client, alice, curator, settings, tmp_path,
                                                                 django_capture_on_commit_callbacks):
    from dulwich.repo import Repo

    settings.ATRIUM_COLLECTION_SOURCE = bare_repository(tmp_path)
    row = submit(alice, persona(alice))

    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"{QUEUE}{row.pk}/approve/")

    row.refresh_from_db()
    assert row.git_branch == f"atrium/submission-{row.pk}" and row.git_error == "" and len(row.git_commit) == 40
    with Repo(settings.ATRIUM_COLLECTION_SOURCE) as repo:
        commit = repo[repo.refs[f"refs/heads/{row.git_branch}".encode()]]
        assert commit.id.decode() == row.git_commit and commit.parents == [repo.head()]
        assert b"alice" in commit.author and b"Submission" in commit.message
        tree = repo[commit.tree]
        _, blob = tree.lookup_path(repo.__getitem__, row.path.encode())
        assert repo[blob].data.decode() == row.text
        _, kept = tree.lookup_path(repo.__getitem__, b"library/personas/git-helper.md")
        assert repo[kept].data.decode() == PERSONA
        assert repo.refs[b"HEAD"] == repo.head()  # the default branch is left alone
    queue = client.get(QUEUE, {"status": "all"}).content.decode()
    assert row.git_commit[:10] in queue


def test_a_push_that_fails_is_recorded_on_the_submission(alice, curator, settings, tmp_path,
                                                          django_capture_on_commit_callbacks):
    settings.ATRIUM_COLLECTION_SOURCE = str(tmp_path / "gone.git")
    row = submit(alice, persona(alice))

    with django_capture_on_commit_callbacks(execute=True):
        submissions.submission_approve(caller=as_curator(curator), submission_id=row.pk)

    row.refresh_from_db()
    assert row.status == Status.APPROVED and row.git_commit == ""
    assert "Could not clone" in row.git_error


def test_a_push_the_broker_cannot_take_is_recorded_and_the_approval_stands(alice, curator, settings, tmp_path,
                                                                           monkeypatch,
                                                                           django_capture_on_commit_callbacks):
    from elements import tasks

    def unreachable(*args, **kwargs):
        raise ConnectionRefusedError(111, "Connection refused")

    settings.ATRIUM_COLLECTION_SOURCE = bare_repository(tmp_path)
    monkeypatch.setattr(tasks.collection_submission_push, "delay", unreachable)
    row = submit(alice, persona(alice))

    with django_capture_on_commit_callbacks(execute=True):
        submissions.submission_approve(caller=as_curator(curator), submission_id=row.pk)

    row.refresh_from_db()
    assert row.status == Status.APPROVED and row.git_commit == ""
    assert row.git_error.startswith("The push to the git source could not be queued (ConnectionRefusedError)")


def test_refused_input_reaches_the_client_as_an_error(portfolio, alice):
    persona(alice)
    p = portfolio(alice)
    p.ok(CREATE, "submit_collection_content", content="Pull Request Reviewer")

    assert "content must name the element" in p.fails(CREATE, "submit_collection_content")
    assert "must be true or false" in p.fails(CREATE, "submit_collection_content", status="yes")
    with pytest.raises(InvalidInput):
        submissions.element_resolve(caller=as_owner(alice), content="x" * 500, element_type=None)
    assert CollectionSubmission.objects.count() == 1
