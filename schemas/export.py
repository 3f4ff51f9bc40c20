"""Generate `schemas/json/*.schema.json` from the models (`mesh schemas export`)."""

from __future__ import annotations

from pathlib import Path

import orjson

from schemas import WIRE_MODELS

JSON_DIR = Path(__file__).parent / "json"


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


def write(directory: Path = JSON_DIR) -> list[Path]:
    """Write every schema file; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in render().items():
        path = directory / name
        path.write_bytes(data)
        written.append(path)
    return written
