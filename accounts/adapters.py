from allauth.account.adapter import DefaultAccountAdapter
from django.conf import settings
from django.http import HttpRequest


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        """Teams add their members; open sign-up is an operator's choice (ATRIUM_OPEN_SIGNUP)."""
        return settings.ATRIUM_OPEN_SIGNUP
