import secrets

from django.conf import settings
from django.db import models
from django.db.models import Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from workflows.fields import OrderedJSONField


def new_run_id() -> str:
    """Letters and digits only, so a run's URL survives markdown in a chat client unescaped."""
    return secrets.token_hex(12)


class Run(models.Model):
    """One execution of a workflow, from the exact definition it started with."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        PAUSED = "paused"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Kind(models.TextChoices):
        REAL = "real"
        TEST = "test"

    TERMINAL = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)

    id = models.CharField(primary_key=True, max_length=32, default=new_run_id, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    # PROTECT: a run's project decides who may see it; it must not fall into the global namespace.
    project = models.ForeignKey("workflows.Project", null=True, blank=True, on_delete=models.PROTECT,
                                related_name="runs")
    workflow = models.ForeignKey("workflows.Workflow", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="runs")
    revision = models.ForeignKey("workflows.WorkflowRevision", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    workflow_key = models.CharField("workflow id", max_length=100)
    workflow_name = models.CharField(max_length=200)
    workflow_description = models.TextField(blank=True)
    # global, repo, or inline (a test of a definition that is not stored).
    workflow_source = models.CharField(max_length=8)
    definition = OrderedJSONField()
    context = OrderedJSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    stop_reason = models.CharField(max_length=60, blank=True)
    error = models.TextField(blank=True)
    kind = models.CharField(max_length=4, choices=Kind.choices, default=Kind.REAL)
    host = models.CharField(max_length=20, blank=True)
    current_node = models.CharField(max_length=100, blank=True)
    # Node id -> its latest output: what templates read.
    outputs = models.JSONField(default=dict, blank=True)
    # Node id -> how many times the run entered it (maxIterations).
    visits = models.JSONField(default=dict, blank=True)
    output = OrderedJSONField(null=True, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    parent_node = models.CharField(max_length=100, blank=True)
    # A playbook's execution is a run of its compiled workflow; one a trigger started has no host
    # present to answer its AI steps (runs.answerers decides who does).
    playbook = models.ForeignKey("workflows.Playbook", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="executions")
    trigger = models.ForeignKey("workflows.Trigger", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    spending_cap_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    spending_cap_tokens = models.BigIntegerField(null=True, blank=True)
    total_cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    metered_cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    subscription_equiv_cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    billing_mode = models.CharField(max_length=12, default="subscription")
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["owner", "project", "kind", "-started_at"], name="run_list"),
            models.Index(fields=["owner", "workflow_key", "-started_at"], name="run_by_workflow"),
            models.Index(fields=["owner", "playbook", "-started_at"], name="run_by_playbook"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_key} {self.id}"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL

    @property
    def project_key(self) -> str:
        return self.project.project_id if self.project_id else ""


class NodeRun(models.Model):
    """One visit of a run to a node; fan-out agents are its children."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        PAUSED = "paused"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"
        SKIPPED = "skipped"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="nodes")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    seq = models.PositiveIntegerField(default=0)
    node_id = models.CharField(max_length=100)
    node_type = models.CharField(max_length=20)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    input = OrderedJSONField(default=dict, blank=True)
    output = OrderedJSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    event = models.CharField(max_length=100, blank=True)
    # Where a pausing node is in its phases (fan-out answers so far, matchups, retries).
    state = models.JSONField(default=dict, blank=True)
    # How many steps this visit has shown (it grows with each pause and re-pause): with the pk it
    # makes the step's identity, so an answer meant for one step cannot land on the next.
    step = models.PositiveIntegerField(default=0)
    # A script node: when its job was handed to a worker (null: not yet, or the send failed, so it
    # waits to be sent again), and until when the worker running it holds it. A lease that runs out
    # means the worker died mid-script.
    dispatched_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["run", "seq", "id"]
        indexes = [models.Index(fields=["node_type", "status"], name="noderun_open_scripts")]

    def __str__(self) -> str:
        return f"{self.node_id} ({self.status})"

    @property
    def step_id(self) -> str:
        return f"{self.pk}.{self.step}"


class StepShown(models.Model):
    """The step a run last showed to one viewer (an MCP session, else a token, else a signed-in
    user), and the last answer that viewer applied to the run. An answer without a stepId is
    applied only to the step its viewer was shown, and a repeat of its last answer is refused."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    viewer = models.CharField(max_length=100)
    step_id = models.CharField(max_length=40, blank=True)
    answered_step_id = models.CharField(max_length=40, blank=True)
    answer_digest = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "viewer"], name="one_step_shown_per_viewer")]

    def __str__(self) -> str:
        return f"{self.viewer} saw {self.step_id or 'nothing'} of {self.run_id}"


class Turn(models.Model):
    """One answer a host (or a person) gave a paused node: the prompt, the answer, thinking, usage."""

    node_run = models.ForeignKey(NodeRun, on_delete=models.CASCADE, related_name="turns")
    phase = models.CharField(max_length=20, blank=True)
    agent_index = models.PositiveIntegerField(null=True, blank=True)
    model = models.CharField(max_length=100, blank=True)
    prompt = models.TextField(blank=True)
    response = models.TextField(blank=True)
    thinking = models.TextField(blank=True)
    usage = models.JSONField(default=dict, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    estimated = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["node_run", "id"]

    def __str__(self) -> str:
        return f"turn {self.pk} of {self.node_run}"


class ScriptSettings(models.Model):
    """Whether script nodes may run: for the whole site (no user) or for one user. A user's own row
    overrides the site's; with no rows at all, scripts run."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                                related_name="script_settings")
    scripts_enabled = models.BooleanField(default=True)
    memory_mb = models.PositiveIntegerField("memory limit (MB)", default=512)

    class Meta:
        verbose_name = "script settings"
        verbose_name_plural = "script settings"
        # NULLs are distinct in a unique index, so the site's row (no user) is made unique as user 0.
        constraints = [models.UniqueConstraint(Coalesce("user", Value(0)), name="one_script_settings_per_user")]

    def __str__(self) -> str:
        return f"scripts for {self.user or 'the whole site'}: {'on' if self.scripts_enabled else 'off'}"
