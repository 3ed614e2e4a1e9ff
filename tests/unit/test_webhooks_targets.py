"""The webhook targets file and secrets as read from disk and the
environment (triggerhook/webhook/targets.py): errors name the setting, the
file, the entry and the field, never a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from triggerhook.domain.webhooks import WebhookTarget
from triggerhook.errors import ConfigError
from triggerhook.settings import Settings
from triggerhook.webhook.targets import read_secret_file, read_webhooks, target_secrets

SECRET = "0123456789abcdef0123"


def _file(tmp_path: Path, text: str, name: str = "webhooks.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_good_file(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        '[[webhook]]\nname = "a"\nurl = "http://h/x"\nrouting_keys = ["a.#"]\n'
        'secret_env = "A_SECRET"\nconcurrency = 2\ntimeout_s = 1.5\n',
    )
    (target,) = read_webhooks(path, "triggerhook.dead")
    assert (target.name, target.concurrency, target.timeout_s) == ("a", 2, 1.5)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[webhook]]\nname = 1\n", "webhook[0].name: a string is required"),
        ("[[webhook\n", "is not TOML"),
        (
            '[[webhook]]\nname = "a"\nurl = "http://h/"\nrouting_keys = ["#"]\nsecret_env = "S"\n',
            "webhook[0].routing_keys: '#' matches dead_letter_routing_key",
        ),
    ],
)
def test_errors_name_the_file_and_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        read_webhooks(path, "triggerhook.dead")
    assert str(caught.value).startswith(f"webhooks_file {path!r}") or "webhooks_file:" in str(
        caught.value
    )
    assert message in str(caught.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="webhooks_file: cannot read"):
        read_webhooks(str(tmp_path / "none.toml"), "d")


def test_secrets_from_a_file_and_the_environment(tmp_path: Path) -> None:
    path = _file(tmp_path, f"{SECRET}new\n\n{SECRET}old\n", "s")
    assert read_secret_file(path, "x") == (f"{SECRET}new".encode(), f"{SECRET}old".encode())
    target = WebhookTarget("a", "http://h/", ("a",), secret_file=path, secret_env="A_SECRET")
    got = target_secrets(target, "webhook[0]", {"A_SECRET": f" {SECRET}env\n"})
    assert got == (f"{SECRET}new".encode(), f"{SECRET}old".encode(), f"{SECRET}env".encode())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "no secret in it"),
        ("tiny-s3cr3t\n", "at least 16 bytes"),
        (f"{SECRET}1\n{SECRET}2\n{SECRET}3\n", "at most 2 secrets"),
    ],
)
def test_a_bad_secret_file(tmp_path: Path, content: str, message: str) -> None:
    path = _file(tmp_path, content, "s")
    with pytest.raises(ConfigError, match=message) as caught:
        read_secret_file(path, "webhook[0].secret_file")
    assert str(caught.value).startswith("webhook[0].secret_file")
    assert "s3cr3t" not in str(caught.value)  # never the secret


def test_a_missing_secret_variable() -> None:
    target = WebhookTarget("a", "http://h/", ("a",), secret_env="NOT_SET_HERE")
    with pytest.raises(ConfigError, match=r"webhook\[3\]\.secret_env \(\$NOT_SET_HERE\)"):
        target_secrets(target, "webhook[3]", {})


@pytest.mark.parametrize("prefix", ["", "a b.", "x" * 193])
def test_the_queue_prefix_setting(prefix: str) -> None:
    with pytest.raises(ConfigError, match=r"^webhook_queue_prefix: must be 1-192 characters"):
        Settings(webhook_queue_prefix=prefix)
    assert Settings(webhook_queue_prefix="x" * 192).webhook_queue_prefix == "x" * 192
