"""Every `Settings` field as a row: its ``MESH_*`` variable, default and one-line meaning.

The meanings are the ``#:`` comments above each field in `mesh/config.py` (read from its
source, which ships with the package), grouped by the ``# --- section ---`` lines there.
Defaults are shown as a variable would spell them, URLs with their password masked.
`markdown()` is the table between the README's settings markers (`mesh settings
--markdown`); `tests/unit/test_settings_table.py` fails when the README's copy drifts.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from mesh import config
from mesh.config import ENV_PREFIX, Settings, mask_url

BEGIN = "<!-- settings:begin -->"
END = "<!-- settings:end -->"

_SECTION = re.compile(r"^    # --- (.+?)\s*-*\s*$")
_DOC = re.compile(r"^    #: ?(.*)$")
_FIELD = re.compile(r"^    ([a-z_][a-z0-9_]*)\s*:")


@dataclass(frozen=True)
class Row:
    section: str
    variable: str
    default: str
    meaning: str


def comments() -> dict[str, tuple[str, str]]:
    """Field name -> (section, its ``#:`` comment as one line), from `Settings`' source."""
    found: dict[str, tuple[str, str]] = {}
    section, doc = "", list[str]()
    for line in inspect.getsource(config.Settings).splitlines():
        if match := _SECTION.match(line):
            section, doc = match.group(1).strip(), []
        elif match := _DOC.match(line):
            doc.append(match.group(1).strip().replace("``", "`"))
        elif (match := _FIELD.match(line)) and match.group(1) in Settings.model_fields:
            found[match.group(1)] = (section, " ".join(doc))
            doc = []
        elif not line.startswith("        "):  # a field's continuation lines keep its doc
            doc = []
    return found


def shown_default(field: FieldInfo) -> str:
    """The default of `field` as its variable would spell it ("" when it has none)."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("shown_default"), str):
        return str(extra["shown_default"])
    value: Any = (
        field.default_factory()  # type: ignore[call-arg]
        if field.default_factory is not None
        else field.default
    )
    if isinstance(value, SecretStr):
        return mask_url(value.get_secret_value())
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def choices(annotation: Any) -> tuple[str, ...]:
    """The values a `Literal` setting (optional or not) takes, else ()."""
    if typing.get_origin(annotation) is Literal:
        return tuple(str(arg) for arg in typing.get_args(annotation))
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is Literal:
            return choices(arg)
    return ()


def rows() -> list[Row]:
    """One row per `Settings` field, in the order `mesh/config.py` declares them."""
    docs = comments()
    table = []
    for name, field in Settings.model_fields.items():
        section, meaning = docs.get(name, ("", ""))
        options = choices(field.annotation)
        if options:
            meaning = f"{meaning} (one of {', '.join(options)})".strip()
        table.append(Row(section, ENV_PREFIX + name.upper(), shown_default(field), meaning))
    return table


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """The settings as a Markdown table, one row per variable, a bold row per section."""
    lines = ["| variable | default | meaning |", "| --- | --- | --- |"]
    section = None
    for row in rows():
        if row.section != section:
            section = row.section
            lines.append(f"| **{_cell(section)}** | | |")
        default = f"`{_cell(row.default)}`" if row.default else "none"
        lines.append(f"| `{row.variable}` | {default} | {_cell(row.meaning)} |")
    return "\n".join(lines) + "\n"


def dotenv() -> str:
    """The settings as a ``.env`` template: each variable commented out at its default."""
    lines = []
    for row in rows():
        lines.append(f"# {row.meaning}" if row.meaning else "#")
        lines.append(f"# {row.variable}={row.default}")
    return "\n".join(lines) + "\n"


def splice(document: str, table: str) -> str:
    """`document` with the text between its settings markers replaced by `table`.

    Raises:
        ValueError: the markers are missing or out of order.
    """
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {BEGIN} ... {END} markers in order")
    return f"{document[: start + len(BEGIN)]}\n{table}{document[end:]}"


__all__ = [
    "BEGIN",
    "END",
    "Row",
    "comments",
    "dotenv",
    "markdown",
    "rows",
    "shown_default",
    "splice",
]
