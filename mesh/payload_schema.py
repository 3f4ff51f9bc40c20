"""Agent contracts: the JSON Schemas of an agent's payload and output.

An agent may declare what its tasks carry (`Agent(input_model=...)` or `input_schema=`) and
what it answers (`output_model` / `output_schema`). Its worker checks each payload before
the handler runs and each output before it commits; a router checks a targeted task or a
handoff against the target's registered input schema before dispatching it. Every check
names each bad field, so "A sends ``order_id``, B expects ``order_no``" fails at once, at
the edge, instead of deep inside B's handler.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel

from mesh.errors import ConfigError

#: at most this many field errors are named in one answer
MAX_ERRORS = 20


def schema_of(
    model: type[BaseModel] | None, schema: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The JSON Schema of a contract given as a pydantic model or a schema (one of them)."""
    if model is not None and schema is not None:
        raise ConfigError("give a contract as a pydantic model or as a JSON Schema, not both")
    if model is not None:
        return model.model_json_schema()
    return schema


def checker(schema: dict[str, Any] | None) -> Draft202012Validator | None:
    """A validator of `schema` (None: no contract), built once per distinct schema.

    Raises:
        ConfigError: `schema` is not a valid JSON Schema.
    """
    if schema is None:
        return None
    return _compiled(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))


@lru_cache(maxsize=1024)
def _compiled(raw: bytes) -> Draft202012Validator:
    schema = orjson.loads(raw)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        digest = hashlib.sha256(raw).hexdigest()[:12]
        raise ConfigError(f"contract schema {digest} is not a JSON Schema: {exc.message}") from None
    return Draft202012Validator(schema)


def field_errors(validator: Draft202012Validator | None, value: Any) -> list[dict[str, str]]:
    """Each way `value` breaks the contract: ``{"field": "a.b", "message": ...}`` ([]: fits)."""
    if validator is None:
        return []
    found = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(p) for p in error.absolute_path) or "(payload)"
        found.append({"field": path, "message": error.message[:500]})
        if len(found) == MAX_ERRORS:
            break
    return found


def describe(errors: list[dict[str, str]]) -> str:
    """One sentence naming each bad field."""
    return "; ".join(f"{e['field']}: {e['message']}" for e in errors)


__all__ = ["MAX_ERRORS", "checker", "describe", "field_errors", "schema_of"]
