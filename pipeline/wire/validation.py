"""Validation of wire messages and files against the JSON Schemas in schemas/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import orjson
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError, best_match

from pipeline.core.errors import DpmError
from pipeline.wire.resources import schemas_dir
from pipeline.wire.schema_ids import SchemaId


class SchemaError(DpmError):
    """A message or file does not match its schema; the message names the first offending path."""


@cache
def _ecma_regex(pattern: str) -> re.Pattern[str]:
    """`pattern` with ECMA-262's `$` (the end of the input) where Python's `$` also matches before a final newline."""
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))


def _pattern(_validator: Any, pattern: str, instance: Any, _schema: Any) -> Iterator[ValidationError]:  # noqa: ANN401 - jsonschema's keyword signature
    """The `pattern` keyword as JSON Schema defines it: `^[a-z]+$` does not admit a trailing newline."""
    if isinstance(instance, str) and not _ecma_regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


# Draft 2020-12, with `pattern` read as ECMA-262 regular expressions read it (jsonschema uses re.search).
_Validator = validators.extend(Draft202012Validator, {"pattern": _pattern})  # type: ignore[no-untyped-call]


@cache
def validator(schema: SchemaId) -> Draft202012Validator:
    """The validator of the schema's file, e.g. `schemas/case.v1.json` for SchemaId.CASE."""
    document = orjson.loads((schemas_dir() / f"{schema.file_stem}.json").read_bytes())
    Draft202012Validator.check_schema(document)
    return _Validator(document)  # type: ignore[no-any-return]


# An error names the offending path and what was wrong, never more than this of the offending value.
_MAX_SHOWN = 80
_MAX_MESSAGE = 500


def validate(schema: SchemaId, value: Any) -> None:  # noqa: ANN401 - any decoded JSON
    """Raises SchemaError with the most relevant violation when `value` does not match."""
    error = best_match(validator(schema).iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)[:_MAX_SHOWN] or "(root)"
        raise SchemaError(f"{schema.file_stem}: at {where}: {_message(error)}")


def _message(error: ValidationError) -> str:
    """The violation in words, the offending value described rather than repeated when it is long.

    jsonschema's messages quote the instance: a 5 MB value would make a 5 MB error line.
    """
    text = error.message
    shown = repr(error.instance)
    if len(shown) > _MAX_SHOWN:
        text = text.replace(shown, _described(error.instance))
    return text if len(text) <= _MAX_MESSAGE else f"{text[:_MAX_MESSAGE]}..."


def _described(instance: object) -> str:
    if isinstance(instance, str):
        return f"a string of {len(instance):,} characters"
    if isinstance(instance, list):
        return f"an array of {len(instance):,} items"
    if isinstance(instance, dict):
        return f"an object of {len(instance):,} fields"
    return f"a long {type(instance).__name__}"
