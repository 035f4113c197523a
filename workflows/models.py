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
