from django.urls import path

from console import views

app_name = "console"

# The pages the deep links of console.links land on.
urlpatterns = [
    path("portfolio/", views.portfolio, name="portfolio"),
    path("portfolio/edit", views.element_edit, name="element-edit"),
    path("portfolio/restore", views.element_restore, name="element-restore"),
    path("portfolio/export", views.portfolio_export, name="portfolio-export"),
    path("portfolio/import", views.portfolio_import, name="portfolio-import"),
    path("logs/", views.logs, name="logs"),
    path("metrics/", views.metrics, name="metrics"),
    path("connect/", views.connect, name="connect"),
    path("integrations/", views.integrations, name="integrations"),
    path("integrations/<str:integration_id>/connect", views.integration_connect, name="integration-connect"),
    path("integrations/<str:integration_id>/disconnect", views.integration_disconnect,
         name="integration-disconnect"),
    path("playbooks/", views.playbooks, name="playbooks"),
    path("playbooks/templates/", views.playbook_templates, name="playbook-templates"),
    path("playbooks/templates/<str:template_id>/instantiate", views.template_instantiate,
         name="template-instantiate"),
    path("playbooks/<str:playbook_id>/", views.playbook, name="playbook"),
    path("playbooks/<str:playbook_id>/triggers", views.playbook_triggers, name="playbook-triggers"),
    path("playbooks/<str:playbook_id>/triggers/<str:trigger_id>/rotate", views.playbook_webhook_rotate,
         name="playbook-webhook-rotate"),
    path("playbooks/<str:playbook_id>/execute", views.playbook_execute, name="playbook-execute"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke", views.token_revoke, name="token-revoke"),
]
