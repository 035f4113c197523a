"""The Celery app. Workers run scripts, triggers and maintenance; the web process never does."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("atrium")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
