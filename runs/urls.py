from django.urls import path

from runs import views

app_name = "runs"

# Mounted at /runs/; public_url() links to the first of these.
urlpatterns = [
    path("<str:run_id>", views.run_page, name="run"),
    path("<str:run_id>/state.json", views.run_state, name="state"),
    path("<str:run_id>/resume", views.run_resume, name="resume"),
]
