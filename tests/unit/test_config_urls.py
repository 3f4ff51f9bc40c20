"""MESH_AMQP_URL as a comma-separated list of cluster nodes: parsing, validation, masking."""

from __future__ import annotations

import pytest

from mesh.config import Settings, check_url_list, split_urls
from mesh.errors import ConfigError

NODES = (
    "amqp://guest:guest@127.0.0.1:5681/,"
    "amqp://guest:guest@127.0.0.1:5682/,"
    "amqp://guest:guest@127.0.0.1:5683/"
)


def test_a_single_url_is_unchanged() -> None:
    url = "amqp://bob:hunter2@rabbit:5672/vh"
    s = Settings.from_env({"MESH_AMQP_URL": url})
    assert s.amqp_url.get_secret_value() == url
    assert [u.get_secret_value() for u in s.amqp_urls] == [url]
    assert s.amqp_url_masked == "amqp://bob:******@rabbit:5672/vh"


def test_the_default_is_one_loopback_url() -> None:
    s = Settings.from_env({})
    assert [u.get_secret_value() for u in s.amqp_urls] == ["amqp://guest:guest@127.0.0.1:5672/"]


def test_a_list_keeps_its_order() -> None:
    s = Settings.from_env({"MESH_AMQP_URL": NODES})
    assert [u.get_secret_value() for u in s.amqp_urls] == NODES.split(",")
    assert s.amqp_url_masked == (
        "amqp://guest:******@127.0.0.1:5681/,"
        "amqp://guest:******@127.0.0.1:5682/,"
        "amqp://guest:******@127.0.0.1:5683/"
    )


def test_blanks_around_the_commas_are_dropped() -> None:
    spaced = " , ".join(NODES.split(","))
    s = Settings.from_env({"MESH_AMQP_URL": spaced})
    assert s.amqp_url.get_secret_value() == NODES
    assert len(s.amqp_urls) == 3


def test_passwords_of_every_node_are_masked_everywhere() -> None:
    s = Settings(amqp_url="amqp://a:pw-one@h1:1/,amqps://b:pw-two@h2:2/")  # type: ignore[arg-type]
    for text in (repr(s), str(s), s.amqp_url_masked, repr(s.amqp_urls)):
        assert "pw-one" not in text and "pw-two" not in text
    assert s.amqp_url_masked == "amqp://a:******@h1:1/,amqps://b:******@h2:2/"


def test_a_comma_in_a_password_is_percent_encoded() -> None:
    s = Settings.from_env({"MESH_AMQP_URL": "amqp://u:a%2Cb@h1:1/,amqp://u:a%2Cb@h2:2/"})
    assert [u.get_secret_value() for u in s.amqp_urls] == [
        "amqp://u:a%2Cb@h1:1/",
        "amqp://u:a%2Cb@h2:2/",
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("amqp://u:sekret@h1:1/,", "URL 2 of 2 is empty"),
        (",amqp://u:sekret@h1:1/", "URL 1 of 2 is empty"),
        ("amqp://u:sekret@h1:1/,,amqp://u:sekret@h2:2/", "URL 2 of 3 is empty"),
        ("amqp://u:sekret@h1:1/,http://u:sekret@h2:2/", "URL 2 of 2: 'http://u:******@h2:2/'"),
        ("amqp://u:sekret@h1:1/,amqp:/h2", "URL 2 of 2: 'amqp:/h2' names no host"),
        ("amqp://u:sekret@h1:port/,amqp://u:sekret@h2:2/", "URL 1 of 2: "),
        ("amqp://u:sekret@h1:1/,amqp://u:sekret@h2:0/", "has port 0"),
        ("amqp://u:sekret@h1:1/,amqp://u:sekret@h1:1/", "is listed twice"),
    ],
)
def test_a_bad_list_is_one_sentence_naming_the_variable_and_the_url(
    value: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"MESH_AMQP_URL": value})
    message = str(info.value)
    assert message.startswith("invalid settings: MESH_AMQP_URL: ")
    assert problem in message
    assert "sekret" not in message and "\n" not in message


def test_a_bad_single_url_keeps_its_message() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"MESH_AMQP_URL": "amqp:/127.0.0.1"})
    assert str(info.value) == (
        "invalid settings: MESH_AMQP_URL: 'amqp:/127.0.0.1' names no host "
        "(expected amqp://USER:PASS@HOST:PORT/)"
    )


def test_the_helpers() -> None:
    assert split_urls(" a , b ") == ["a", "b"]
    assert check_url_list(NODES, ("amqp", "amqps")) is None
    assert (
        check_url_list("amqp://h/,", ("amqp",))
        == "URL 2 of 2 is empty (separate the URLs with single commas)"
    )
