"""Webhook triggers: a delivery signed with the trigger's secret, recent and new, starts an execution
with its body as input; every other delivery is refused with its status, starts nothing, and (for a
URL that is a trigger's) is recorded as a refused firing."""

import hashlib
import json
import time
from urllib.parse import urlsplit

import pytest
from django.test import Client

from core.caller import Caller
from core.errors import InvalidInput, NotFound
from integrations import crypto
from integrations.executors.webhook import signature
from runs.models import Run
from tests.conftest import Api
from tests.playbook_helpers import playbook_make
from workflows import triggers
from workflows.models import Trigger, TriggerFiring


@pytest.fixture
def http():
    return Client(enforce_csrf_checks=True)


def caller(member) -> Caller:
    return Caller.trusted(member.user, via="api")


def webhook(member, *, enabled=True, playbook=None, **spec) -> triggers.TriggerCreated:
    playbook = playbook or playbook_make(member.user)
    return triggers.trigger_create(caller=caller(member), playbook=playbook,
                                   spec={"type": "webhook", "enabled": enabled, **spec})


def path_of(created: triggers.TriggerCreated) -> str:
    return urlsplit(created.secrets["webhookUrl"]).path


def deliver(http, created, body: object = None, *, raw: bytes | None = None, secret: str | None = None,
            timestamp: str | None = None, sign: str | None = None, headers: bool = True):
    data = raw if raw is not None else json.dumps(body if body is not None else {}).encode()
    stamp = str(int(time.time())) if timestamp is None else timestamp
    extra = {}
    if headers:
        extra = {"HTTP_X_ATRIUM_TIMESTAMP": stamp,
                 "HTTP_X_ATRIUM_SIGNATURE": sign or signature(secret or created.secrets["secret"], stamp, data)}
    return http.post(path_of(created), data=data, content_type="application/json", **extra)


def refused(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code and body["error"], body
    return body


def test_creating_a_webhook_shows_its_url_and_secret_once_and_keeps_neither(alice, settings):
    created = webhook(alice)

    url, secret = created.secrets["webhookUrl"], created.secrets["secret"]
    token = url.rsplit("/", 1)[1]
    assert url == f"{settings.ATRIUM_PUBLIC_URL}/hooks/playbooks/{token}"
    stored = Trigger.objects.get(pk=created.trigger.pk)
    assert stored.webhook_token_digest == hashlib.sha256(token.encode()).hexdigest()
    assert stored.webhook_token_prefix == token[:12]
    assert secret not in stored.sealed_secret and crypto.unseal(stored.sealed_secret) == secret
    shown = triggers.trigger_describe(stored, tz="UTC")
    assert shown["webhookUrlPrefix"] == f"{settings.ATRIUM_PUBLIC_URL}/hooks/playbooks/{token[:12]}"
    assert token not in json.dumps(shown) and secret not in json.dumps(shown)


def test_a_signed_delivery_starts_an_execution_with_its_body_as_input(alice, http):
    playbook = playbook_make(alice.user)
    created = webhook(alice, playbook=playbook, input={"repo": "default", "event": {"source": "ci"}})

    response = deliver(http, created, {"repo": "atrium"})

    assert response.status_code == 202, response.content
    body = response.json()
    execution = Run.objects.get()
    # The execution as it was started; here, with no broker, it has since run to its AI step.
    assert body == {"executionId": execution.pk, "firingId": TriggerFiring.objects.get().pk, "status": "running"}
    assert (execution.status, execution.current_node) == ("paused", "digest")
    assert (execution.playbook, execution.trigger, execution.owner) == (playbook, created.trigger, alice.user)
    assert execution.context == {"repo": "atrium", "event": {"source": "ci"}}
    firing = TriggerFiring.objects.get()
    assert (firing.outcome, firing.run, firing.reason) == ("started", execution, "webhook delivery")
    assert len(firing.signature_digest) == 64
    assert Trigger.objects.get(pk=created.trigger.pk).last_fired_at == firing.fired_at


def test_a_delivery_signed_with_another_secret_is_refused(alice, charlie, http):
    alices = webhook(alice)
    charlies = webhook(charlie)

    response = deliver(http, alices, {"repo": "atrium"}, secret=charlies.secrets["secret"])

    refused(response, 401, "invalid_signature")
    assert not Run.objects.exists()
    firing = TriggerFiring.objects.get()
    assert (firing.trigger, firing.outcome, firing.run) == (alices.trigger, "refused", None)
    assert "invalid_signature" in firing.detail


@pytest.mark.parametrize("change", ["no headers", "no signature", "bad timestamp", "body changed", "not sha256"])
def test_an_unsigned_or_altered_delivery_is_refused(alice, http, change):
    created = webhook(alice)
    stamp = str(int(time.time()))
    good = signature(created.secrets["secret"], stamp, b'{"repo": "atrium"}')
    kwargs = {
        "no headers": {"headers": False},
        "no signature": {"sign": " "},
        "bad timestamp": {"timestamp": "soon", "sign": good},
        "body changed": {"timestamp": stamp, "sign": good, "raw": b'{"repo": "other"}'},
        "not sha256": {"timestamp": stamp, "sign": good.removeprefix("sha256=")},
    }[change]

    response = deliver(http, created, {"repo": "atrium"}, **kwargs)

    refused(response, 401, "invalid_signature")
    assert not Run.objects.exists()
    assert list(TriggerFiring.objects.values_list("outcome", flat=True)) == ["refused"]


# A minute past the 300-second tolerance: the timestamp is whole seconds and the request takes time, so an
# offset of 301 could land inside the tolerance by the time the server reads its clock.
@pytest.mark.parametrize("offset", [-360, 360])
def test_a_delivery_whose_timestamp_is_too_far_from_the_servers_clock_is_refused(alice, http, offset):
    created = webhook(alice)

    response = deliver(http, created, {"repo": "atrium"}, timestamp=str(int(time.time()) + offset))

    refused(response, 401, "stale_timestamp")
    assert not Run.objects.exists()
    assert TriggerFiring.objects.get().outcome == "refused"


def test_the_timestamps_tolerance_is_a_setting(alice, settings):
    settings.ATRIUM_WEBHOOK_TOLERANCE_SECONDS = 10
    created = webhook(alice)
    token = path_of(created).rsplit("/", 1)[1]
    body = b"{}"

    with pytest.raises(triggers.WebhookRefused) as late:
        triggers.webhook_receive(token=token, timestamp="1000", body=body, now=1011.0,
                                 signature=signature(created.secrets["secret"], "1000", body))
    fired = triggers.webhook_receive(token=token, timestamp="1000", body=body, now=1010.0,
                                     signature=signature(created.secrets["secret"], "1000", body))

    assert (late.value.http_status, late.value.code) == (401, "stale_timestamp")
    assert fired.run is not None and fired.firing.outcome == "started"


def test_a_replayed_delivery_is_refused_and_starts_nothing_more(alice, http):
    created = webhook(alice)
    stamp = str(int(time.time()))
    raw = b'{"repo": "atrium"}'
    sign = signature(created.secrets["secret"], stamp, raw)

    first = deliver(http, created, raw=raw, timestamp=stamp, sign=sign)
    again = deliver(http, created, raw=raw, timestamp=stamp, sign=sign)

    assert first.status_code == 202
    refused(again, 409, "replayed_delivery")
    assert Run.objects.count() == 1
    assert sorted(TriggerFiring.objects.values_list("outcome", flat=True)) == ["refused", "started"]


def test_an_oversized_body_is_refused_unread(alice, http, settings):
    settings.ATRIUM_WEBHOOK_MAX_BYTES = 100
    created = webhook(alice)

    largest = deliver(http, created, raw=json.dumps({"repo": "a" * 88}).encode())
    too_large = deliver(http, created, raw=json.dumps({"repo": "a" * 89}).encode())

    assert largest.status_code == 202, largest.content
    refused(too_large, 413, "payload_too_large")
    assert Run.objects.count() == 1
    assert sorted(TriggerFiring.objects.values_list("outcome", flat=True)) == ["refused", "started"]


def test_an_unknown_url_is_not_found_and_records_nothing(alice, http):
    created = webhook(alice)
    unknown = triggers.TriggerCreated(trigger=created.trigger, secrets={
        **created.secrets, "webhookUrl": created.secrets["webhookUrl"][:-4] + "xxxx"})

    response = deliver(http, unknown, {"repo": "atrium"})

    refused(response, 404, "webhook_not_found")
    assert not Run.objects.exists() and not TriggerFiring.objects.exists()


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"text"', b"not json", b"", b"\xff\xfe", b"[" * 5000 + b"]" * 5000])
def test_a_body_that_is_not_a_json_object_is_refused(alice, http, raw):
    created = webhook(alice)

    response = deliver(http, created, raw=raw)

    refused(response, 400, "not_an_object")
    assert not Run.objects.exists()
    assert TriggerFiring.objects.get().outcome == "refused"


def test_input_the_plan_refuses_is_unprocessable_and_starts_nothing(alice, http):
    created = webhook(alice)

    response = deliver(http, created, {"repo": 42})

    body = refused(response, 422, "invalid_input")
    assert body["problems"] == ["input.repo: 42 is not of type 'string'"]
    assert not Run.objects.exists()
    firing = TriggerFiring.objects.get()
    assert firing.outcome == "refused" and "repo: 42 is not of type 'string'" in firing.detail


def test_a_disabled_webhook_is_refused(alice, http):
    created = webhook(alice, enabled=False)

    response = deliver(http, created, {"repo": "atrium"})

    refused(response, 409, "trigger_disabled")
    assert not Run.objects.exists()
    assert TriggerFiring.objects.get().outcome == "refused"


def test_a_rotated_secret_retires_the_old_url_and_secret(alice, http):
    created = webhook(alice)

    rotated = triggers.webhook_secret_rotate(caller=caller(alice), trigger=created.trigger)

    assert rotated.secrets["secret"] != created.secrets["secret"]
    refused(deliver(http, created, {"repo": "atrium"}), 404, "webhook_not_found")
    signed_with_old = deliver(http, rotated, {"repo": "atrium"}, secret=created.secrets["secret"])
    refused(signed_with_old, 401, "invalid_signature")
    assert deliver(http, rotated, {"repo": "atrium"}).status_code == 202


def test_charlie_cannot_rotate_alices_secret_and_only_webhooks_have_one(alice, charlie):
    created = webhook(alice)
    timed = triggers.trigger_create(caller=caller(alice), playbook=created.trigger.playbook,
                                    spec={"type": "schedule", "preset": "hourly"}).trigger

    with pytest.raises(NotFound):
        triggers.webhook_secret_rotate(caller=caller(charlie), trigger=created.trigger)
    with pytest.raises(InvalidInput):
        triggers.webhook_secret_rotate(caller=caller(alice), trigger=timed)

    stored = Trigger.objects.get(pk=created.trigger.pk)
    assert crypto.unseal(stored.sealed_secret) == created.secrets["secret"]


def test_a_webhook_spec_takes_only_input_and_enabled(alice):
    playbook = playbook_make(alice.user)
    with pytest.raises(InvalidInput) as refusal:
        triggers.trigger_create(caller=caller(alice), playbook=playbook, spec={"type": "webhook", "secret": "mine"})

    assert "no key secret" in refusal.value.message
    assert not Trigger.objects.exists()


def test_a_webhook_answers_only_post(alice, http):
    created = webhook(alice)

    assert http.get(path_of(created)).status_code == 405
    assert not TriggerFiring.objects.exists()


def test_a_webhook_made_through_the_rest_api_takes_a_delivery(alice, charlie, http):
    playbook = playbook_make(alice.user)
    api = Api(alice)

    made = api.post(f"/api/playbooks/{playbook.pk}/triggers/", {"type": "webhook", "enabled": True})
    listed = api.get(f"/api/playbooks/{playbook.pk}/triggers/")
    hidden = Api(charlie).get(f"/api/playbooks/{playbook.pk}/triggers/")

    assert made.status_code == 201, made.content
    body = made.json()
    assert body["type"] == "webhook" and body["enabled"] is True
    assert body["webhookUrl"].startswith(body["webhookUrlPrefix"]) and body["secret"].startswith("whsec_")
    assert listed.status_code == 200 and "secret" not in listed.json()["triggers"][0]
    assert hidden.status_code == 404
    created = triggers.TriggerCreated(trigger=Trigger.objects.get(pk=body["id"]),
                                      secrets={"webhookUrl": body["webhookUrl"], "secret": body["secret"]})
    assert deliver(http, created, {"repo": "atrium"}).status_code == 202
    assert Run.objects.get().trigger_id == body["id"]
