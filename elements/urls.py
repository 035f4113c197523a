from django.urls import path

from elements import api

# Fixed routes first: "search", "import", "memory" and "template" are not element types.
urlpatterns = [
    path("search/", api.ElementSearchView.as_view(), name="api-elements-search"),
    path("import/", api.ElementImportView.as_view(), name="api-elements-import"),
    path("memory/<str:name>/entries/", api.MemoryEntriesView.as_view(), name="api-memory-entries"),
    path("template/<str:name>/render/", api.TemplateRenderView.as_view(), name="api-template-render"),
    path("<str:element_type>/", api.ElementListCreateView.as_view(), name="api-elements"),
    path("<str:element_type>/<str:name>/", api.ElementDetailView.as_view(), name="api-element"),
    path("<str:element_type>/<str:name>/export/", api.ElementExportView.as_view(), name="api-element-export"),
]
