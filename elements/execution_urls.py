from django.urls import path

from elements import execution_api

# Mounted at /api/agent-executions/.
urlpatterns = [
    path("", execution_api.ExecutionListView.as_view(), name="api-agent-executions"),
    path("<str:goal_id>/", execution_api.ExecutionDetailView.as_view(), name="api-agent-execution"),
]
