"""Errors of the workflow writer tools, with the documented codes: invalid_id, invalid_config,
integrity_error, conflict, no_repo_source, io_error (and not_found, referenced)."""

from __future__ import annotations

from core.errors import DomainError, NotFound


class DefinitionInvalid(DomainError):
    """A definition that may not be written. `errors` name the node and the rule."""

    def __init__(self, errors: list[str], *, code: str) -> None:
        kind = "schema" if code == "invalid_config" else "integrity"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"The workflow fails the {kind} check: {errors[0]}{more}", code=code,
                         extra={"details": errors})
        self.errors = errors


class InvalidConfig(DefinitionInvalid):
    def __init__(self, errors: list[str] | str) -> None:
        super().__init__([errors] if isinstance(errors, str) else errors, code="invalid_config")


class IntegrityFailure(DefinitionInvalid):
    def __init__(self, errors: list[str]) -> None:
        super().__init__(errors, code="integrity_error")


class WorkflowConflict(DomainError):
    code = "conflict"
    http_status = 409


class WorkflowNotFound(NotFound):
    code = "not_found"


class WorkflowReferenced(DomainError):
    """A delete refused because subworkflow nodes still resolve to the workflow."""

    code = "referenced"
    http_status = 409
