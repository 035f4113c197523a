"""The home page: what Atrium offers to anyone; signed in, what the user has here and the next step."""

import pytest
from django.test import Client

from accounts.services import mcp_session_open
from core.caller import Caller
from elements.services import element_create
from elements.types import ElementType

pytestmark = pytest.mark.django_db


def home(member=None) -> str:
    client = Client()
    if member is not None:
        client.force_login(member.user)
    return client.get("/").content.decode()


def test_anyone_sees_the_mcp_url_and_how_to_sign_in(db, settings):
    html = home()

    assert settings.ATRIUM_MCP_URL in html and "Sign in" in html and "Here for you" not in html


def test_a_newcomer_is_sent_to_connect_a_client(alice):
    html = home(alice)

    assert "Connect your first MCP client" in html and 'href="/connect/"' in html


def test_someone_connected_with_an_empty_portfolio_is_told_how_to_fill_it(alice):
    mcp_session_open(caller=Caller.trusted(alice.user, via="mcp"), transport="http")

    assert "Your portfolio is empty" in home(alice)


def test_the_counts_are_the_users_own(alice, bob):
    mcp_session_open(caller=Caller.trusted(alice.user, via="mcp"), transport="http")
    for member, name in ((alice, "mine"), (bob, "theirs"), (bob, "theirs-too")):
        element_create(caller=Caller.trusted(member.user, via="mcp"), element_type=ElementType.SKILL, name=name,
                       params={"description": "A skill.", "content": "How to."})

    html = home(alice)

    assert '<a href="/portfolio/">1</a>: 1 skills' in html and "Browse your portfolio" in html


def test_approvals_waiting_come_first(alice):
    from elements import dangerzone

    dangerzone.agent_block(caller=Caller.trusted(alice.user, via="mcp"), agent_name="night-shift",
                           reason="Wanted to deploy.")

    html = home(alice)

    assert "waiting for you: decide on the Approvals page" in html


def test_the_favicon_is_served_for_browsers_that_ask_for_favicon_ico(db, client):
    response = client.get("/favicon.ico")

    assert response.status_code == 301 and response["Location"].endswith("/favicon.svg")
    assert 'rel="icon"' in client.get("/").content.decode()
