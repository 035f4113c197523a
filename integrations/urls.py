from django.urls import path

from integrations import views

app_name = "vault"

# Mounted at /vault/: the connect links `vault connect` answers with, and the OAuth redirect URI
# every provider is registered with.
urlpatterns = [
    path("connect/<str:token>/", views.connect_page, name="connect"),
    path("connect/<str:token>/authorize/", views.connect_authorize, name="authorize"),
    path("oauth/callback/", views.oauth_callback, name="oauth-callback"),
]
