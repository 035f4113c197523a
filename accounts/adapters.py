from allauth.account.adapter import DefaultAccountAdapter
from django.conf import settings
from django.http import HttpRequest

from accounts.ratelimit import client_address


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        """Teams add their members; open sign-up is an operator's choice (ATRIUM_OPEN_SIGNUP)."""
        return settings.ATRIUM_OPEN_SIGNUP

    def get_client_ip(self, request: HttpRequest) -> str:
        """allauth's own limits (failed logins, password-reset mail) count the address every other
        limit counts, with the same trusted proxies."""
        return client_address(request)
