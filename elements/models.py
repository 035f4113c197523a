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


class ElementCount(models.Model):
    """How many elements of one type an owner has, kept by the database's own triggers (see
    elements.counts) on every insert, delete and change of owner or type, whatever made it: a
    service, admin, a bulk insert or a cascade. A list without filters reads its total here
    instead of counting the whole index range."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    element_type = models.CharField(max_length=16)
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "element_type"], name="element_count_unique")]

    def __str__(self) -> str:
        return f"{self.owner_id}: {self.count} {self.element_type}"


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


class AgentExecution(models.Model):
    """One execution of an agent (the original's goal): the goal rendered from its parameters, the
    agent's settings as they were when it started, and where it stands. A row, not process state,
    so an execution outlives its MCP session and the process and can be continued from any client
    of its owner."""

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress"
        COMPLETED = "completed"
        FAILED = "failed"
        ABORTED = "aborted"

    id = models.CharField(primary_key=True, max_length=40)  # goal_<hex>
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_executions")
    # SET_NULL: the history outlives the agent; agent_name still says whose it was.
    agent = models.ForeignKey(Element, null=True, blank=True, on_delete=models.SET_NULL, related_name="executions")
    agent_name = models.CharField(max_length=100)
    # The MCP session that started (or last resumed) it: the one its activations were made in.
    session = models.ForeignKey("accounts.McpSession", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    goal = models.TextField()
    parameters = models.JSONField(default=dict, blank=True)
    success_criteria = models.JSONField(default=list, blank=True)
    # The agent's autonomy, resilience, tools and systemPrompt when the execution started, so an
    # edit of the agent mid-execution does not change the rules of a running one.
    settings = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.IN_PROGRESS)
    outcome = models.CharField(max_length=8, blank=True)  # success, failure or partial, once finished
    summary = models.TextField(blank=True)
    abort_reason = models.CharField(max_length=500, blank=True)
    max_steps = models.PositiveIntegerField(null=True, blank=True)  # a runtime override; 0 is unlimited
    # Bumped once per recorded step or state change: the optimistic version clients see.
    state_version = models.PositiveIntegerField(default=1)
    step_count = models.PositiveIntegerField(default=0)
    continuations = models.PositiveIntegerField(default=0)
    retries = models.PositiveIntegerField(default=0)
    consecutive_failures = models.PositiveIntegerField(default=0)
    circuit_open_until = models.DateTimeField(null=True, blank=True)
    resumed_from = models.CharField(max_length=40, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["owner", "agent_name", "status", "-started_at"], name="execution_lookup")]

    def __str__(self) -> str:
        return f"{self.agent_name} {self.id} ({self.status})"


class ExecutionStep(models.Model):
    """One recorded step of an execution (the original's decision), with what autonomy decided."""

    class Outcome(models.TextChoices):
        SUCCESS = "success"
        FAILURE = "failure"
        PARTIAL = "partial"

    execution = models.ForeignKey(AgentExecution, on_delete=models.CASCADE, related_name="steps")
    number = models.PositiveIntegerField()
    decision_id = models.CharField(max_length=40)
    description = models.TextField()
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    findings = models.TextField(blank=True)
    confidence = models.FloatField(null=True, blank=True)
    next_action_hint = models.CharField(max_length=500, blank=True)
    risk_score = models.PositiveSmallIntegerField(null=True, blank=True)
    # The directive answered for this step: {continue, reason, factors, ...}.
    autonomy = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["execution", "number"]
        constraints = [models.UniqueConstraint(fields=["execution", "number"], name="execution_step_unique")]

    def __str__(self) -> str:
        return f"{self.execution_id} step {self.number}"


class AgentBlock(models.Model):
    """An agent stopped by the danger zone. While it holds, every execute-family operation on the
    agent but get_execution_state fails, until its owner enters the code shown on their page."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_blocks")
    agent_name = models.CharField(max_length=100)
    execution = models.ForeignKey(AgentExecution, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="blocks")
    reason = models.CharField(max_length=500)
    blocked_at = models.DateTimeField(default=timezone.now)
    released_at = models.DateTimeField(null=True, blank=True)
    released_by = models.CharField(max_length=16, blank=True)  # "code": how it was lifted

    class Meta:
        ordering = ["-blocked_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["owner", "agent_name"], condition=models.Q(released_at=None),
                                               name="agent_block_one_open")]

    def __str__(self) -> str:
        return f"{self.agent_name} blocked"


class VerificationChallenge(models.Model):
    """A one-time code that a person reads on their signed-in page and gives back through
    verify_challenge: it unblocks a danger-zone block or clears a verify-tier pause. The code is
    sealed (the vault's encryption) and is never in any MCP or REST answer."""

    class Kind(models.TextChoices):
        DANGER_ZONE = "danger_zone"
        VERIFICATION = "verification"

    id = models.UUIDField(primary_key=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="challenges")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    agent_name = models.CharField(max_length=100)
    block = models.ForeignKey(AgentBlock, null=True, blank=True, on_delete=models.CASCADE, related_name="challenges")
    execution = models.ForeignKey(AgentExecution, null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="challenges")
    reason = models.CharField(max_length=500)
    sealed_code = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    failures = models.PositiveSmallIntegerField(default=0)
    used_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=12, blank=True)  # "verified", or "spent" after too many wrong codes

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "used_at", "-created_at"], name="challenge_open")]

    def __str__(self) -> str:
        return f"{self.kind} challenge for {self.agent_name}"


class VerificationFailure(models.Model):
    """A wrong code, counted per owner so guessing is limited across challenges and processes."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    challenge = models.ForeignKey(VerificationChallenge, null=True, on_delete=models.SET_NULL, related_name="+")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["owner", "at"], name="verification_failure_recent")]

    def __str__(self) -> str:
        return f"wrong code at {self.at:%Y-%m-%d %H:%M:%S}"


class CliApproval(models.Model):
    """A CLI tool request (Claude Code's permission prompt) that needs a person: pending until its
    owner approves or denies it, on their page or through approve_cli_permission. An approval with
    scope tool_session lets the same tool through for the rest of that MCP session."""

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        DENIED = "denied"
        USED = "used"  # a single approval, spent on the request it was made for

    class Scope(models.TextChoices):
        SINGLE = "single"
        TOOL_SESSION = "tool_session"

    id = models.CharField(primary_key=True, max_length=48)  # cli-<uuid>
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="cli_approvals")
    session = models.ForeignKey("accounts.McpSession", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="cli_approvals")
    tool_name = models.CharField(max_length=200)
    tool_input = models.JSONField(default=dict, blank=True)
    input_digest = models.CharField(max_length=64)  # SHA-256 of the canonical JSON of tool_input
    agent_identity = models.CharField(max_length=200, blank=True)
    classification = models.JSONField(default=dict, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    scope = models.CharField(max_length=12, choices=Scope.choices, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_via = models.CharField(max_length=8, blank=True)  # an AuditEvent.Via value
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["session", "tool_name", "status"], name="cli_approval_lookup"),
                   models.Index(fields=["owner", "status", "-created_at"], name="cli_approval_owner")]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.status})"


class CollectionCache(models.Model):
    """The community collection read from one source (settings.ATRIUM_COLLECTION_SOURCE), kept so
    browsing, searching and installing work while the source is slow or out of reach."""

    source = models.CharField(max_length=1000, unique=True)
    fetched_at = models.DateTimeField(null=True, blank=True)
    index = models.JSONField(default=dict, blank=True)  # collection-index.json as last read
    etag = models.CharField(max_length=64, blank=True)  # SHA-256 of the files read, to skip rewriting unchanged rows
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    item_count = models.PositiveIntegerField(default=0)
    total_bytes = models.PositiveBigIntegerField(default=0)
    # A refresh claims the row by moving this forward in one UPDATE, so only one worker reads the source at once.
    claimed_until = models.DateTimeField(null=True, blank=True)
    # Failed reads in a row, and when the next one may be tried: a source that is down is not
    # waited on by every call (an HTTP source for its whole timeout), only once per back-off.
    failures = models.PositiveIntegerField(default=0)
    retry_after = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.source


class CollectionItem(models.Model):
    """One file of the cached collection, with the fields browsing and searching read."""

    cache = models.ForeignKey(CollectionCache, on_delete=models.CASCADE, related_name="items")
    path = models.CharField(max_length=300)  # library/<type>/<file>
    element_type = models.CharField(max_length=20)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    author = models.CharField(max_length=200, blank=True)
    version = models.CharField(max_length=50, blank=True)
    category = models.CharField(max_length=100, blank=True)
    tags = models.JSONField(default=list, blank=True)
    unique_id = models.CharField(max_length=200, blank=True)
    created = models.CharField(max_length=40, blank=True)
    size = models.PositiveIntegerField(default=0)
    sha = models.CharField(max_length=64)
    text = models.TextField()

    # Where the item comes from: the source ("community"), or an approved submission ("submission")
    # for the unsaved items elements.collection makes of those.
    origin = "community"

    class Meta:
        ordering = ["element_type", "name"]
        constraints = [models.UniqueConstraint(fields=["cache", "path"], name="collection_item_path")]

    def __str__(self) -> str:
        return self.path


class PortfolioRemote(models.Model):
    """A user's GitHub portfolio repository, as init_portfolio recorded it. Every sync locks this row,
    so two syncs of one user run one after the other. The clone URL is the API's, never with the
    token in it: the token is handed to git as credentials at each sync."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="portfolio_remote")
    owner = models.CharField(max_length=100)  # the GitHub login that owns the repository
    repository = models.CharField(max_length=100)
    clone_url = models.CharField(max_length=500)
    html_url = models.CharField(max_length=500, blank=True)
    default_branch = models.CharField(max_length=255, default="main")
    private = models.BooleanField(default=False)
    auto_sync = models.BooleanField(default=False)
    auto_submit = models.BooleanField(default=False)
    last_synced_commit = models.CharField(max_length=40, blank=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)
    last_sync_direction = models.CharField(max_length=4, blank=True)
    # Set in one conditional UPDATE by the first change after a push, cleared by the push task: at
    # most one auto-sync push is queued per user however many changes are made meanwhile (one
    # queued long ago counts as lost, so a worker that died does not stop auto-sync for good).
    push_queued_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.owner}/{self.repository}"


class PortfolioSyncBase(models.Model):
    """One element as it was at its last sync: the remote file's path and blob id, and the blob id of
    the file Atrium rendered from the local element then. A side whose current id differs from its
    base changed since; both changed is a conflict."""

    remote = models.ForeignKey(PortfolioRemote, on_delete=models.CASCADE, related_name="bases")
    element_type = models.CharField(max_length=16)
    name = models.CharField(max_length=100)
    path = models.CharField(max_length=300)
    blob_sha = models.CharField(max_length=40)
    local_sha = models.CharField(max_length=40)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["remote", "element_type", "name"],
                                               name="portfolio_base_element")]

    def __str__(self) -> str:
        return self.path


class CollectionSubmission(models.Model):
    """An element its author submitted to the server's collection: a snapshot of the collection
    file it would be, validated and scanned when submitted, waiting for a curator's decision. An
    approved submission is served by the collection operations at its path (origin "submission"),
    over the source's file there, until a curator withdraws it; a refresh of the cache leaves it be."""

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        WITHDRAWN = "withdrawn"

    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                               related_name="collection_submissions")
    # SET_NULL: the snapshot is what was submitted; the element may change or go meanwhile.
    element = models.ForeignKey(Element, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    element_type = models.CharField(max_length=16)
    name = models.CharField(max_length=100)
    path = models.CharField(max_length=300)  # library/<type>/<file>
    text = models.TextField()  # the collection file
    entry = models.JSONField(default=dict, blank=True)  # its collection-index.json entry
    validation = models.JSONField(default=dict, blank=True)  # {valid, errors, warnings}
    scan = models.JSONField(default=list, blank=True)  # [{field, pattern, severity, excerpt}]
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    submitted_at = models.DateTimeField(default=timezone.now)  # the latest snapshot's
    resubmissions = models.PositiveIntegerField(default=0)
    decided_at = models.DateTimeField(null=True, blank=True)
    # Where the source is a git repository: the branch the approved file is committed to, and how that went.
    git_branch = models.CharField(max_length=200, blank=True)
    git_commit = models.CharField(max_length=64, blank=True)
    git_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["author", "element_type", "name"],
                                               condition=models.Q(status="pending"),
                                               name="collection_submission_one_pending")]
        indexes = [models.Index(fields=["status", "path"], name="collection_submission_served"),
                   models.Index(fields=["author", "-submitted_at"], name="collection_submission_author")]

    def __str__(self) -> str:
        return f"{self.element_type} {self.name} ({self.status})"
