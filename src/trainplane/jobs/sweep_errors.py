"""Validation errors at a field's path, for rules that span several fields of a
sweep: raised as one pydantic ValidationError from a model's validator, so the
API's 422 names each field (``parameters.entrypoint.args.lr``) as it does for
an error pydantic found itself."""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError


def field_error(
    loc: tuple[str | int, ...], message: str, kind: str = "sweep_spec"
) -> InitErrorDetails:
    # The message is the context, not the template: it may hold braces.
    return InitErrorDetails(
        type=PydanticCustomError(kind, "{message}", {"message": message}), loc=loc, input=None
    )


def raise_errors(title: str, errors: list[InitErrorDetails]) -> None:
    if errors:
        raise ValidationError.from_exception_data(title, errors)
