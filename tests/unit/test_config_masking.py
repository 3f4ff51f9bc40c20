"""A password that breaks URL parsing (a ``/``, ``?``, ``#`` not %-encoded) is masked in
every error and masked URL, never echoed, not even in part."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from mesh.config import Settings, mask_url
from mesh.errors import ConfigError

ODD = ["s3/cret", "s3?cret", "s3#cret", "s3/c@ret"]


@pytest.mark.parametrize("password", ODD)
def test_mask_url_masks_a_password_urlsplit_reads_as_a_path(password: str) -> None:
    assert mask_url(f"amqp://bob:{password}@rabbit:5672/vh") == "amqp://bob:******@rabbit:5672/vh"


def test_mask_url_keeps_what_is_not_secret() -> None:
    assert mask_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert mask_url("amqp://bob@rabbit/") == "amqp://bob@rabbit/"
    assert mask_url("amqps://u:p@h:5671/?cafile=/ca.pem&key_password=k") == (
        "amqps://u:******@h:5671/?cafile=/ca.pem&key_password=******"
    )


@pytest.mark.parametrize("password", ODD)
def test_an_unparseable_url_error_quotes_no_part_of_the_password(password: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"MESH_AMQP_URL": f"amqp://bob:{password}@rabbit:5672/"})
    text = str(caught.value)
    assert "s3" not in text and "cret" not in text
    assert "MESH_AMQP_URL" in text and "amqp://bob:******@rabbit:5672/" in text
    assert "%2F" in text  # names the fix


def test_a_validation_error_of_settings_built_in_code_quotes_no_input() -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(amqp_url=SecretStr("amqp://bob:s3/cret@rabbit/"))
    assert "s3" not in str(caught.value) and "cret" not in str(caught.value)
