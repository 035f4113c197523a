"""Print how many SQL statements one MCP tools/call runs, after warm-up, for the user `bench`.

Run by bench/mcp_roundtrip.py against its database; set DATABASE_URL and SECRET_KEY to run it alone.
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from accounts.models import User  # noqa: E402
from accounts.services import token_create  # noqa: E402
from core.caller import Caller  # noqa: E402

user = User.objects.get(username="bench")
_, raw = token_create(caller=Caller.trusted(user, via="command"), user=user, label="sql count")
client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {raw}",
                HTTP_ACCEPT="application/json, text/event-stream")


def post(body: dict, **headers: str):
    return client.post("/mcp", json.dumps(body), content_type="application/json", **headers)


init = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
session = {"HTTP_MCP_SESSION_ID": init.headers["Mcp-Session-Id"]}
call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "auth_status", "arguments": {}}}
post(call, **session)
with CaptureQueriesContext(connection) as queries:
    post(call, **session)
print(len(queries.captured_queries))
