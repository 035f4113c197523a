"""Domain errors. Each carries a stable code; every adapter maps them to its own envelope."""

from typing import Any


class DomainError(Exception):
    code = "error"
    http_status = 400

    def __init__(self, message: str, *, code: str | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        # Fields an envelope adds beside {error, code}, e.g. the cwd a scope error is about.
        self.extra: dict[str, Any] = extra or {}


class InvalidInput(DomainError):
    code = "invalid_input"


class NotFound(DomainError):
    code = "not_found"
    http_status = 404


class Forbidden(DomainError):
    code = "forbidden"
    http_status = 403


class RefusalWithRecord(InvalidInput):
    """A refusal whose writes stand. An adapter that runs a call in one transaction rolls back on
    any other error; this one is committed first, because what the call recorded on its way to
    refusing is the point (a wrong verification code, counted against further guesses)."""

    code = "refused"
