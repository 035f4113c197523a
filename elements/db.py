"""SQL a migration runs on one database vendor only (indexes the ORM cannot declare)."""

from collections.abc import Callable
from typing import Any


def vendor_sql(vendor: str, statements: list[str]) -> Callable[[Any, Any], None]:
    """A RunPython function that executes `statements` when the database is `vendor`."""

    def apply(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == vendor:
            for statement in statements:
                schema_editor.execute(statement)

    return apply
