"""Validation of wire messages and files against the JSON Schemas in schemas/."""

from __future__ import annotations

from functools import cache
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from pipeline.core.errors import DpmError
from pipeline.resources import schemas_dir


class SchemaError(DpmError):
    """A message or file does not match its schema; the message names the first offending path."""


@cache
def validator(name: str) -> Draft202012Validator:
    """The validator of `schemas/<name>.json`, e.g. `case.v1`."""
    schema = orjson.loads((schemas_dir() / f"{name}.json").read_bytes())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validate(name: str, value: Any) -> None:  # noqa: ANN401 - any decoded JSON
    """Raises SchemaError with the most relevant violation when `value` does not match."""
    error = best_match(validator(name).iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise SchemaError(f"{name}: at {where}: {error.message}")
