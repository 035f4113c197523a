"""The integrations page: each enabled integration with the user's connection state; Connect goes through
vault_connect (on to the connect page when a secret is needed), Disconnect through vault_disconnect."""

import pytest
from django.test import Client

from integrations.models import Connection
from tests.conftest import hidden_inputs
from tests.test_vault import SECRET, catalogue, connect  # noqa: F401  (catalogue is a fixture)

pytestmark = pytest.mark.django_db

PAGE = "/integrations/"


def signed_in(member) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(member.user)
    return client


def post(client: Client, path: str):
    token = hidden_inputs(client.get(PAGE).content.decode())["csrfmiddlewaretoken"]
    return client.post(path, {"csrfmiddlewaretoken": token})


def test_the_page_lists_enabled_integrations_with_the_users_state(alice, bob, catalogue):  # noqa: F811
    connect(bob, "weather_tools", credentials={"apiKey": SECRET})
    connect(alice, "tracker_tools", credentials={"token": SECRET})

    html = signed_in(alice).get(PAGE).content.decode()

    assert "Weather" in html and "Tracker" in html and "Retired" not in html
    assert 'aria-label="Disconnect Tracker"' in html and 'aria-label="Connect Weather"' in html
    assert SECRET not in html


def test_connect_for_a_secret_goes_on_to_the_connect_page(alice, catalogue):  # noqa: F811
    response = post(signed_in(alice), "/integrations/weather_tools/connect")

    assert response.status_code == 302 and "/vault/connect/" in response["Location"]
    assert not Connection.objects.filter(user=alice.user).exists()


def test_connect_for_one_that_needs_nothing_connects_at_once(alice, catalogue):  # noqa: F811
    client = signed_in(alice)

    response = post(client, "/integrations/mail_tools/connect")

    assert response.status_code == 302 and response["Location"] == PAGE
    assert Connection.objects.filter(user=alice.user, integration_id="mail_tools").exists()
    assert "Connected mail_tools." in client.get(PAGE).content.decode()


def test_disconnect_forgets_only_the_users_own_connection(alice, bob, catalogue):  # noqa: F811
    connect(alice, "tracker_tools", credentials={"token": SECRET})
    connect(bob, "tracker_tools", credentials={"token": SECRET})

    response = post(signed_in(alice), "/integrations/tracker_tools/disconnect")

    assert response.status_code == 302
    assert not Connection.objects.filter(user=alice.user).exists()
    assert Connection.objects.filter(user=bob.user, integration_id="tracker_tools").exists()


def test_an_unknown_integration_is_refused_with_a_message(alice, catalogue):  # noqa: F811
    client = signed_in(alice)

    post(client, "/integrations/nope_tools/connect")

    assert "nope_tools" in client.get(PAGE).content.decode()
    assert not Connection.objects.exists()
