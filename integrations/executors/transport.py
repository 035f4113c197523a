"""Outgoing HTTP for actions: which hosts a request may reach, one request with its time and size
bounds, and a caller's credentials applied the way the integration's auth scheme says.

Every executor that talks to the network sends through `send`, so the bounds hold everywhere:
- Only hosts on the request's allowlist are reached, and a redirect is followed only to a host on
  it: each hop is checked before it is sent. http_tools and webhook_tools use
  settings.ATRIUM_HTTP_ALLOWED_HOSTS; an imported OpenAPI integration may reach its own base URL's
  host and nothing else. The allowlist is the whole control: names are not resolved and checked
  against private address ranges, so an operator allows only hosts they mean users to reach.
- The response body is read up to a cap and the rest is left unread (`truncated` says so); the
  whole exchange, redirects included, has one deadline of settings.ATRIUM_HTTP_TIMEOUT_SECONDS.
- The process's environment (proxy variables, ~/.netrc, certificate overrides) never shapes a
  request: a .netrc entry would otherwise add the server's own credentials to a user's request.

An allowlist entry is a host name (`api.example.com`), `*.example.com` for every subdomain of
example.com (not example.com itself), or either with a port (`127.0.0.1:8080`, `[::1]:8443`). An
entry without a port allows the scheme's default port only (80 for http, 443 for https).
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from integrations.executors import ActionFailed

MAX_RESPONSE_BYTES = 1024 * 1024
MAX_REDIRECTS = 5
DEFAULT_PORTS = {"http": 80, "https": 443}
USER_AGENT = "Atrium"

# Response headers an action's output carries: what a caller can act on (type, caching, paging,
# rate limits, where a resource went). Never Set-Cookie: a session cookie is not the model's to see.
SELECTED_HEADERS = frozenset({
    "content-type", "content-length", "content-language", "content-disposition", "location", "etag",
    "last-modified", "cache-control", "expires", "date", "retry-after", "link", "www-authenticate",
    "x-request-id", "x-github-request-id",
})
SELECTED_HEADER_PREFIXES = ("x-ratelimit-", "ratelimit")

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")  # RFC 9110 token: a header field name
_HEADER_VALUE = re.compile(r"^[\t\x20-\x7e]{0,8192}$")  # printable ASCII: no CR, LF or other controls
_CHARSET = re.compile(r";\s*charset=\"?([A-Za-z0-9._:-]+)", re.IGNORECASE)


@dataclass(frozen=True)
class _Rule:
    host: str  # ASCII (IDNA) and lower-case
    subdomains: bool
    port: int | None


def _ascii_host(host: str) -> str:
    """The host as it goes on the wire: IDNA-encoded, lower-case, without a trailing dot."""
    return httpx.URL(f"http://{host}/").raw_host.decode("ascii").lower().rstrip(".")


def _rule(entry: str) -> _Rule:
    text = entry.strip().lower()
    host, port = text, ""
    if text.startswith("["):
        close = text.find("]")
        host, port = text[: close + 1], text[close + 1:].removeprefix(":")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    subdomains = host.startswith("*.")
    host = host.removeprefix("*.")
    try:
        if not host or (port and not port.isdigit()) or "*" in host or "/" in host:
            raise ValueError(host)
        return _Rule(host=_ascii_host(host), subdomains=subdomains, port=int(port) if port else None)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ImproperlyConfigured(f"ATRIUM_HTTP_ALLOWED_HOSTS entry {entry!r} is not a host name, *.domain or "
                                   "either with :port.") from exc


@dataclass(frozen=True)
class Allowlist:
    """The hosts one request may reach, and where that list comes from (named when it refuses one)."""

    entries: tuple[str, ...]
    source: str

    def allows(self, url: httpx.URL) -> bool:
        host = url.raw_host.decode("ascii").lower().rstrip(".")
        port = url.port or DEFAULT_PORTS.get(url.scheme)
        for rule in map(_rule, self.entries):
            if rule.port is None and port != DEFAULT_PORTS.get(url.scheme):
                continue
            if rule.port is not None and port != rule.port:
                continue
            if host == rule.host if not rule.subdomains else host.endswith("." + rule.host):
                return True
        return False

    def check(self, url: httpx.URL, *, redirected: bool = False) -> None:
        check_scheme(url)
        if not self.allows(url):
            where = url.netloc.decode("ascii")
            verb = "redirected to" if redirected else "may not reach"
            raise ActionFailed(f"The request {verb} {where}, which is not in {self.source}.",
                               code="host_not_allowed")


def settings_allowlist() -> Allowlist:
    """The operator's list for requests to URLs a caller chooses."""
    entries = tuple(settings.ATRIUM_HTTP_ALLOWED_HOSTS)
    source = "ATRIUM_HTTP_ALLOWED_HOSTS" if entries else "ATRIUM_HTTP_ALLOWED_HOSTS (empty: no host may be reached)"
    return Allowlist(entries=entries, source=source)


def origin_allowlist(base_url: str, *, owner: str) -> Allowlist:
    """Only the host (and port) of `base_url`: an operator imported it, so it needs no other listing."""
    url = parse_url(base_url)
    host = url.raw_host.decode("ascii")
    bracketed = f"[{host}]" if ":" in host else host
    return Allowlist(entries=(f"{bracketed}:{url.port or DEFAULT_PORTS[url.scheme]}",),
                     source=f"the hosts {owner} may reach (its base URL's)")


def check_scheme(url: httpx.URL) -> None:
    if url.scheme not in DEFAULT_PORTS:
        raise ActionFailed(f"Only http and https URLs may be requested, not {url.scheme or 'a relative URL'}.",
                           code="scheme_not_allowed")


def parse_url(text: str) -> httpx.URL:
    """An absolute http(s) URL, or ActionFailed saying what is wrong with it."""
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ActionFailed(f"Not a URL: {exc}.", code="invalid_url") from exc
    check_scheme(url)
    if not url.host:
        raise ActionFailed("The URL has no host.", code="invalid_url")
    if url.userinfo:
        # A user name and password in the URL would be sent as Basic credentials, past the rule
        # that the vault's credentials replace a caller's own Authorization.
        raise ActionFailed("The URL may not contain a user name or password: use headers or a connection.",
                           code="invalid_url")
    return url


def check_headers(headers: Mapping[str, str], *, what: str = "Header") -> dict[str, str]:
    """Headers as given, or ActionFailed naming one that could not be sent as it is (a line break in a
    value would start another header)."""
    for name, value in headers.items():
        if not _TOKEN.match(name):
            raise ActionFailed(f"{what} name {name!r} is not a valid HTTP header name.", code="invalid_input")
        if not isinstance(value, str) or not _HEADER_VALUE.match(value):
            raise ActionFailed(f"{what} {name} has a value with a line break or control character, or is too long.",
                               code="invalid_input")
    return dict(headers)


@dataclass
class Authorization:
    """What credentials add to a request: headers and query parameters."""

    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.headers or self.query)

    def apply(self, headers: Mapping[str, str],
              query: Sequence[tuple[str, str]]) -> tuple[dict[str, str], list[tuple[str, str]]]:
        """`headers` and `query` with the credentials in them, replacing any of the caller's own of the
        same name (a caller's Authorization stays only when no credentials apply)."""
        replaced = {name.lower() for name in self.headers}
        merged = {name: value for name, value in headers.items() if name.lower() not in replaced}
        merged.update(self.headers)
        params = [(name, value) for name, value in query if name not in self.query]
        params.extend(self.query.items())
        return merged, params


def param_text(value: Any) -> str:
    """A JSON scalar as a query, path or header parameter spells it (true, 3, 2.5, text)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _credential(credentials: Mapping[str, Any], key: str, scheme: str) -> str:
    value = credentials.get(key)
    if not isinstance(value, str) or not value:
        raise ActionFailed(f"The {scheme} connection holds no {key}: connect the integration again.",
                           code="invalid_credentials")
    return value


def authorize(*, scheme: str, config: Mapping[str, Any], credentials: Mapping[str, Any]) -> Authorization:
    """The caller's credentials as the scheme applies them; nothing when there are none.

    api_key {apiKey} goes where config {in: header|query|cookie, name} says; basic {username,
    password} and bearer {token} go in Authorization, as does oauth2 {accessToken, tokenType}.
    """
    if not credentials or scheme == "none":
        return Authorization()
    if scheme == "api_key":
        key = _credential(credentials, "apiKey", scheme)
        name, where = config.get("name"), config.get("in", "header")
        if not isinstance(name, str) or not name:
            raise ActionFailed("The integration's api_key scheme names no header or parameter.",
                               code="not_configured")
        if where == "query":
            return Authorization(query={name: key})
        if where == "cookie":
            return Authorization(headers=check_headers({"Cookie": f"{name}={key}"}, what="Credential"))
        return Authorization(headers=check_headers({name: key}, what="Credential"))
    if scheme == "basic":
        pair = f"{_credential(credentials, 'username', scheme)}:{credentials.get('password') or ''}"
        return Authorization(headers={"Authorization": "Basic " + base64.b64encode(pair.encode()).decode("ascii")})
    if scheme == "bearer":
        value = f"Bearer {_credential(credentials, 'token', scheme)}"
    elif scheme == "oauth2":
        kind = credentials.get("tokenType") or "Bearer"
        # Providers answer token_type "bearer"; the header's scheme is conventionally "Bearer".
        kind = "Bearer" if str(kind).lower() == "bearer" else str(kind)
        value = f"{kind} {_credential(credentials, 'accessToken', scheme)}"
    else:
        raise ActionFailed(f"Unknown auth scheme {scheme}.", code="not_configured")
    return Authorization(headers=check_headers({"Authorization": value}, what="Credential"))


@dataclass(frozen=True)
class Reply:
    status: int
    headers: httpx.Headers
    content: bytes
    truncated: bool
    url: str  # after redirects

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def is_json(self) -> bool:
        media = self.headers.get("content-type", "").split(";")[0].strip().lower()
        return media == "application/json" or media.endswith("+json")

    def text(self) -> str:
        found = _CHARSET.search(self.headers.get("content-type", ""))
        charset = found[1] if found else "utf-8"
        try:
            return self.content.decode(charset, errors="replace")
        except LookupError:
            return self.content.decode("utf-8", errors="replace")

    def body(self) -> Any:
        """The parsed JSON of a whole JSON response, else the text (a truncated JSON body is text)."""
        if self.is_json and not self.truncated and self.content:
            try:
                return json.loads(self.content)
            except ValueError:
                pass
        return self.text()

    def selected_headers(self) -> dict[str, str]:
        return {name: value for name, value in ((n.lower(), v) for n, v in self.headers.items())
                if name in SELECTED_HEADERS or name.startswith(SELECTED_HEADER_PREFIXES)}


def read_capped(response: httpx.Response, *, max_bytes: int, deadline: float) -> tuple[bytes, bool]:
    """Up to `max_bytes` of the body, and whether there was more; ActionFailed past the deadline."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        if time.monotonic() > deadline:
            raise ActionFailed(f"The response took longer than {settings.ATRIUM_HTTP_TIMEOUT_SECONDS:g} seconds.",
                               code="request_failed")
        if size + len(chunk) > max_bytes:
            chunks.append(chunk[: max_bytes - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def send(*, method: str, url: str | httpx.URL, allowlist: Allowlist, headers: Mapping[str, str] | None = None,
         query: Iterable[tuple[str, str]] = (), content: bytes | None = None,
         max_bytes: int = MAX_RESPONSE_BYTES) -> Reply:
    """One request (and the redirects it is answered with, each checked against `allowlist`).

    Any status is a Reply; ActionFailed only for a refused host or scheme (host_not_allowed,
    scheme_not_allowed) and for a request that got no answer (request_failed).
    """
    target = parse_url(str(url))
    extra = list(query)
    if extra:
        try:
            target = target.copy_with(params=httpx.QueryParams(target.params.multi_items() + extra))
        except httpx.InvalidURL as exc:  # e.g. a query past httpx's 64 KB limit on a URL component
            raise ActionFailed(f"The request URL cannot be built: {exc}.", code="invalid_url") from None
    timeout = settings.ATRIUM_HTTP_TIMEOUT_SECONDS
    deadline = time.monotonic() + timeout
    outgoing = check_headers({"User-Agent": USER_AGENT, **(headers or {})})
    # Always uncompressed: a body is decoded one network chunk at a time, and a few kilobytes of
    # gzip can inflate to far more than the cap before the cap is looked at.
    outgoing = {name: value for name, value in outgoing.items() if name.lower() != "accept-encoding"}
    outgoing["Accept-Encoding"] = "identity"
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
            request = client.build_request(method, target, headers=outgoing, content=content)
            for hop in range(MAX_REDIRECTS + 1):
                allowlist.check(request.url, redirected=hop > 0)
                if time.monotonic() > deadline:
                    raise ActionFailed(f"No answer from {target.host} within {timeout:g} seconds.",
                                       code="request_failed")
                response = client.send(request, stream=True)
                try:
                    if response.next_request is None:
                        body, truncated = read_capped(response, max_bytes=max_bytes, deadline=deadline)
                        return Reply(status=response.status_code, headers=response.headers, content=body,
                                     truncated=truncated, url=str(request.url))
                    # httpx builds the next hop as a browser would (303 becomes GET, Authorization
                    # is dropped when the origin changes); the loop checks where it goes.
                    request = response.next_request
                finally:
                    response.close()
            raise ActionFailed(f"More than {MAX_REDIRECTS} redirects.", code="request_failed")
    except httpx.TimeoutException as exc:
        raise ActionFailed(f"No answer from {target.host} within {timeout:g} seconds.", code="request_failed") from exc
    except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
        raise ActionFailed(f"The request to {target.host} failed: {exc or type(exc).__name__}.",
                           code="request_failed") from exc
