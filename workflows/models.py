import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from workflows.fields import OrderedJSONField


class Project(models.Model):
    """A code project a user works in. Its workflows are the `repo` source for every call whose
    `cwd` lies inside one of its roots."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="projects")
    # Derived from the git remote (host/owner/repo), else the repository folder's name.
    project_id = models.CharField(max_length=255)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["project_id"]
        constraints = [models.UniqueConstraint(fields=["owner", "project_id"], name="project_unique_per_owner")]

    def __str__(self) -> str:
        return self.project_id


class ProjectRoot(models.Model):
    """An absolute path known to be a project's root on the user's machine. A hosted server cannot
    see the user's disk, so this is how it maps a `cwd` to a project."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="roots")
    # Repeated from the project so one user's roots are unique and found with one index.
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    path = models.CharField(max_length=1024)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["path"]
        constraints = [models.UniqueConstraint(fields=["owner", "path"], name="project_root_unique_per_owner")]

    def __str__(self) -> str:
        return self.path


class Workflow(models.Model):
    """A workflow definition: the YAML as written (comments kept) and its parsed form. Without a
    project it belongs to the owner's global store."""

    class Source(models.TextChoices):
        GLOBAL = "global"
        REPO = "repo"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workflows")
    # PROTECT: deleting a project must not take its workflows with it silently.
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.PROTECT, related_name="workflows")
    workflow_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    yaml_text = models.TextField()
    config = OrderedJSONField()
    created = models.DateTimeField(default=timezone.now)
    modified = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["workflow_id"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "project", "workflow_id"], condition=Q(project__isnull=False),
                                    name="workflow_unique_id_per_project"),
            models.UniqueConstraint(fields=["owner", "workflow_id"], condition=Q(project__isnull=True),
                                    name="workflow_unique_id_global"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_id} ({self.source})"

    @property
    def source(self) -> str:
        return self.Source.GLOBAL if self.project_id is None else self.Source.REPO


class WorkflowAsset(models.Model):
    """A file bundled with a workflow (a converted skill's scripts/), placed in the workflow's
    directory when its script nodes run."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="assets")
    path = models.CharField(max_length=500)
    content = models.TextField()
    executable = models.BooleanField(default=False)

    class Meta:
        ordering = ["path"]
        constraints = [models.UniqueConstraint(fields=["workflow", "path"], name="workflow_asset_unique_path")]

    def __str__(self) -> str:
        return self.path


class WorkflowRevision(models.Model):
    """An immutable snapshot taken at every write, and before a delete."""

    class Action(models.TextChoices):
        CREATE = "create"
        UPDATE = "update"
        RENAME = "rename"
        MOVE = "move"
        REFERENCE = "reference", "reference rewritten"
        RESTORE = "restore"
        IMPORT = "import"
        DELETE = "delete"

    # SET_NULL: the snapshot taken before a delete must outlive the workflow.
    workflow = models.ForeignKey(Workflow, null=True, blank=True, on_delete=models.SET_NULL, related_name="revisions")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The workflow's id when the snapshot was taken (`workflow_id` is the foreign key's column).
    workflow_key = models.CharField("workflow id", max_length=100)
    action = models.CharField(max_length=10, choices=Action.choices)
    yaml_text = models.TextField()
    assets = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    credential = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["owner", "workflow_key", "-created_at"], name="workflow_revision_lookup")]

    def __str__(self) -> str:
        return f"{self.workflow_key} {self.action} {self.created_at:%Y-%m-%d %H:%M:%S}"


class ConfiguredModel(models.Model):
    """A model workflows may name, with its prices. Lint warns about models not listed here; run
    costs are computed from these prices."""

    model_id = models.CharField(max_length=100, unique=True)
    label = models.CharField(max_length=100, blank=True)
    input_usd_per_mtok = models.DecimalField("input price (USD per million tokens)", max_digits=10, decimal_places=4)
    output_usd_per_mtok = models.DecimalField("output price (USD per million tokens)", max_digits=10,
                                              decimal_places=4)
    is_default = models.BooleanField(default=False)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["model_id"]
        verbose_name = "model"
        constraints = [models.UniqueConstraint(fields=["is_default"], condition=Q(is_default=True),
                                               name="one_default_model")]

    def __str__(self) -> str:
        return self.model_id


def new_playbook_id() -> str:
    """Letters and digits only, like a run's id, so it survives markdown in a chat client."""
    return "pb" + secrets.token_hex(10)


class PlaybookTemplate(models.Model):
    """A curated starting point for a playbook: its plan, the integrations it needs and an example input.
    Shipped templates come from workflows/playbook_templates/ (manage.py sync_templates)."""

    id = models.SlugField(primary_key=True, max_length=100)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    category = models.CharField(max_length=60, db_index=True)
    integrations = models.JSONField("required integrations", default=list, blank=True)
    plan = OrderedJSONField()
    example_input = models.JSONField(default=dict, blank=True)
    # Triggers a playbook made from this template starts with (disabled until activated).
    triggers = models.JSONField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    # Loaded from a file shipped with Atrium (a sync rewrites it); a curator's own template is not.
    shipped = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["category", "name"]
        verbose_name = "playbook template"

    def __str__(self) -> str:
        return self.name


class Playbook(models.Model):
    """A goal, the integrations it needs, a plan of ordered steps with an input and an output card, and
    triggers. The plan compiles to a workflow (`workflow`), which is what an execution (a run) runs."""

    id = models.CharField(primary_key=True, max_length=32, default=new_playbook_id, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="playbooks")
    name = models.CharField(max_length=200)
    goal = models.TextField(blank=True)
    plan = OrderedJSONField()
    # Integration ids the plan's steps need, with any the author added: what Healthy checks.
    integrations = models.JSONField(default=list, blank=True)
    # SET_NULL: a deleted workflow leaves the playbook, which says so, rather than deleting it.
    workflow = models.OneToOneField(Workflow, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="playbook")
    # Set when the compiled workflow was edited into a shape no plan describes: the playbook then runs
    # the workflow as it is, and this says why its plan no longer matches.
    detached_reason = models.TextField(blank=True)
    template = models.ForeignKey(PlaybookTemplate, null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="playbooks")
    # What one execution may spend on model answers (a trigger-started run answered by the server's model).
    spending_cap_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-updated_at", "id"]
        indexes = [models.Index(fields=["owner", "-updated_at"], name="playbook_list")]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"


class Trigger(models.Model):
    """What starts a playbook's execution: a schedule, one of Atrium's events, or an inbound webhook."""

    class Kind(models.TextChoices):
        SCHEDULE = "schedule"
        EVENT = "event"
        WEBHOOK = "webhook"

    playbook = models.ForeignKey(Playbook, on_delete=models.CASCADE, related_name="triggers")
    # The playbook's owner, repeated so one user's triggers are found with one index.
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    enabled = models.BooleanField(default=False)
    # schedule: a cron expression (a preset is kept as the words it was given in, and its cron).
    cron = models.CharField(max_length=100, blank=True)
    preset = models.CharField(max_length=40, blank=True)
    # event: the event's name and filters on its data.
    event = models.CharField(max_length=40, blank=True)
    filters = models.JSONField(default=dict, blank=True)
    # webhook: the URL's token is known by its digest only; the signing secret is sealed.
    webhook_token_digest = models.CharField(max_length=64, blank=True, db_index=True)
    webhook_token_prefix = models.CharField(max_length=16, blank=True)
    sealed_secret = models.TextField(blank=True)
    # Input every execution it starts gets (an event's data and a webhook's body are merged over it).
    input = models.JSONField(default=dict, blank=True)
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["playbook", "id"]
        indexes = [
            models.Index(fields=["kind", "enabled", "next_fire_at"], name="trigger_due"),
            models.Index(fields=["owner", "kind", "event"], name="trigger_by_event"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} trigger of {self.playbook_id}"


class TriggerFiring(models.Model):
    """One time a trigger fired: when, why, and the execution it started or why it started none."""

    class Outcome(models.TextChoices):
        STARTED = "started"
        SKIPPED = "skipped"
        REFUSED = "refused"
        FAILED = "failed"

    trigger = models.ForeignKey(Trigger, on_delete=models.CASCADE, related_name="firings")
    playbook = models.ForeignKey(Playbook, on_delete=models.CASCADE, related_name="firings")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    fired_at = models.DateTimeField(default=timezone.now)
    reason = models.CharField(max_length=200)
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    detail = models.TextField(blank=True)
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # A webhook delivery's signature: the same one twice is a replay.
    signature_digest = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-fired_at", "-id"]
        indexes = [models.Index(fields=["owner", "playbook", "-fired_at"], name="firing_list")]
        constraints = [models.UniqueConstraint(fields=["trigger", "signature_digest"],
                                               condition=~Q(signature_digest=""), name="webhook_delivery_once")]

    def __str__(self) -> str:
        return f"{self.trigger} {self.outcome} at {self.fired_at:%Y-%m-%d %H:%M:%S}"
