"""The tokens page: a signed-in user makes a token (its raw value shown on that answer only, with the
scopes and expiry chosen), lists their own, and revokes one; nobody reaches another user's tokens."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import PersonalToken
from accounts.scopes import ALL_SCOPES, scopes_by_product
from accounts.services import token_digest
from tests.conftest import Api, hidden_inputs

pytestmark = pytest.mark.django_db

PAGE = "/tokens/"


def signed_in(member) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(member.user)
    return client


def post(client: Client, path: str, data: dict) -> object:
    token = hidden_inputs(client.get(PAGE).content.decode())["csrfmiddlewaretoken"]
    return client.post(path, {"csrfmiddlewaretoken": token, **data})


def made_token(html: str) -> str:
    found = re.search(r'<pre class="text" id="new-token">(atr_[A-Za-z0-9_-]+)</pre>', html)
    assert found, html
    return found.group(1)


def test_every_scope_is_offered_once_under_its_product():
    offered = [name for _, scopes in scopes_by_product() for name, _ in scopes]

    assert sorted(offered) == sorted(ALL_SCOPES)


def test_a_token_made_on_the_page_is_shown_once_and_carries_what_was_chosen(alice):
    client = signed_in(alice)

    response = post(client, PAGE, {"label": "Cursor", "scopes": ["elements:read", "docs:read"], "expires": "30"})

    assert response.status_code == 200
    raw = made_token(response.content.decode())
    row = PersonalToken.objects.get(digest=token_digest(raw))
    assert (row.user, row.label) == (alice.user, "Cursor")
    assert sorted(row.scopes.values_list("name", flat=True)) == ["docs:read", "elements:read"]
    assert timedelta(days=29) < row.expires_at - timezone.now() <= timedelta(days=30)
    assert raw not in client.get(PAGE).content.decode()  # shown once
    assert Api(token=raw).get("/api/me").status_code == 200


def test_the_list_shows_only_the_users_own_active_tokens(alice, bob):
    html = signed_in(alice).get(PAGE).content.decode()

    assert alice.token[:12] in html and bob.token[:12] not in html


def test_revoking_a_token_refuses_it_from_then_on(alice):
    client = signed_in(alice)
    raw = made_token(post(client, PAGE, {"label": "Old laptop", "scopes": ["docs:read"], "expires": ""}).content
                     .decode())
    row = PersonalToken.objects.get(digest=token_digest(raw))

    response = post(client, f"/tokens/{row.pk}/revoke", {})

    assert response.status_code == 302 and response["Location"] == PAGE
    row.refresh_from_db()
    assert row.revoked_at is not None and row.expires_at is None
    after = client.get(PAGE).content.decode()
    assert "Revoked Old laptop" in after
    assert "Old laptop" not in after.split('id="active-heading"')[1].split("Make a token")[0]
    assert Api(token=raw).get("/api/me").status_code == 401


def test_another_users_token_cannot_be_revoked_from_the_page(alice, bob):
    theirs = PersonalToken.objects.get(user=bob.user)

    response = post(signed_in(alice), f"/tokens/{theirs.pk}/revoke", {})

    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


@pytest.mark.parametrize(("data", "words"), [
    ({"label": "", "scopes": ["docs:read"], "expires": ""}, "needs a label"),
    ({"label": "x", "scopes": [], "expires": ""}, "at least one scope"),
    ({"label": "x", "scopes": ["docs:read"], "expires": "9999"}, "when the token expires"),
    ({"label": "x", "scopes": ["root:everything"], "expires": ""}, "Unknown scope"),
])
def test_a_bad_form_is_refused_with_why_and_makes_nothing(alice, data, words):
    before = PersonalToken.objects.count()

    response = post(signed_in(alice), PAGE, data)

    assert response.status_code == 400 and words in response.content.decode()
    assert PersonalToken.objects.count() == before


def test_the_forms_need_their_csrf_token(alice):
    client = signed_in(alice)
    row = PersonalToken.objects.get(user=alice.user)

    assert client.post(PAGE, {"label": "x", "scopes": ["docs:read"], "expires": ""}).status_code == 403
    assert client.post(f"/tokens/{row.pk}/revoke").status_code == 403
    row.refresh_from_db()
    assert row.revoked_at is None and PersonalToken.objects.count() == 1


def test_the_page_needs_a_signed_in_user():
    assert Client().get(PAGE)["Location"].startswith("/accounts/login/")
