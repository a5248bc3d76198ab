"""Domain errors of the labels party; only ``api.errors`` maps them to HTTP status codes.

Messages never contain a label value: they name the field (and the example id or line).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.errors import LabelDPError


@dataclass(frozen=True, kw_only=True)
class FieldError:
    """One problem with one input field (``field`` like ``labels[3].value`` or ``line 7``)."""

    field: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


class ServiceError(LabelDPError):
    """Base of the service's domain errors; carries per-field details."""

    def __init__(self, detail: str, errors: list[FieldError] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors or []


class BadInputError(ServiceError):
    """The request content is invalid (nothing was stored)."""


class NotFoundError(ServiceError):
    """An unknown dataset or release."""


class ConflictError(ServiceError):
    """The request contradicts stored state (exists already, released, different label)."""


class PayloadTooLargeError(ServiceError):
    """The body exceeds the configured limit."""


class UnsupportedMediaTypeError(ServiceError):
    """A Content-Type the endpoint does not accept."""


class NotAcceptableError(ServiceError):
    """No representation matches the Accept header."""


class ServiceUnavailableError(ServiceError):
    """The database stayed locked for too long."""
