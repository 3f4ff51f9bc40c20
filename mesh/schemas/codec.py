"""The one codec of the wire: bytes <-> models, through orjson. Nothing else calls orjson.

A body that does not decode becomes `InvalidEnvelope`, which names every bad field (its
location and the reason) and keeps the raw bytes so they can be dead-lettered as they came.
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from mesh.schemas.envelope import DEFAULT_MAX_PAYLOAD_BYTES
from mesh.schemas.result import FieldProblem

M = TypeVar("M", bound=BaseModel)

#: a body larger than this is refused before parsing (payload cap plus room for the envelope)
ENVELOPE_OVERHEAD_BYTES = 64 * 1024


class InvalidEnvelope(ValueError):
    """A body that is not a valid message of the expected kind."""

    def __init__(self, problems: list[FieldProblem], raw: bytes, kind: str) -> None:
        self.problems = problems
        self.raw = raw
        self.kind = kind
        listed = "; ".join(f"{p.loc}: {p.msg}" for p in problems[:20])
        more = f" (+{len(problems) - 20} more)" if len(problems) > 20 else ""
        super().__init__(f"invalid {kind}: {listed}{more}")

    def as_details(self) -> dict[str, Any]:
        """The problems as JSON-ready data, for an error Result or a dead-letter header."""
        return {"errors": [p.model_dump() for p in self.problems]}


def dumps(value: Any) -> bytes:
    """Encode plain JSON data (dicts, lists, numbers, strings)."""
    return orjson.dumps(value)


def loads(body: bytes | str) -> Any:
    """Decode plain JSON data; raises `orjson.JSONDecodeError` (a `ValueError`)."""
    return orjson.loads(body)


#: the Python types of plain JSON data (a tuple encodes as an array)
_JSON_SCALARS = (str, int, float, bool, type(None))


def json_problem(value: Any, path: str = "output") -> tuple[str, str] | None:
    """The first place in `value` that is not plain JSON data, as ``(path, type name)``.

    Plain JSON data is dicts with string keys, lists, tuples, strings, numbers, booleans
    and None. Anything else (a numpy scalar, a set, a method, a datetime) is named, e.g.
    ``("output.items[2]", "numpy.float32")``; None when everything is plain.
    """
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}[{key!r}]", f"{_type_name(key)} (a key must be a string)"
            found = json_problem(item, f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = json_problem(item, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(value, _JSON_SCALARS):
        return None
    return path, _type_name(value)


def _type_name(value: Any) -> str:
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def encode(model: BaseModel) -> bytes:
    """Encode a wire model; fields left at None are kept, so the schema is explicit."""
    return orjson.dumps(model.model_dump(mode="json"))


def decode(model: type[M], body: bytes, *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> M:
    """Decode `body` into `model`.

    Raises:
        InvalidEnvelope: the body is too large, not JSON, not an object, or fails validation;
            every bad field is named.
    """
    kind = model.__name__
    limit = max_payload_bytes + ENVELOPE_OVERHEAD_BYTES
    if len(body) > limit:
        raise InvalidEnvelope(
            [FieldProblem(loc="(body)", msg=f"body is {len(body)} bytes; the limit is {limit}")],
            body,
            kind,
        )
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidEnvelope(
            [FieldProblem(loc="(body)", msg=f"not valid JSON: {exc}")], body, kind
        ) from None
    if not isinstance(data, dict):
        raise InvalidEnvelope(
            [FieldProblem(loc="(body)", msg=f"expected a JSON object, got {type(data).__name__}")],
            body,
            kind,
        )
    try:
        # strict: a JSON string is not an integer, as the published JSON Schemas say
        return model.model_validate(
            data, strict=True, context={"max_payload_bytes": max_payload_bytes}
        )
    except ValidationError as exc:
        raise InvalidEnvelope(_problems(exc), body, kind) from None


def _problems(exc: ValidationError) -> list[FieldProblem]:
    problems = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(part) for part in err["loc"]) or "(body)"
        problems.append(FieldProblem(loc=loc, msg=err["msg"][:500]))
    return problems


def peek(body: bytes, field: str) -> str | None:
    """Read one top-level string field of a body that may be invalid; None when unreadable."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    value = data.get(field)
    if isinstance(value, str) and 0 < len(value) <= 255:
        return value
    return None
