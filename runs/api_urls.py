from django.urls import path

from runs import api

# Mounted at /api/runs/. "test/" first: it would otherwise be read as a run id.
urlpatterns = [
    path("", api.RunListStartView.as_view(), name="api-runs"),
    path("test/", api.RunTestView.as_view(), name="api-runs-test"),
    path("<str:run_id>/", api.RunStatusView.as_view(), name="api-run"),
    path("<str:run_id>/history/", api.RunHistoryView.as_view(), name="api-run-history"),
    path("<str:run_id>/advance/", api.RunAdvanceView.as_view(), name="api-run-advance"),
    path("<str:run_id>/resume/", api.RunResumeView.as_view(), name="api-run-resume"),
    path("<str:run_id>/consensus/", api.RunConsensusView.as_view(), name="api-run-consensus"),
    path("<str:run_id>/round-robin/", api.RunRoundRobinView.as_view(), name="api-run-round-robin"),
    path("<str:run_id>/map/", api.RunMapView.as_view(), name="api-run-map"),
    path("<str:run_id>/cancel/", api.RunCancelView.as_view(), name="api-run-cancel"),
]
