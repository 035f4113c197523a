from django.urls import path

from accounts import api

urlpatterns = [
    path("me", api.MeView.as_view(), name="api-me"),
    path("tokens", api.TokenListCreateView.as_view(), name="api-tokens"),
    path("tokens/<str:token_id>", api.TokenDetailView.as_view(), name="api-token"),
    path("scopes", api.ScopeListView.as_view(), name="api-scopes"),
]
