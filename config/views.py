from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django.views.defaults import page_not_found
from kombu import Connection

# Each dependency gets this long to answer; a load balancer's own check times out soon after.
HEALTH_TIMEOUT_SECONDS = 1.5
NOT_CONFIGURED = "not configured"


def _database() -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connection.close()  # the check's own thread: its connection must not linger


def _cache() -> None:
    cache.set("healthz", "ok", timeout=10)
    if cache.get("healthz") != "ok":
        raise RuntimeError("the cache did not return what was just stored")


def _broker() -> None:
    with Connection(settings.CELERY_BROKER_URL, connect_timeout=HEALTH_TIMEOUT_SECONDS,
                    transport_options={"socket_timeout": HEALTH_TIMEOUT_SECONDS}) as broker:
        broker.ensure_connection(max_retries=1, timeout=HEALTH_TIMEOUT_SECONDS)


def _checks() -> dict[str, Callable[[], None] | None]:
    return {"database": _database, "cache": _cache, "broker": _broker if settings.CELERY_BROKER_URL else None}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """For load balancers: the database, the cache and the broker, each checked at once and given
    HEALTH_TIMEOUT_SECONDS. 200 when every configured one answers; 503 naming the ones that did not.
    The broker is "not configured" without CELERY_BROKER_URL (tasks then run in-process)."""
    checks = _checks()
    report: dict[str, str] = {}
    # Each check runs on its own thread, so one that hangs (an unreachable host) costs its timeout
    # and no more, and the others still answer.
    pool = ThreadPoolExecutor(max_workers=len(checks), thread_name_prefix="healthz")
    try:
        futures = {name: pool.submit(check) for name, check in checks.items() if check is not None}
        for name in checks:
            if name not in futures:
                report[name] = NOT_CONFIGURED
                continue
            try:
                futures[name].result(timeout=HEALTH_TIMEOUT_SECONDS)
                report[name] = "ok"
            except FutureTimeout:
                report[name] = f"error: no answer within {HEALTH_TIMEOUT_SECONDS:g} s"
            except Exception as exc:  # any driver error means "not ready"
                report[name] = f"error: {exc}"
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    failed = sorted(name for name, state in report.items() if state.startswith("error"))
    body = {"status": "error" if failed else "ok", **report}
    if failed:
        body["failed"] = failed
    return JsonResponse(body, status=503 if failed else 200)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """What answers a URL nothing routes: under /api/ the API's own {error, code} (a client of the API
    reads JSON, even for a path no endpoint has), elsewhere the site's page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "No endpoint or resource at this URL.", "code": "not_found"}, status=404)
    return page_not_found(request, exception)
