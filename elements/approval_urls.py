from django.urls import path

from elements import views

app_name = "approvals"

# Mounted at /approvals/: where an agent's owner reads danger-zone codes and decides CLI requests.
urlpatterns = [
    path("", views.approvals_page, name="index"),
    path("cli/<str:request_id>", views.cli_decide, name="decide"),
    path("challenges/<uuid:challenge_id>", views.challenge_page, name="challenge"),
    path("challenges/<uuid:challenge_id>/renew", views.challenge_renew, name="renew"),
]
