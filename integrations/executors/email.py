"""email_tools: a plain-text email through the operator's own mail server.

It needs no credentials of the user's, but every message goes out through the operator's server
and from its address (DEFAULT_FROM_EMAIL), so it is first-party: connecting it is the user's
confirmation of that use.
"""

from __future__ import annotations

import smtplib
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import BadHeaderError, EmailMessage
from django.core.validators import validate_email

from integrations.executors import ActionCall, ActionFailed, ActionSpec, IntegrationSpec, executor

MAX_RECIPIENTS = 10

_ADDRESS: dict[str, Any] = {"type": "string", "minLength": 3, "maxLength": 254}

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "to": {"type": "array", "items": _ADDRESS, "minItems": 1, "maxItems": MAX_RECIPIENTS,
               "description": f"Recipient addresses (1 to {MAX_RECIPIENTS}), e.g. [\"ana@example.com\"]."},
        "subject": {"type": "string", "minLength": 1, "maxLength": 998, "pattern": "^[^\\r\\n]*$",
                    "description": "The subject line (one line)."},
        "body": {"type": "string", "maxLength": 100_000, "description": "The message, as plain text."},
        "cc": {"type": "array", "items": _ADDRESS, "maxItems": MAX_RECIPIENTS,
               "description": f"Copy recipients (at most {MAX_RECIPIENTS})."},
        "replyTo": {**_ADDRESS, "description": "Where replies go (the sender address is the server's own)."},
    },
    "required": ["to", "subject", "body"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sent": {"type": "integer", "description": "Messages sent: 1 (one message to every recipient)."},
        "to": {"type": "array", "items": {"type": "string"}, "description": "The recipients it was sent to."},
    },
    "required": ["sent", "to"],
    "additionalProperties": False,
}

INTEGRATION = IntegrationSpec(
    id="email_tools",
    name="Email",
    description="Send plain-text email (notifications, summaries, reports, reminders) to up to ten recipients "
                "through the Atrium server's own mail service.",
    category="communication",
    agent_instructions=(
        "email_tools.send_email sends one plain-text message from the server's address; set replyTo to the "
        "user's own address so answers reach them. It uses the operator's mail service: connect it with "
        "vault action=connect, confirmed=true. No attachments or HTML."
    ),
    auth_scheme="none",
    connection_required=True,
    first_party=True,
    actions=(
        ActionSpec(
            name="send_email",
            description=(
                "Send a plain-text email to 1-10 recipients (with optional cc and reply-to address) through the "
                "server's mail service, from its own sender address. Returns how many messages were sent and to "
                "whom. Addresses are checked first; an invalid one sends nothing."
            ),
            input_schema=INPUT_SCHEMA,
            output_schema=OUTPUT_SCHEMA,
            executor="email.send",
        ),
    ),
)


def _addresses(values: list[str], field: str) -> list[str]:
    for value in values:
        try:
            validate_email(value)
        except ValidationError as exc:
            raise ActionFailed(f"{field}: {value!r} is not an email address.", code="invalid_input") from exc
    return list(values)


@executor("email.send")
def send_email(call: ActionCall) -> dict[str, Any]:
    data = call.input
    to = _addresses(data["to"], "to")
    if not 1 <= len(to) <= MAX_RECIPIENTS:
        raise ActionFailed(f"to: give 1 to {MAX_RECIPIENTS} addresses.", code="invalid_input")
    cc = _addresses(data.get("cc") or [], "cc")
    if len(cc) > MAX_RECIPIENTS:
        raise ActionFailed(f"cc: give at most {MAX_RECIPIENTS} addresses.", code="invalid_input")
    reply_to = _addresses([data["replyTo"]], "replyTo") if data.get("replyTo") else []
    message = EmailMessage(subject=data["subject"], body=data["body"], from_email=settings.DEFAULT_FROM_EMAIL,
                           to=to, cc=cc, reply_to=reply_to)
    try:
        sent = message.send(fail_silently=False)
    except BadHeaderError as exc:
        raise ActionFailed("The subject must be a single line.", code="invalid_input") from exc
    except (smtplib.SMTPException, OSError) as exc:
        raise ActionFailed(f"The mail server refused or could not be reached: {exc}.", code="send_failed") from exc
    return {"sent": sent, "to": to}
