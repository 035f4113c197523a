"""The built-in part of the catalogue: the integrations Atrium's own code implements, declared by
their executor modules, and the OpenAPI documents shipped in integrations/openapi/."""

from __future__ import annotations

import importlib
from pathlib import Path

from integrations.executors import IntegrationSpec

BUILTIN_MODULES = (
    "integrations.executors.http",
    "integrations.executors.webhook",
    "integrations.executors.email",
    "integrations.executors.atrium",
)
SHIPPED_DOCUMENTS = Path(__file__).resolve().parent / "openapi"


def builtin_specs() -> list[IntegrationSpec]:
    """Every built-in integration, importing its module (which registers its executors)."""
    return [importlib.import_module(module).INTEGRATION for module in BUILTIN_MODULES]


def shipped_documents() -> list[Path]:
    return sorted(p for p in SHIPPED_DOCUMENTS.glob("*.y*ml")) if SHIPPED_DOCUMENTS.is_dir() else []
