from django.urls import path

from workflows import playbook_api as api

urlpatterns = [
    path("playbooks/", api.PlaybookListView.as_view(), name="api-playbooks"),
    path("playbooks/generate/", api.GenerateView.as_view(), name="api-playbook-generate"),
    path("playbooks/<str:playbook_id>/", api.PlaybookDetailView.as_view(), name="api-playbook"),
    path("playbooks/<str:playbook_id>/execute/", api.ExecuteView.as_view(), name="api-playbook-execute"),
    path("playbooks/<str:playbook_id>/history/", api.HistoryView.as_view(), name="api-playbook-history"),
    path("playbooks/<str:playbook_id>/firings/", api.FiringListView.as_view(), name="api-playbook-firings"),
    path("playbooks/<str:playbook_id>/triggers/", api.TriggerListView.as_view(), name="api-playbook-triggers"),
    path("playbooks/<str:playbook_id>/triggers/activate/", api.ActivateView.as_view(),
         name="api-playbook-triggers-activate"),
    path("playbooks/<str:playbook_id>/triggers/<str:trigger_id>/", api.TriggerDetailView.as_view(),
         name="api-playbook-trigger"),
    path("playbooks/<str:playbook_id>/triggers/<str:trigger_id>/rotate-secret/", api.TriggerSecretView.as_view(),
         name="api-playbook-trigger-rotate"),
    path("playbook-templates/", api.TemplateListView.as_view(), name="api-playbook-templates"),
    path("playbook-templates/<str:template_id>/", api.TemplateDetailView.as_view(), name="api-playbook-template"),
    path("playbook-templates/<str:template_id>/instantiate/", api.InstantiateView.as_view(),
         name="api-playbook-template-instantiate"),
    path("executions/", api.ExecutionListView.as_view(), name="api-executions"),
    path("executions/<str:execution_id>/", api.ExecutionDetailView.as_view(), name="api-execution"),
    path("executions/<str:execution_id>/messages/", api.ExecutionMessagesView.as_view(),
         name="api-execution-messages"),
    path("dashboard/", api.DashboardView.as_view(), name="api-dashboard"),
]
