from django.urls import path

from integrations import api

# Mounted at /api/.
urlpatterns = [
    path("capabilities/search/", api.SearchView.as_view(), name="api-capabilities-search"),
    path("capabilities/details/", api.DetailsView.as_view(), name="api-capabilities-details"),
    path("capabilities/execute/", api.ExecuteView.as_view(), name="api-capabilities-execute"),
    path("capabilities/executions/", api.ExecutionListView.as_view(), name="api-capability-executions"),
    path("capabilities/executions/<str:item_id>/", api.ExecutionDetailView.as_view(), name="api-capability-execution"),
    path("capabilities/skills/", api.SkillListView.as_view(), name="api-skills"),
    path("capabilities/skills/<str:item_id>/", api.SkillDetailView.as_view(), name="api-skill"),
    path("integrations/", api.IntegrationListView.as_view(), name="api-integrations"),
    path("vault/", api.VaultStatusView.as_view(), name="api-vault"),
    path("vault/connect/", api.VaultConnectView.as_view(), name="api-vault-connect"),
    path("vault/disconnect/", api.VaultDisconnectView.as_view(), name="api-vault-disconnect"),
]
