"""A URL that turns off the check of the server's certificate connects, with a WARNING."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import SecretStr

from mesh.config import Settings
from mesh.connection import connect, warn_unverified_tls

pytestmark = [pytest.mark.integration, pytest.mark.access_off("logs in as guest")]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "certificate is not checked" in r.getMessage()
    ]


async def test_no_verify_ssl_in_the_amqp_url_is_warned_about(
    settings: Settings, add_cleanup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    base = settings.amqp_urls[0].get_secret_value()
    with caplog.at_level(logging.WARNING, logger="mesh.connection"):
        plain = await connect(settings, name="verified")
        await plain.close()
        assert _warnings(caplog) == []  # the default URL: nothing to say
        unverified = settings.model_copy(update={"amqp_url": SecretStr(f"{base}?no_verify_ssl=1")})
        conn = await connect(unverified, name="unverified")
        add_cleanup(conn.close)
    assert conn.is_connected
    [line] = _warnings(caplog)
    assert line.startswith("MESH_AMQP_URL (amqp://guest:******@") and "no_verify_ssl" in line
    assert "?" not in line.split(")")[0]  # the query is left out of the line


def test_redis_ssl_cert_reqs_none_is_warned_about_and_zero_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="mesh.connection"):
        assert warn_unverified_tls("rediss://:pw@h:6380/0?ssl_cert_reqs=none", "MESH_REDIS_URL")
        assert not warn_unverified_tls("amqps://u:pw@h:5671/?no_verify_ssl=0", "MESH_AMQP_URL")
        assert not warn_unverified_tls("rediss://:pw@h:6380/0?ssl_cert_reqs=required", "X")
    [line] = _warnings(caplog)
    assert "ssl_cert_reqs=none" in line and "pw" not in line
