"""Gunicorn settings for `make run` and production: `gunicorn -c config/gunicorn.conf.py config.wsgi`.

Threads, not async workers: tool calls are short synchronous ORM work, and a threaded WSGI
worker answers them about twice as fast as Django under an ASGI server (docs/benchmarks.md).
"""

import os

bind = os.environ.get("BIND", f"127.0.0.1:{os.environ.get('PORT', '8000')}")
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", "1"))
threads = int(os.environ.get("WEB_THREADS", "8"))
# Tools return within seconds (long work is handed to workers and polled); this is a backstop.
timeout = int(os.environ.get("WEB_TIMEOUT", "120"))
graceful_timeout = 30
# Gunicorn's largest request line: the REST API's query parameters are bounded to fit in it
# (elements.api), so a request its schema allows is never answered 414.
limit_request_line = 8190
accesslog = "-" if os.environ.get("ACCESS_LOG") else None
errorlog = "-"
# Several servers may run on one machine (make run beside the tests); none needs gunicornc.
control_socket_disable = True
