from django.urls import path

from workflows import api

# Fixed routes first: "schema", "validate", "lint" and "audit" would otherwise be read as workflow ids.
urlpatterns = [
    path("", api.WorkflowListCreateView.as_view(), name="api-workflows"),
    path("schema/", api.WorkflowSchemaView.as_view(), name="api-workflows-schema"),
    path("validate/", api.WorkflowValidateView.as_view(), name="api-workflows-validate"),
    path("lint/", api.WorkflowLintView.as_view(), name="api-workflows-lint"),
    path("audit/", api.WorkflowAuditView.as_view(), name="api-workflows-audit"),
    path("<str:workflow_id>/", api.WorkflowDetailView.as_view(), name="api-workflow"),
    path("<str:workflow_id>/references/", api.WorkflowReferencesView.as_view(), name="api-workflow-references"),
    path("<str:workflow_id>/move/", api.WorkflowMoveView.as_view(), name="api-workflow-move"),
    path("<str:workflow_id>/duplicate/", api.WorkflowDuplicateView.as_view(), name="api-workflow-duplicate"),
    path("<str:workflow_id>/rename/", api.WorkflowRenameView.as_view(), name="api-workflow-rename"),
]

# Mounted at /api/projects/.
project_urlpatterns = [
    path("", api.ProjectListCreateView.as_view(), name="api-projects"),
]
