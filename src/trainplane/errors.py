"""Domain errors raised by services. The API maps each class to one HTTP status
(see ``trainplane.api.problems``); nothing below the API knows about HTTP."""

from __future__ import annotations


class ServiceError(Exception):
    """Base class. ``detail`` is safe to show to the caller."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotFoundError(ServiceError):
    """The resource does not exist, or the caller may not see it."""


class ConflictError(ServiceError):
    """The request is valid but clashes with the current state."""


class InvalidTransitionError(ConflictError):
    """A job status change that the transition table does not allow."""


class StaleStateError(ConflictError):
    """Another writer changed the row between our read and our write."""


class InvalidInputError(ServiceError):
    """Input that passed schema validation but is wrong in context.

    ``field`` is the dotted path of the offending field, for the caller to fix.
    """

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.message = detail


class InvalidInputsError(InvalidInputError):
    """Several inputs wrong at once (say, two bad lines of a dataset):
    ``problems`` holds (field, message) pairs, the first as ``field``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(*problems[0])
        self.detail = "; ".join(f"{field}: {message}" for field, message in problems)
        self.problems = problems


class UnauthenticatedError(ServiceError):
    """The request carries no credential, or one that does not check out."""


class ForbiddenError(ServiceError):
    """The caller is known but its role does not allow this."""


class UpstreamError(ServiceError):
    """Something trainplane depends on (checkpoint storage, ...) failed to answer."""


class RateLimitedError(ServiceError):
    """The caller sends faster than it may; it may try again after
    ``retry_after_seconds``."""

    def __init__(self, detail: str, retry_after_seconds: int) -> None:
        super().__init__(detail)
        self.retry_after_seconds = retry_after_seconds
