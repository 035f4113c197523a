"""Aident's catalogue (integrations, their actions, executable skills), each user's connections to
integrations with their sealed credentials, the record of every execution, and the search index
over all of it.

Credentials are sealed (integrations.crypto) before they reach a model: a column here never holds
a secret in clear, and no admin page, serializer or tool reads the sealed columns.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

IDENTIFIER = RegexValidator(r"^[a-z][a-z0-9_]{1,62}$", "Lower-case letters, digits and _, starting with a letter.")
ACTION_NAME = RegexValidator(r"^[A-Za-z][A-Za-z0-9_]{0,99}$", "Letters, digits and _, starting with a letter.")
SKILL_NAME = RegexValidator(r"^[a-z][a-z0-9_]{1,62}(\.[a-z0-9_]{1,100})?$",
                            "Lower-case letters, digits and _ (one dot allowed), starting with a letter.")


class AuthScheme(models.TextChoices):
    NONE = "none", "None"
    API_KEY = "api_key", "API key"
    BASIC = "basic", "Basic (user name and password)"
    BEARER = "bearer", "Bearer token"
    OAUTH2 = "oauth2", "OAuth 2.0 authorization code"


class Integration(models.Model):
    """A service Atrium can act on for a user: built in (http_tools...) or imported from OpenAPI."""

    class Kind(models.TextChoices):
        BUILTIN = "builtin", "Built in"
        OPENAPI = "openapi", "Imported OpenAPI document"

    id = models.CharField(primary_key=True, max_length=63, validators=[IDENTIFIER])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    category = models.CharField(max_length=60, blank=True, db_index=True)
    agent_instructions = models.TextField("agent-friendly instructions", blank=True)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.BUILTIN)
    auth_scheme = models.CharField(max_length=10, choices=AuthScheme.choices, default=AuthScheme.NONE)
    # Non-secret details of the scheme: api_key {in: header|query, name}; oauth2 {authorizationUrl,
    # tokenUrl, scopes, clientId}. The OAuth client secret is sealed in sealed_client_secret.
    auth_config = models.JSONField(default=dict, blank=True)
    sealed_client_secret = models.TextField(blank=True, editable=False)
    # Whether executing needs a connection at all (http_tools works without one).
    connection_required = models.BooleanField(default=True)
    # Usage that costs the operator credits (mail through its server...): connecting needs confirmed=true.
    first_party = models.BooleanField(default=False)
    base_url = models.URLField(max_length=500, blank=True)
    # The imported document, kept so a re-import can say what changed.
    source_document = models.TextField(blank=True, editable=False)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.id


class Action(models.Model):
    """One operation of an integration, called `integrationId.NAME`."""

    integration = models.ForeignKey(Integration, on_delete=models.CASCADE, related_name="actions")
    name = models.CharField(max_length=100, validators=[ACTION_NAME])
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict, blank=True)
    output_schema = models.JSONField(default=dict, blank=True)
    # Which executor runs it (integrations.executors.EXECUTORS) and what it needs to know
    # (an OpenAPI operation's method, path and parameter locations).
    executor = models.CharField(max_length=40)
    config = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["integration_id", "name"]
        constraints = [models.UniqueConstraint(fields=["integration", "name"], name="action_unique_per_integration")]

    def __str__(self) -> str:
        return self.full_name

    @property
    def full_name(self) -> str:
        return f"{self.integration_id}.{self.name}"


class Skill(models.Model):
    """Python code with typed input and output that may call actions; runs only in the sandbox.

    A skill without an owner is part of the shared catalogue (curated in admin); a user's own skills
    are seen and run by that user alone.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="capability_skills")
    name = models.CharField(max_length=164, validators=[SKILL_NAME])
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict, blank=True)
    output_schema = models.JSONField(default=dict, blank=True)
    source_code = models.TextField()
    integrations = models.ManyToManyField(Integration, blank=True, related_name="skills")
    timeout_seconds = models.PositiveIntegerField(default=30)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="skill_unique_name_per_owner"),
            models.UniqueConstraint(fields=["name"], condition=models.Q(owner__isnull=True),
                                    name="skill_unique_shared_name"),
        ]

    def __str__(self) -> str:
        return self.name


class Connection(models.Model):
    """A user's link to one integration, holding the sealed credentials the vault applies on use."""

    class State(models.TextChoices):
        CONNECTED = "connected"
        EXPIRED = "expired"  # an OAuth grant whose refresh failed: connect again

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="connections")
    integration = models.ForeignKey(Integration, on_delete=models.CASCADE, related_name="connections")
    state = models.CharField(max_length=10, choices=State.choices, default=State.CONNECTED)
    # A JSON object sealed with the vault key: {apiKey} / {username, password} / {token} /
    # {accessToken, refreshToken, tokenType} / {secret}.
    sealed_credentials = models.TextField(blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)  # the OAuth access token's
    granted_scopes = models.CharField(max_length=500, blank=True)
    confirmed_usage = models.BooleanField(default=False)  # first-party credit use was confirmed
    connected_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["integration_id"]
        constraints = [models.UniqueConstraint(fields=["user", "integration"], name="connection_unique_per_user")]

    def __str__(self) -> str:
        return f"{self.user} → {self.integration_id}"


def new_connect_token() -> str:
    return secrets.token_urlsafe(32)


class ConnectRequest(models.Model):
    """A pending connect: the vault's URL for a user to enter a secret or go through OAuth consent.

    Single-use and short-lived; bound to the user who asked, so a leaked URL is useless to anyone
    else. The PKCE verifier of an OAuth connect is sealed like a credential.
    """

    token = models.CharField(primary_key=True, max_length=64, default=new_connect_token, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    integration = models.ForeignKey(Integration, on_delete=models.CASCADE, related_name="+")
    oauth_state = models.CharField(max_length=64, blank=True, db_index=True)
    sealed_verifier = models.TextField(blank=True, editable=False)
    confirmed_usage = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"connect {self.integration_id} for {self.user}"


class Execution(models.Model):
    """One capabilities_execute (or API, or skill-inner) call: who, what, when, how long, how it ended.
    Never its input values or any credential: only the input's top-level keys."""

    class Kind(models.TextChoices):
        ACTION = "action"
        SKILL = "skill"

    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        REFUSED = "refused"  # dispatched but never ran: no sandbox here, the broker down, the token revoked

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="capability_executions")
    name = models.CharField(max_length=200, db_index=True)
    kind = models.CharField(max_length=6, choices=Kind.choices)
    integration = models.ForeignKey(Integration, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    skill = models.ForeignKey(Skill, null=True, blank=True, on_delete=models.SET_NULL, related_name="executions")
    # The skill run this call was made from, for actions a skill calls.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="calls")
    via = models.CharField(max_length=10)  # an AuditEvent.Via value
    credential = models.CharField(max_length=200, blank=True)
    input_keys = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING, db_index=True)
    error_code = models.CharField(max_length=60, blank=True)
    error = models.TextField(blank=True)
    # A skill's result ({success, output?, error?, executionTimeMs}), handed back by the worker.
    result = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField(default=timezone.now, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["user", "-started_at"], name="execution_user_started")]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"


class Capability(models.Model):
    """One searchable thing: an integration, an action or a skill, in one table so one query ranks
    them together. Kept in step by the services that write the catalogue (integrations.search)."""

    class Type(models.TextChoices):
        INTEGRATION = "integration"
        ACTION = "action"
        SKILL = "skill"

    type = models.CharField(max_length=12, choices=Type.choices)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    integration = models.ForeignKey(Integration, null=True, blank=True, on_delete=models.CASCADE,
                                    related_name="+")
    category = models.CharField(max_length=60, blank=True)
    action = models.OneToOneField(Action, null=True, blank=True, on_delete=models.CASCADE, related_name="capability")
    skill = models.OneToOneField(Skill, null=True, blank=True, on_delete=models.CASCADE, related_name="capability")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="+")  # a user's own skill; null for the shared catalogue
    document = models.TextField(blank=True)  # the words keyword search and the embedding are made from
    document_hash = models.CharField(max_length=64, blank=True)
    embedding = models.BinaryField(null=True, blank=True)  # float32 vector of the document
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["type", "name"]
        verbose_name_plural = "capabilities"
        indexes = [models.Index(fields=["owner", "type"], name="capability_owner_type"),
                   models.Index(fields=["updated_at"], name="capability_updated_at"),
                   # What search filters on, by id: SQLite checks its full-text matches against these
                   # without reading the rows themselves, each of which carries a 1 KB vector.
                   models.Index(fields=["id", "owner", "type", "integration", "category"],
                                name="capability_search_filters")]

    def __str__(self) -> str:
        return f"{self.type} {self.name}"
