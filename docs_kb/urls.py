from django.urls import path

from docs_kb import views

app_name = "docs"

# Mounted at /docs/. A page's slug may hold "/" (a page in a folder of docs/).
urlpatterns = [
    path("", views.docs_index, name="index"),
    path("<path:slug>", views.doc_page, name="page"),
]
