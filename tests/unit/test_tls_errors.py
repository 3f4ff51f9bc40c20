"""TLS failures told apart from an unreachable service: the pure parts (no network)."""

from __future__ import annotations

import ssl
import urllib.error
from pathlib import Path

import pytest

from mesh.config import Settings
from mesh.connection import (
    AMQP_TLS_FILES,
    REDIS_TLS_FILES,
    check_tls_files,
    find_tls_error,
    tls_config_error,
    tls_reason,
    without_query,
)
from mesh.errors import ConfigError
from mesh.redis_pool import redis_client


def verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    """What OpenSSL raises when the server's certificate does not verify."""
    error = ssl.SSLCertVerificationError(
        1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message} (_ssl.c:1006)"
    )
    error.verify_code = code
    error.verify_message = message
    error.reason = "CERTIFICATE_VERIFY_FAILED"
    return error


def protocol_error(reason: str, text: str) -> ssl.SSLError:
    error = ssl.SSLError(1, f"[SSL: {reason}] {text} (_ssl.c:1006)")
    error.reason = reason
    return error


def amqp_error(error: ssl.SSLError) -> ConfigError:
    return tls_config_error(
        "RabbitMQ",
        "amqps://app:******@rabbit-1:5671/?certfile=/c.pem",
        error,
        variable="MESH_AMQP_URL",
        ca_option="cafile",
        ca_given=None,
        plain_fix="use amqp:// or the port of its TLS listener (5671)",
    )


# --- find_tls_error ------------------------------------------------------------------------
def test_the_tls_error_is_found_behind_a_wrapper() -> None:
    cause = verify_error(20, "unable to get local issuer certificate")
    try:
        try:
            raise cause
        except OSError as exc:
            raise ConnectionError("Error 1 connecting to 127.0.0.1:6380.") from exc
    except ConnectionError as wrapped:
        assert find_tls_error(wrapped) is cause


def test_the_tls_error_is_found_as_a_context_and_as_a_url_error_reason() -> None:
    cause = protocol_error("WRONG_VERSION_NUMBER", "wrong version number")
    outer = RuntimeError("wrapped")
    outer.__context__ = cause
    assert find_tls_error(outer) is cause
    assert find_tls_error(urllib.error.URLError(cause)) is cause


def test_an_eof_during_the_handshake_is_no_tls_error() -> None:
    """A close mid-handshake is a lost connection (a node going down): unreachable."""
    outer = ConnectionError("closed")
    outer.__cause__ = ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    assert find_tls_error(outer) is None
    assert find_tls_error(ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed")) is None


def test_no_tls_error_in_a_plain_failure_nor_a_cycle() -> None:
    refused = ConnectionRefusedError(111, "Connection refused")
    assert find_tls_error(refused) is None
    assert find_tls_error(None) is None
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__context__, b.__context__ = b, a
    assert find_tls_error(a) is None


# --- tls_reason ----------------------------------------------------------------------------
def test_the_reason_is_openssl_s_in_a_few_words() -> None:
    assert tls_reason(verify_error(10, "certificate has expired")) == (
        "certificate verify failed: certificate has expired"
    )
    assert tls_reason(protocol_error("WRONG_VERSION_NUMBER", "wrong version number")) == (
        "wrong version number"
    )


# --- tls_config_error ----------------------------------------------------------------------
def test_an_untrusted_certificate_asks_for_the_ca_option() -> None:
    message = str(amqp_error(verify_error(20, "unable to get local issuer certificate")))
    assert message == (
        "RabbitMQ at amqps://app:******@rabbit-1:5671/ failed the TLS handshake (certificate "
        "verify failed: unable to get local issuer certificate): set cafile=/path/ca.pem in "
        "MESH_AMQP_URL's query (the CA that signed the server's certificate)"
    )


def test_an_untrusted_certificate_with_a_ca_given_names_that_file() -> None:
    error = tls_config_error(
        "Redis",
        "rediss://:******@cache:6380/0?ssl_ca_certs=/etc/old.pem&ssl_password=KEYPASS",
        verify_error(19, "self-signed certificate in certificate chain"),
        variable="MESH_REDIS_URL",
        ca_option="ssl_ca_certs",
        ca_given="/etc/old.pem",
        plain_fix="use redis://",
    )
    message = str(error)
    assert "KEYPASS" not in message and "?" not in message
    assert message.endswith(
        "/etc/old.pem does not hold the CA that signed the server's certificate: point "
        "ssl_ca_certs in MESH_REDIS_URL's query at that CA"
    )


def test_a_name_mismatch_asks_for_a_name_the_certificate_holds() -> None:
    for code in (62, 64):
        message = str(amqp_error(verify_error(code, "Hostname mismatch")))
        assert "Hostname mismatch" in message and "subjectAltName" in message


def test_a_plain_server_on_a_tls_url_is_named() -> None:
    message = str(amqp_error(protocol_error("WRONG_VERSION_NUMBER", "wrong version number")))
    assert message.endswith(
        "(wrong version number): the server does not speak TLS on that port: use amqp:// or "
        "the port of its TLS listener (5671)"
    )


def test_other_failures_point_at_the_tls_options() -> None:
    expired = str(amqp_error(verify_error(10, "certificate has expired")))
    assert expired.endswith("renew or fix the server's certificate")
    alert = protocol_error("TLSV13_ALERT_CERTIFICATE_REQUIRED", "tlsv13 alert certificate required")
    assert "check the TLS options of MESH_AMQP_URL" in str(amqp_error(alert))


def test_a_setting_of_its_own_is_named_as_such() -> None:
    error = tls_config_error(
        "the RabbitMQ management API",
        "https://guest:******@mq:15671/",
        verify_error(20, "unable to get local issuer certificate"),
        variable="MESH_MANAGEMENT_URL",
        ca_option="MESH_MANAGEMENT_CA_FILE",
        ca_given=None,
        plain_fix="use http://",
    )
    assert "set MESH_MANAGEMENT_CA_FILE=/path/ca.pem (the CA" in str(error)


def test_without_query() -> None:
    assert without_query("amqps://u:******@h:5671/v?cafile=/x#f") == "amqps://u:******@h:5671/v"
    assert without_query("amqp://h/") == "amqp://h/"


# --- check_tls_files -----------------------------------------------------------------------
def test_tls_files_that_exist_pass(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    check_tls_files(f"amqps://u:p@h:5671/?cafile={ca}&capath={tmp_path}", AMQP_TLS_FILES, "V")
    check_tls_files("rediss://h:6380/0", REDIS_TLS_FILES, "V")


def test_a_missing_tls_file_names_the_option_the_path_and_the_variable(tmp_path: Path) -> None:
    missing = tmp_path / "client.key"
    url = f"rediss://app:secret@h:6380/0?ssl_keyfile={missing}"
    with pytest.raises(ConfigError) as info:
        check_tls_files(url, REDIS_TLS_FILES, "MESH_REDIS_URL")
    assert str(info.value) == (
        f"MESH_REDIS_URL (rediss://app:******@h:6380/0): ssl_keyfile={missing} does not "
        "exist (expected a PEM file this process can read)"
    )


def test_a_ca_path_must_be_a_folder(tmp_path: Path) -> None:
    file = tmp_path / "ca.pem"
    file.write_text("x")
    with pytest.raises(ConfigError, match=r"capath=.* folder of CA certificates"):
        check_tls_files(f"amqps://h/?capath={file}", AMQP_TLS_FILES, "MESH_AMQP_URL")


# --- settings and the Sentinel client ------------------------------------------------------
def test_management_ca_file_is_a_path_that_exists(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    assert Settings.from_env({"MESH_MANAGEMENT_CA_FILE": str(ca)}).management_ca_file == ca
    assert Settings.from_env({"MESH_MANAGEMENT_CA_FILE": ""}).management_ca_file is None
    assert Settings().management_ca_file is None
    with pytest.raises(ConfigError, match=r"MESH_MANAGEMENT_CA_FILE: '.*nope.pem' is not a file"):
        Settings.from_env({"MESH_MANAGEMENT_CA_FILE": str(tmp_path / "nope.pem")})


async def test_sentinel_data_connections_keep_the_url_tls_options() -> None:
    client = redis_client(
        "rediss://app:pw@ignored:1/2?ssl_ca_certs=/etc/ca.pem&ssl_check_hostname=false",
        sentinels="127.0.0.1:26379",
    )
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["ssl_ca_certs"] == "/etc/ca.pem"
        assert kwargs["ssl_check_hostname"] is False
        assert kwargs["db"] == 2
        assert "SSL" in client.connection_pool.connection_class.__name__
    finally:
        await client.aclose()


def test_a_password_in_a_url_query_is_masked_too() -> None:
    from mesh.config import mask_url

    masked = mask_url("rediss://u:pw@h:6380/0?ssl_ca_certs=/ca.pem&ssl_password=s3cret")
    assert masked == "rediss://u:******@h:6380/0?ssl_ca_certs=/ca.pem&ssl_password=******"
    assert "s3cret" not in mask_url("redis://h:6379/0?ssl_password=s3cret")
