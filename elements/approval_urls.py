from django.urls import path

from elements import views

app_name = "approvals"

# Mounted at /approvals/: where an agent's owner reads danger-zone codes and decides CLI requests.
urlpatterns = [
    path("", views.approvals_page, name="index"),
    path("challenges/<uuid:challenge_id>", views.challenge_page, name="challenge"),
]
