"""Start-up hints name `infra/up.sh` only from a checkout, else the settings and the README."""

from __future__ import annotations

from pathlib import Path

import pytest

from mesh import hints
from mesh.config import Settings
from mesh.errors import ServiceUnavailable
from mesh.management import Management


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "infra").mkdir(parents=True)
    (root / "infra" / "up.sh").write_text("#!/bin/sh\n")
    return root


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


def test_from_the_checkout_root_the_hint_names_the_script(checkout: Path) -> None:
    hint = hints.start_hint("MESH_REDIS_URL", cwd=checkout, root=checkout)
    assert hint == "start it with `bash infra/up.sh` (or set MESH_REDIS_URL)"
    assert hints.from_checkout(cwd=checkout, root=checkout)


def test_a_checkout_on_the_path_is_named_by_its_absolute_script(
    checkout: Path, elsewhere: Path
) -> None:
    hint = hints.start_hint("MESH_AMQP_URL", cwd=elsewhere, root=checkout)
    assert f"`bash {checkout / 'infra' / 'up.sh'}`" in hint
    assert "MESH_AMQP_URL" in hint


def test_an_installed_package_names_the_setting_and_the_readme_section(
    tmp_path: Path, elsewhere: Path
) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    assert not hints.from_checkout(cwd=elsewhere, root=site)
    hint = hints.start_hint("MESH_REDIS_URL", cwd=elsewhere, root=site)
    assert "infra/up.sh" not in hint
    assert hint == (
        "set MESH_REDIS_URL to where it runs, or start it "
        '(README "Running RabbitMQ and Redis yourself")'
    )
    management = hints.management_hint(cwd=elsewhere, root=site)
    assert "up.sh" not in management and "MESH_MANAGEMENT_URL" in management
    assert "rabbitmq-plugins enable rabbitmq_management" in management


def test_the_readme_has_the_section_the_hint_names() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "\n## Running RabbitMQ and Redis yourself\n" in readme


def test_the_management_error_outside_a_checkout_says_no_script(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(hints, "SOURCE_ROOT", tmp_path)
    # a port nothing listens on: refused at once
    settings = Settings(management_url="http://guest:guest@127.0.0.1:1/")  # type: ignore[arg-type]
    with pytest.raises(ServiceUnavailable) as caught:
        Management(settings).queues()
    assert "up.sh" not in str(caught.value)
    assert "MESH_MANAGEMENT_URL" in str(caught.value)
