"""Schema evolution: released schemas stay as they were, and each new version keeps its subject's rule.

`schemas/compatibility.json` names, per subject (`event`, `trigger`, ...), the compatibility rule a
Confluent-compatible Schema Registry would apply, and the canonical SHA-256 of every schema version
a release has shipped. A check (`dpm schemas check`) reports, one line each: a released version
edited in place or deleted; a file that is not `<subject>.v<N>.json` with a matching `$id`, or not a
valid Draft 2020-12 schema; versions with a gap; a subject without a rule; a new version that breaks
its subject's rule against the versions before it.

The rules, in a registry's words: BACKWARD, a reader of the new version reads records written with
the old one; FORWARD, a reader of the old version reads records written with the new one; FULL,
both; `_TRANSITIVE`, against every earlier version rather than the latest only. The subset proofs
are jsoncompat's (deserializer role: BACKWARD; serializer role: FORWARD), the writing version closed
to undeclared fields (the product's writers emit declared fields only), the reading one open (its
readers ignore fields they do not know). The `schema` field that names each record's version is
left out of the comparison: readers dispatch on it by design.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jsoncompat
import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as InvalidSchemaError

from pipeline.wire.resources import schemas_dir

MANIFEST = "compatibility.json"
RULES = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE")
_FILE = re.compile(r"^(?P<subject>[a-z][a-z_]*)\.v(?P<version>[1-9][0-9]*)\.json$")
# jsoncompat's roles: the direction each registry rule asks for.
_ROLES: dict[str, tuple[Literal["deserializer", "serializer"], ...]] = {
    "BACKWARD": ("deserializer",), "FORWARD": ("serializer",), "FULL": ("deserializer", "serializer")}  # fmt: skip
_DIRECTION = {"deserializer": "records of {old} are not all valid under {new}",
              "serializer": "records of {new} are not all valid under {old}"}  # fmt: skip


@dataclass(frozen=True)
class Manifest:
    """What compatibility.json holds: each subject's rule and the digests of released versions."""

    rules: Mapping[str, str]
    released: Mapping[str, str]  # file name -> canonical SHA-256

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        document = orjson.loads((folder / MANIFEST).read_bytes())
        return cls({s: r["rule"] for s, r in document["subjects"].items()}, dict(document["released"]))


def canonical_digest(document: Any) -> str:  # noqa: ANN401 - any JSON
    """SHA-256 of the canonical JSON (sorted keys, no whitespace): reformatting a file is not an edit."""
    return hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest()


def check(folder: Path) -> list[str]:
    """Every problem with the schemas in `folder`, one line each; empty when all is well.

    A folder without its own compatibility.json is checked against the package's: what has been
    released, and each subject's rule, are the product's to say, not the folder's.
    """
    if not folder.is_dir():
        return [f"{folder}: not a folder of schemas"]
    own = folder / MANIFEST
    try:
        manifest = Manifest.read(folder if own.is_file() else schemas_dir())
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        return [f"{MANIFEST}: not a manifest ({type(exc).__name__}: {exc})"]
    documents, problems = _documents(folder)
    problems += _released_problems(manifest, documents)
    versions: dict[str, dict[int, Any]] = defaultdict(dict)
    for name, document in documents.items():
        found = _FILE.match(name)
        if found is not None:
            versions[found["subject"]][int(found["version"])] = document
    for subject in sorted(versions):
        problems += _subject_problems(subject, versions[subject], manifest.rules.get(subject))
    problems += [f"{MANIFEST}: subject {s!r} has no schema file" for s in sorted(set(manifest.rules) - set(versions))]
    return problems


def _documents(folder: Path) -> tuple[dict[str, Any], list[str]]:
    """Every schema file's document by file name, and what is wrong with the files themselves."""
    documents: dict[str, Any] = {}
    problems: list[str] = []
    for path in sorted(folder.glob("*.json")):
        if path.name == MANIFEST:
            continue
        found = _FILE.match(path.name)
        if found is None:
            problems.append(f"{path.name}: not named <subject>.v<N>.json")
            continue
        try:
            document = orjson.loads(path.read_bytes())
            Draft202012Validator.check_schema(document)
        except (orjson.JSONDecodeError, InvalidSchemaError) as exc:
            problems.append(f"{path.name}: not a valid JSON Schema (draft 2020-12): {str(exc).splitlines()[0]}")
            continue
        stem = path.name.removesuffix(".json")
        if not str(document.get("$id", "")).removesuffix(".json").endswith(stem):
            problems.append(f"{path.name}: its $id {document.get('$id')!r} does not name {stem}")
        documents[path.name] = document
    return documents, problems


def _released_problems(manifest: Manifest, documents: Mapping[str, Any]) -> list[str]:
    problems = []
    for name, digest in sorted(manifest.released.items()):
        document = documents.get(name)
        if document is None:
            problems.append(f"{name}: released, but missing or unreadable (a released schema stays, forever readable)")
        elif canonical_digest(document) != digest:
            problems.append(f"{name}: released schema edited in place (add a new version instead)")
    return problems


def _subject_problems(subject: str, versions: Mapping[int, Any], rule: str | None) -> list[str]:
    numbers = sorted(versions)
    if numbers != list(range(1, len(numbers) + 1)):
        return [f"{subject}: versions {numbers} have a gap (they are numbered 1, 2, 3, ...)"]
    if rule is None:
        return [f"{subject}: no compatibility rule in {MANIFEST}"]
    if rule not in RULES:
        return [f"{subject}: unknown compatibility rule {rule!r} (one of {', '.join(RULES)})"]
    if rule == "NONE":
        return []
    transitive = rule.endswith("_TRANSITIVE")
    problems = []
    for new in numbers[1:]:
        for old in numbers[: new - 1] if transitive else [new - 1]:
            problems += _pair_problems(subject, rule, versions, old, new)
    return problems


def _pair_problems(subject: str, rule: str, versions: Mapping[int, Any], old_n: int, new_n: int) -> list[str]:
    """What breaks `rule` between versions `old_n` and `new_n` of the subject.

    The product's writers emit declared fields only and its readers ignore fields they do not
    know, so the writer's schema is compared closed (no undeclared property) against the reader's
    as published (open): an optional field added is then compatible both ways, as it is on the wire.
    """
    problems = []
    for role in _ROLES[rule.removesuffix("_TRANSITIVE")]:
        writer_closed = role == "deserializer"  # deserializer: the old version writes, the new one reads
        old = _comparable(versions[old_n], closed=writer_closed)
        new = _comparable(versions[new_n], closed=not writer_closed)
        try:
            compatible = jsoncompat.check_compat(old, new, role)
        except ValueError as exc:  # a construct the checker cannot prove anything about
            problems.append(f"{subject}: v{old_n} -> v{new_n} cannot be checked: {exc}")
            continue
        if not compatible:
            detail = _DIRECTION[role].format(old=f"v{old_n}", new=f"v{new_n}")
            problems.append(f"{subject}: v{new_n} breaks {rule} against v{old_n}: {detail}")
    return problems


def _comparable(document: Any, *, closed: bool) -> str:  # noqa: ANN401 - a schema
    """The schema as compared: without `$id` or the version-naming `schema` field; `closed`: no undeclared fields."""
    body = {k: v for k, v in document.items() if k != "$id"}
    properties = body.get("properties")
    if isinstance(properties, dict) and "schema" in properties:
        body["properties"] = {**properties, "schema": {"type": "string"}}
    return orjson.dumps(_closed(body) if closed else body).decode()


def _closed(node: Any) -> Any:  # noqa: ANN401 - any part of a schema
    """`node` with every object schema that declares properties closed to others (additionalProperties false)."""
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    closed = {k: _closed(v) for k, v in node.items()}
    if isinstance(node.get("properties"), dict) and "additionalProperties" not in node:
        closed["additionalProperties"] = False
    return closed
