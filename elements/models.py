from django.conf import settings
from django.db import models
from django.utils import timezone

from elements.types import ElementType


class Element(models.Model):
    """A persona, skill, template, agent, memory or ensemble, private to its owner.

    Fields every type shares are columns; the type-specific ones (template variables, agent
    goal/activates/tools/autonomy/resilience/systemPrompt, ensemble members and strategies,
    memory retention/autoLoad/priority) live in `metadata`, as in the original's front matter.
    """

    class FormatVersion(models.TextChoices):
        V1 = "v1", "v1 (one body)"
        V2 = "v2", "v2 (instructions and content)"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="elements")
    element_type = models.CharField(max_length=16, choices=[(t.value, t.value) for t in ElementType])
    name = models.CharField(max_length=100)
    unique_id = models.CharField(max_length=200)
    description = models.CharField(max_length=500, blank=True)
    instructions = models.TextField(blank=True)
    content = models.TextField(blank=True)
    tags = models.JSONField(default=list, blank=True)
    triggers = models.JSONField(default=list, blank=True)
    category = models.CharField(max_length=21, blank=True)
    author = models.CharField(max_length=150, blank=True)
    version = models.CharField(max_length=50, default="1.0.0")
    # The version with each number zero-padded, so the database sorts 1.10.0 after 1.9.0.
    version_key = models.CharField(max_length=80, default="", editable=False)
    format_version = models.CharField(max_length=2, choices=FormatVersion.choices, default=FormatVersion.V2)
    gatekeeper = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # Published by a curator to the team's collection: everyone can find it with search's
    # collection scope; only its owner can change it.
    published = models.BooleanField(default=False, db_index=True)
    created = models.DateTimeField(default=timezone.now)
    modified = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["element_type", "name"]
        # On PostgreSQL, migration 0004 adds covering copies of these (INCLUDE id), so a deep
        # page's offset is skipped in the index alone; SQLite's indexes hold the rowid already.
        constraints = [
            models.UniqueConstraint(fields=["owner", "element_type", "name"], name="element_unique_name_per_owner"),
        ]
        indexes = [
            models.Index(fields=["owner", "element_type", "modified"], name="element_owner_type_modified"),
            models.Index(fields=["owner", "element_type", "created"], name="element_owner_type_created"),
        ]

    def __str__(self) -> str:
        return f"{self.element_type} {self.name}"


class ElementRevision(models.Model):
    """An immutable snapshot taken at every save, and before a delete (the backup)."""

    class Action(models.TextChoices):
        CREATE = "create"
        UPDATE = "update"
        IMPORT = "import"
        RESTORE = "restore"
        DELETE = "delete"
        ENTRY = "entry"
        CLEAR = "clear"

    # SET_NULL: the backup taken before a delete must outlive the element.
    element = models.ForeignKey(Element, null=True, blank=True, on_delete=models.SET_NULL, related_name="revisions")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    element_type = models.CharField(max_length=16)
    name = models.CharField(max_length=100)
    action = models.CharField(max_length=8, choices=Action.choices)
    snapshot = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)
    credential = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["owner", "element_type", "name", "-created_at"], name="revision_lookup")]

    def __str__(self) -> str:
        return f"{self.element_type} {self.name} {self.action} {self.created_at:%Y-%m-%d %H:%M:%S}"


class MemoryEntry(models.Model):
    """One append-only entry of a memory element."""

    class Privacy(models.TextChoices):
        PUBLIC = "public"
        PRIVATE = "private"
        SENSITIVE = "sensitive"

    class Trust(models.TextChoices):
        UNTRUSTED = "untrusted"
        VALIDATED = "validated"
        TRUSTED = "trusted"
        FLAGGED = "flagged"
        QUARANTINED = "quarantined"

    memory = models.ForeignKey(Element, on_delete=models.CASCADE, related_name="entries")
    entry_id = models.CharField(max_length=40)
    content = models.TextField()
    tags = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    timestamp = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    privacy_level = models.CharField(max_length=10, choices=Privacy.choices, default=Privacy.PRIVATE)
    trust_level = models.CharField(max_length=12, choices=Trust.choices, default=Trust.UNTRUSTED)
    source = models.CharField(max_length=100, blank=True)

    class Meta:
        ordering = ["timestamp", "id"]
        verbose_name_plural = "memory entries"
        constraints = [models.UniqueConstraint(fields=["memory", "entry_id"], name="entry_unique_id_per_memory")]

    def __str__(self) -> str:
        return self.entry_id


class Activation(models.Model):
    """An element active in one MCP session. Kept in the database so it survives a restart."""

    session = models.ForeignKey("accounts.McpSession", on_delete=models.CASCADE, related_name="activations")
    element = models.ForeignKey(Element, on_delete=models.CASCADE, related_name="activations")
    # The ensemble whose activation brought this element in, if any.
    via = models.ForeignKey(Element, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    activated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["activated_at", "id"]
        constraints = [models.UniqueConstraint(fields=["session", "element"], name="activation_unique")]

    def __str__(self) -> str:
        return f"{self.element} active in {self.session_id[:8]}…"


class Confirmation(models.Model):
    """A gatekeeper confirmation recorded by confirm_operation, for one MCP session."""

    class Level(models.TextChoices):
        SESSION = "session"
        SINGLE_USE = "single_use"

    session = models.ForeignKey("accounts.McpSession", on_delete=models.CASCADE, related_name="confirmations")
    operation = models.CharField(max_length=64)
    element_type = models.CharField(max_length=16, blank=True)  # blank: every type
    level = models.CharField(max_length=10, choices=Level.choices)
    # A request noted when a call was refused; confirm_operation turns it into a confirmation.
    pending = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["session", "operation"], name="confirmation_lookup")]

    def __str__(self) -> str:
        return f"{self.operation} ({self.element_type or 'all types'}, {self.level})"


class UserSettings(models.Model):
    """Per-user settings managed with dollhouse_config."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="element_settings")
    values = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name_plural = "user settings"

    def __str__(self) -> str:
        return f"settings of {self.user}"
