from django.urls import path

from docs_kb import api

# Mounted at /api/kb/. A page's slug may hold "/".
urlpatterns = [
    path("pages/", api.PageListView.as_view(), name="api-kb-pages"),
    path("pages/<path:slug>/", api.PageDetailView.as_view(), name="api-kb-page"),
    path("search/", api.SearchView.as_view(), name="api-kb-search"),
    path("ask/", api.AskView.as_view(), name="api-kb-ask"),
]
