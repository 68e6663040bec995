"""Validation of wire messages and files against the JSON Schemas in schemas/."""

from __future__ import annotations

from functools import cache
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from pipeline.core.errors import DpmError
from pipeline.wire.resources import schemas_dir
from pipeline.wire.schema_ids import SchemaId


class SchemaError(DpmError):
    """A message or file does not match its schema; the message names the first offending path."""


@cache
def validator(schema: SchemaId) -> Draft202012Validator:
    """The validator of the schema's file, e.g. `schemas/case.v1.json` for SchemaId.CASE."""
    document = orjson.loads((schemas_dir() / f"{schema.file_stem}.json").read_bytes())
    Draft202012Validator.check_schema(document)
    return Draft202012Validator(document)


def validate(schema: SchemaId, value: Any) -> None:  # noqa: ANN401 - any decoded JSON
    """Raises SchemaError with the most relevant violation when `value` does not match."""
    error = best_match(validator(schema).iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise SchemaError(f"{schema.file_stem}: at {where}: {error.message}")
