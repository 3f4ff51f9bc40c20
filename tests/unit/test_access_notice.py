"""Services say once at start-up when they run without access control."""

from __future__ import annotations

import logging

import pytest

from mesh.cli._runner import warn_without_access_control
from mesh.config import Settings


def test_the_shared_guest_login_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    warn_without_access_control(Settings(), "router")
    [record] = caplog.records
    assert "router runs without access control" in record.getMessage()
    assert "mesh access provision" in record.getMessage()


def test_a_provisioned_login_is_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    settings = Settings(amqp_url="amqp://mesh%3Arouter:s3cret@10.0.0.5:5672/tenant")
    warn_without_access_control(settings, "router")
    assert caplog.records == []
    assert "s3cret" not in caplog.text
