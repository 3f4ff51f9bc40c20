"""The README's settings table is `mesh settings --markdown`, and every setting has a meaning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mesh import settings_table
from mesh.config import ENV_PREFIX, Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_table_is_the_rendering_of_settings() -> None:
    text = README.read_text(encoding="utf-8")
    assert settings_table.splice(text, settings_table.markdown()) == text, (
        "README.md's settings table drifted: run `mesh settings --readme README.md`"
    )


def test_every_setting_has_a_row_with_a_meaning() -> None:
    rows = {row.variable: row for row in settings_table.rows()}
    assert sorted(rows) == sorted(ENV_PREFIX + name.upper() for name in Settings.model_fields)
    unexplained = [variable for variable, row in rows.items() if not row.meaning]
    assert not unexplained, f"add a #: comment above these fields in mesh/config.py: {unexplained}"


def test_defaults_read_as_a_variable_would_spell_them_and_mask_passwords() -> None:
    rows = {row.variable: row for row in settings_table.rows()}
    assert rows["MESH_AMQP_URL"].default == "amqp://guest:******@127.0.0.1:5672/"
    assert "guest:guest" not in settings_table.markdown()
    assert rows["MESH_RETRY_DELAYS_MS"].default == "1000,5000,30000"
    assert rows["MESH_HUMAN_QUEUE"].default == "true"
    assert rows["MESH_FALLBACK_AGENT"].default == ""
    assert rows["MESH_MODEL_CACHE_DIR"].default.endswith("~/.cache/agent-reach")
    assert rows["MESH_QUEUE_TYPE"].meaning.endswith("(one of classic, quorum)")
    assert rows["MESH_LEASE_TTL_S"].section == "registry"


def test_a_new_field_comment_reaches_the_table() -> None:
    comments = settings_table.comments()
    assert comments["prefetch"] == (
        "connections",
        "unacknowledged deliveries one consumer holds at a time",
    )


def test_a_drifted_readme_fails_the_cli_check(tmp_path: Path) -> None:
    stale = tmp_path / "README.md"
    stale.write_text(
        f"# x\n\n{settings_table.BEGIN}\n| old | table |\n{settings_table.END}\n", encoding="utf-8"
    )
    mesh = [sys.executable, "-m", "mesh.cli.main", "settings", "--readme", str(stale)]
    checked = subprocess.run([*mesh, "--check"], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 1 and "out of date" in checked.stderr
    assert subprocess.run(mesh, capture_output=True, timeout=60).returncode == 0
    assert settings_table.markdown() in stale.read_text(encoding="utf-8")
    again = subprocess.run([*mesh, "--check"], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
