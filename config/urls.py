from allauth.account import views as allauth_views
from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from mcp_server import mcp_server
from oauth2_provider import views as oauth2_views

from accounts import oauth
from accounts.ratelimit import refuse_blocked_address
from config import views
from console import views as console_views
from core.http import mcp_route
from elements.discrete import discrete_mcp_server
from runs.urls import alias_urlpatterns as run_alias_urlpatterns
from workflows import hooks as workflow_hooks
from workflows.urls import project_urlpatterns

handler404 = views.not_found

admin.site.site_header = "Atrium administration"
admin.site.site_title = "Atrium admin"
admin.site.index_title = "Curate Atrium"

urlpatterns = [
    path("", console_views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("mcp", mcp_route("/mcp", mcp_server), name="mcp"),
    path("mcp/discrete", mcp_route("/mcp/discrete", discrete_mcp_server), name="mcp-discrete"),
    path("hooks/playbooks/<str:token>", workflow_hooks.playbook_webhook, name="playbook-webhook"),
    # The sign-in forms, ahead of the includes that also route them, so an address with too many
    # failed authentications is refused before any password is checked.
    path("admin/login/", refuse_blocked_address(admin.site.login)),
    path("accounts/login/", refuse_blocked_address(allauth_views.login)),
    path("admin/", admin.site.urls),
    path("open/runs/", include("runs.urls")),
    path("runs/", include(run_alias_urlpatterns)),
    path("docs/", include("docs_kb.urls")),
    path("vault/", include("integrations.urls")),
    path("approvals/", include("elements.approval_urls")),
    path("", include("console.urls")),
    path("accounts/", include("allauth.urls")),
    path("api/", include("accounts.urls")),
    path("api/agent-executions/", include("elements.execution_urls")),
    path("api/elements/", include("elements.urls")),
    path("api/workflows/", include("workflows.urls")),
    path("api/projects/", include(project_urlpatterns)),
    path("api/runs/", include("runs.api_urls")),
    path("api/kb/", include("docs_kb.api_urls")),
    path("api/", include("integrations.api_urls")),
    path("api/", include("workflows.playbook_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    # OAuth 2.1 authorization server. Only the endpoints MCP clients use are mounted: no
    # implicit/password grants, no device flow, no application self-service pages.
    path(
        "oauth/",
        include(
            (
                [
                    path("authorize/", oauth.AuthorizationView.as_view(), name="authorize"),
                    path("token/", oauth.TokenView.as_view(), name="token"),
                    path("revoke/", oauth2_views.RevokeTokenView.as_view(), name="revoke-token"),
                    path("register/", oauth.RegistrationView.as_view(), name="dcr-register"),
                    path(
                        "register/<str:client_id>/",
                        oauth.RegistrationManagementView.as_view(),
                        name="dcr-register-management",
                    ),
                ],
                "oauth2_provider",
            )
        ),
    ),
    path(
        ".well-known/oauth-authorization-server",
        oauth2_views.OAuthServerMetadataView.as_view(),
        name="oauth-server-metadata",
    ),
    path(
        ".well-known/oauth-protected-resource",
        oauth2_views.OAuthProtectedResourceMetadataView.as_view(),
        name="oauth-resource-metadata",
    ),
    path(
        ".well-known/oauth-protected-resource/mcp",
        oauth2_views.OAuthProtectedResourceMetadataView.as_view(),
        name="oauth-resource-metadata-mcp",
    ),
]
