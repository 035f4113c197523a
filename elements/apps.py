from django.apps import AppConfig


class ElementsConfig(AppConfig):
    name = "elements"
    verbose_name = "Elements"
