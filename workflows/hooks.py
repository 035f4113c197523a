"""The inbound webhook of a playbook's webhook trigger: POST /hooks/playbooks/<token>.

No session, no CSRF token: a delivery proves itself by its signature (workflows.triggers.webhook_receive).
"""

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from workflows import triggers


@csrf_exempt
@require_POST
def playbook_webhook(request: HttpRequest, token: str) -> JsonResponse:
    # One byte past the limit is enough to know the body is too large; the rest is never read.
    body = request.read(settings.ATRIUM_WEBHOOK_MAX_BYTES + 1)
    try:
        fired = triggers.webhook_receive(token=token, timestamp=request.headers.get("X-Atrium-Timestamp"),
                                         signature=request.headers.get("X-Atrium-Signature"), body=body)
    except triggers.WebhookRefused as exc:
        return JsonResponse({"error": exc.message, "code": exc.code, **exc.extra}, status=exc.http_status)
    return JsonResponse({"executionId": fired.run.pk, "firingId": fired.firing.pk, "status": fired.run.status},
                        status=202)
