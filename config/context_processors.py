from django.conf import settings
from django.http import HttpRequest


def atrium(request: HttpRequest) -> dict[str, str]:
    return {"ATRIUM_MCP_URL": settings.ATRIUM_MCP_URL, "ATRIUM_PUBLIC_URL": settings.ATRIUM_PUBLIC_URL}
