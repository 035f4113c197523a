from django.apps import AppConfig


class DocsKbConfig(AppConfig):
    name = "docs_kb"
    verbose_name = "Docs knowledge base"
