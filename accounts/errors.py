"""Domain errors. Each carries a stable code; every adapter maps them to its own envelope."""


class DomainError(Exception):
    code = "error"
    http_status = 400

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidInput(DomainError):
    code = "invalid_input"


class NotFound(DomainError):
    code = "not_found"
    http_status = 404


class Forbidden(DomainError):
    code = "forbidden"
    http_status = 403
