"""Gunicorn settings for `make run` and production: `gunicorn -c config/gunicorn.conf.py config.wsgi`.

Threads, not async workers: tool calls are short synchronous ORM work, and a threaded WSGI
worker answers them about twice as fast as Django under an ASGI server (docs/benchmarks.md).
"""

import os

bind = os.environ.get("BIND", f"127.0.0.1:{os.environ.get('PORT', '8000')}")
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", "1"))
# Four threads: a call waiting on something slow (a script, up to ATRIUM_SCRIPT_WAIT_SECONDS) holds
# one, and the rest go on. More threads than that only contend for the interpreter lock: on 2
# cores, 8 threads answered 8 clients' reads 6 to 16% slower than 4 (docs/benchmarks.md).
threads = int(os.environ.get("WEB_THREADS", "4"))
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
