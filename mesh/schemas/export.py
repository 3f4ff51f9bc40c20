"""The JSON Schemas of the wire models (`mesh schemas export`).

A checkout commits them in ``schemas/json/`` for agents in other languages; the
installed package never writes there.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from mesh.schemas import WIRE_MODELS


def render() -> dict[str, bytes]:
    """File name -> the JSON Schema bytes, exactly as committed."""
    out: dict[str, bytes] = {}
    for stem, model in WIRE_MODELS.items():
        schema = model.model_json_schema(mode="validation")
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://agent-reach.dev/schemas/{stem}.schema.json"
        out[f"{stem}.schema.json"] = (
            orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
        )
    return out


def bundle() -> bytes:
    """Every schema in one JSON object keyed by file name (what stdout receives)."""
    return (
        orjson.dumps(
            {name: orjson.loads(data) for name, data in render().items()},
            option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS,
        )
        + b"\n"
    )


def write(directory: Path) -> list[Path]:
    """Write every schema file; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in render().items():
        path = directory / name
        path.write_bytes(data)
        written.append(path)
    return written
