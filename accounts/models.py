from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models
from django.utils import timezone


class User(AbstractUser):
    """An Atrium account. Each user's portfolio is private to them unless shared."""

    # An IANA zone name: what a playbook's schedule ("every weekday at 9") means for this user.
    timezone = models.CharField(max_length=64, default="UTC")


class Scope(models.Model):
    """A permission a token can carry, e.g. `elements:read`. Seeded by a data migration."""

    name = models.CharField(max_length=64, unique=True)
    description = models.CharField(max_length=200)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class PersonalToken(models.Model):
    """A bearer token a user makes for a client. Only its SHA-256 digest is stored."""

    PREFIX = "atr_"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="personal_tokens")
    label = models.CharField(max_length=100)
    # The first characters of the raw token, so a leaked token found in a log can be matched.
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    scopes = models.ManyToManyField(Scope, related_name="+", blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "revoked_at"])]

    def __str__(self) -> str:
        return f"{self.label} ({self.prefix}…)"

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and not self.is_expired


class McpSession(models.Model):
    """One MCP connection: an Mcp-Session-Id over HTTP, or one stdio process.

    Kept in the database so any web process behind a load balancer can serve the next request.
    """

    class Transport(models.TextChoices):
        HTTP = "http", "Streamable HTTP"
        STDIO = "stdio", "stdio"

    id = models.CharField(primary_key=True, max_length=64)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mcp_sessions")
    transport = models.CharField(max_length=8, choices=Transport.choices)
    credential = models.CharField(max_length=200, blank=True)
    protocol_version = models.CharField(max_length=20, blank=True)
    client_name = models.CharField(max_length=200, blank=True)
    client_version = models.CharField(max_length=50, blank=True)
    # The elicitation modes the client declared ("form", "url" or both), so a tool that needs a
    # secret can send the user to a page by URL elicitation when the client supports it.
    elicitation_modes = models.CharField(max_length=20, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)
    # Set on a credential's standing session: the one that requests without a session of their
    # own (2026-07-28 has none) share, so activations and confirmations carry from one to the next.
    credential_key = models.CharField(max_length=100, blank=True, default="")
    # Not a column: True on the session object of a stdio process while it knows the session has
    # no active element (accounts.services.mcp_session_open), so a call skips the gatekeeper's query
    # for their policies (elements.selectors.session_policies).
    known_without_activations = False

    class Meta:
        ordering = ["-last_seen_at"]
        verbose_name = "MCP session"
        constraints = [
            models.UniqueConstraint(fields=["credential_key"],
                                    condition=models.Q(closed_at__isnull=True) & ~models.Q(credential_key=""),
                                    name="one_open_session_per_credential"),
        ]

    def __str__(self) -> str:
        return f"{self.client_name or 'MCP client'} ({self.id[:8]}…)"


class AuditEvent(models.Model):
    """One write, through any adapter: who, with which credential, what, and when."""

    class Via(models.TextChoices):
        MCP = "mcp", "MCP"
        API = "api", "REST API"
        ADMIN = "admin", "Admin"
        COMMAND = "command", "Management command"
        WEB = "web", "Web"
        TASK = "task", "Background task"

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Kept in words so the record survives the deletion of the user or token.
    actor_name = models.CharField(max_length=150, blank=True)
    credential = models.CharField(max_length=200, blank=True)
    via = models.CharField(max_length=8, choices=Via.choices)
    action = models.CharField(max_length=64, db_index=True)
    target = models.CharField(max_length=255, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name or '-'} {self.action} {self.target}"


class ToolCall(models.Model):
    """One MCP tool call: whose, through which server and transport, how it ended and how long it
    took. Writes are in AuditEvent; this records every call, reads included, for the performance
    log (query_logs' `performance` category) and the console's metrics."""

    class Outcome(models.TextChoices):
        OK = "ok", "Answered"
        ERROR = "error", "Error"

    at = models.DateTimeField(default=timezone.now)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    server = models.CharField(max_length=16)
    transport = models.CharField(max_length=8, choices=McpSession.Transport.choices)
    tool = models.CharField(max_length=64)
    operation = models.CharField(max_length=64, blank=True)
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    error_code = models.CharField(max_length=64, blank=True)
    duration_ms = models.FloatField()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["user", "-at"], name="toolcall_user_at")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.tool} {self.operation} {self.outcome}".replace("  ", " ")


class RedeemedCode(models.Model):
    """An authorization code that was exchanged for tokens, kept so that a second use of it can
    revoke them (RFC 6749 section 4.1.2). Only the code's digest is stored; not unique, because
    two racing exchanges of one code are both recorded and both revoked."""

    digest = models.CharField(max_length=64, db_index=True)
    client_id = models.CharField(max_length=100)
    token_family = models.UUIDField()
    redeemed_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"code {self.digest[:8]}… redeemed {self.redeemed_at:%Y-%m-%d %H:%M:%S}"


class GitHubAuth(models.Model):
    """A user's GitHub sign-in by the OAuth device flow (RFC 8628): the flow under way, then the
    token it earned. The token and the device code are sealed with the vault's keys (integrations.crypto)."""

    class State(models.TextChoices):
        NONE = "none", "Not connected"  # a row holding only the user's own client id
        PENDING = "pending", "Waiting for the user"
        CONNECTED = "connected", "Connected"
        DENIED = "denied", "Denied"
        EXPIRED = "expired", "Expired"

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="github_auth")
    # The user's own OAuth app (configure_oauth); empty means the server's ATRIUM_GITHUB_CLIENT_ID.
    client_id = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=12, choices=State.choices, default=State.NONE)
    sealed_token = models.TextField(blank=True)
    login = models.CharField(max_length=100, blank=True)
    scopes = models.JSONField(default=list, blank=True)
    user_code = models.CharField(max_length=32, blank=True)
    verification_uri = models.CharField(max_length=300, blank=True)
    sealed_device_code = models.TextField(blank=True)
    interval = models.PositiveIntegerField(default=5)
    started_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_polled_at = models.DateTimeField(null=True, blank=True)
    polls = models.PositiveIntegerField(default=0)
    connected_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "GitHub sign-in"

    def __str__(self) -> str:
        return f"{self.user} on GitHub: {self.state}{f' as {self.login}' if self.login else ''}"
