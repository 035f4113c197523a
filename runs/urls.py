from django.urls import path

from runs import views

app_name = "runs"

# Mounted at /open/runs/, the deep link the run tools answer with (public_url()).
urlpatterns = [
    path("<str:run_id>", views.run_page, name="run"),
    path("<str:run_id>/state.json", views.run_state, name="state"),
    path("<str:run_id>/resume", views.run_resume, name="resume"),
    path("<str:run_id>/cancel", views.run_cancel, name="cancel"),
    path("<str:run_id>/rerun", views.run_rerun, name="rerun"),
]

# Mounted at /runs/: the same pages under the path older links use.
alias_urlpatterns = [
    path("", views.runs_page, name="run-list"),
    path("<str:run_id>", views.run_page),
    path("<str:run_id>/state.json", views.run_state),
    path("<str:run_id>/resume", views.run_resume),
]
