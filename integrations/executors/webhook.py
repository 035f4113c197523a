"""webhook_tools: a signed JSON POST to a receiver on a host the operator allows.

The connection holds the secret shared with the receiver. Each delivery is signed over its
timestamp and its exact body, so a receiver can tell that it came from someone holding the secret,
that nothing in it was changed, and (by the timestamp) that it is not an old delivery replayed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from typing import Any

from integrations.executors import ActionCall, ActionFailed, ActionSpec, IntegrationSpec, executor
from integrations.executors.transport import send, settings_allowlist

DEFAULT_EVENT = "webhook"
MAX_PAYLOAD_BYTES = 1024 * 1024


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The X-Atrium-Signature value: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


VERIFICATION = (
    "To verify a delivery, the receiver reads the X-Atrium-Timestamp header (unix seconds) and the raw request "
    "body bytes, computes the hex HMAC-SHA256 of `<timestamp>.<body>` with the shared secret, and compares "
    "`sha256=<that hex>` with the X-Atrium-Signature header in constant time (e.g. Python's "
    "hmac.compare_digest); it should also refuse timestamps more than five minutes from its own clock, and may "
    "use X-Atrium-Delivery (unique per delivery) to ignore a repeated one."
)

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "minLength": 1, "maxLength": 8192,
                "description": "The receiver's http:// or https:// URL, on a host the operator allows."},
        "event": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,100}$",
                  "description": f"The event name sent as X-Atrium-Event (default {DEFAULT_EVENT!r})."},
        "payload": {"type": "object", "description": "The JSON object sent as the request body."},
    },
    "required": ["url", "payload"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"type": "integer", "description": "The receiver's HTTP status, whatever it is."},
        "body": {"description": "The receiver's answer: parsed JSON, or text."},
        "delivery": {"type": "string", "description": "The X-Atrium-Delivery id sent with this delivery."},
    },
    "required": ["status", "body", "delivery"],
    "additionalProperties": False,
}

INTEGRATION = IntegrationSpec(
    id="webhook_tools",
    name="Signed webhooks",
    description="Send signed JSON webhook events to your own endpoints (automation servers, CI, chat bots, "
                "Zapier-style receivers) so they can trust where a notification came from.",
    category="development",
    agent_instructions=(
        "Connect webhook_tools with the secret the receiver shares ({\"secret\": \"...\"}). "
        "webhook_tools.send_webhook POSTs `payload` as JSON to `url` with X-Atrium-Event, X-Atrium-Timestamp and "
        "X-Atrium-Signature headers. The receiver's host must be one the operator allows. Any HTTP status is "
        "returned as the result: check `status`."
    ),
    auth_scheme="api_key",
    connection_required=True,
    actions=(
        ActionSpec(
            name="send_webhook",
            description=(
                "Tell another service that something happened: POST a JSON event (payload) to its webhook URL, "
                "signed with the connection's secret so the receiver can verify it. Headers: X-Atrium-Event (the "
                "event name), X-Atrium-Timestamp (unix seconds), X-Atrium-Delivery (a unique id) and "
                "X-Atrium-Signature: sha256=<hex HMAC-SHA256 of \"<timestamp>.<body>\" keyed with the secret>. "
                + VERIFICATION + " Returns the receiver's "
                "status and body; a non-2xx answer is a result, not an error."
            ),
            input_schema=INPUT_SCHEMA,
            output_schema=OUTPUT_SCHEMA,
            executor="webhook.send",
        ),
    ),
)


@executor("webhook.send")
def send_webhook(call: ActionCall) -> dict[str, Any]:
    secret = call.credentials.get("secret")
    if not isinstance(secret, str) or not secret:
        raise ActionFailed("The webhook_tools connection holds no secret: connect it again with "
                           "{\"secret\": \"...\"}.", code="invalid_credentials")
    data = call.input
    body = json.dumps(data["payload"], separators=(",", ":"), ensure_ascii=False).encode()
    if len(body) > MAX_PAYLOAD_BYTES:
        raise ActionFailed(f"The payload is larger than {MAX_PAYLOAD_BYTES:,} bytes as JSON.", code="invalid_input")
    timestamp = str(int(time.time()))
    delivery = str(uuid.uuid4())
    headers = {
        "Content-Type": "application/json",
        "X-Atrium-Event": data.get("event") or DEFAULT_EVENT,
        "X-Atrium-Timestamp": timestamp,
        "X-Atrium-Delivery": delivery,
        "X-Atrium-Signature": signature(secret, timestamp, body),
    }
    reply = send(method="POST", url=data["url"], allowlist=settings_allowlist(), headers=headers, content=body)
    return {"status": reply.status, "body": reply.body(), "delivery": delivery}
