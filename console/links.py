"""The web console's deep links: the pages DollhouseMCP's open_* operations point at, and the
parameters each page reads (tab, q, type, name, level, category, source, since, refresh).

One table serves both sides: elements.console_operations builds a link with `console_url`, and the
pages in console.views read the same parameters with `since_parse` and `LOG_FILTERS`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from core.errors import InvalidInput
from elements.types import datetime_parse

# tab -> the URL name of its page; "permissions" is the approvals page.
TABS = {"portfolio": "console:portfolio", "logs": "console:logs", "metrics": "console:metrics",
        "permissions": "approvals:index", "setup": "console:connect"}
# The parameters each tab's page reads. A link leaves out the others, with a warning: it never
# promises a filter its page ignores.
TAB_PARAMS = {"portfolio": ("q", "type", "name"), "logs": ("level", "category", "source", "q", "since"),
              "metrics": ("since", "refresh"), "permissions": (), "setup": ()}
MAX_TEXT = 200
MAX_SINCE = timedelta(days=366)
MAX_REFRESH_SECONDS = 3600
_RELATIVE = re.compile(r"(\d{1,4})([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def since_parse(value: str, *, now: datetime | None = None) -> datetime:
    """`since` as the console reads it: ISO 8601, or relative to now (5m, 1h, 24h, 7d, 2w), at most a year back."""
    text = value.strip()
    relative = _RELATIVE.fullmatch(text)
    if relative is None:
        return datetime_parse(text, field="since")
    span = timedelta(**{_UNITS[relative.group(2)]: int(relative.group(1))})
    if span > MAX_SINCE:
        raise InvalidInput(f"since reaches back at most {MAX_SINCE.days} days (got {text}).", code="invalid_parameter")
    return (now or timezone.now()) - span


def console_url(tab: str, params: dict[str, str]) -> str:
    """The absolute URL of `tab`'s page with `params` (already checked) as its query string."""
    query = urlencode({key: value for key, value in params.items() if value not in ("", None)})
    return f"{settings.ATRIUM_PUBLIC_URL}{reverse(TABS[tab])}" + (f"?{query}" if query else "")
