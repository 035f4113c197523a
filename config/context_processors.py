from django.conf import settings
from django.http import HttpRequest


def atrium(request: HttpRequest) -> dict[str, object]:
    return {"ATRIUM_MCP_URL": settings.ATRIUM_MCP_URL, "ATRIUM_PUBLIC_URL": settings.ATRIUM_PUBLIC_URL,
            "ATRIUM_OPEN_SIGNUP": settings.ATRIUM_OPEN_SIGNUP}
