"""Namespaces and scoped tokens, the rules (triggerhook.domain.namespaces)
and the file they come from (triggerhook.api.access): what a token of a
namespace may do, what the file refuses and how, and a changed file taking
effect without a restart (docs/design/shared-service.md)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fakes import FakeClock, FakePublisher, FakeStore

from triggerhook import cli
from triggerhook.api.access import MAX_FILE_BYTES, Access, read_namespaces
from triggerhook.api.command_auth import CommandGuard
from triggerhook.api.command_messages import Command, Rejected, execute
from triggerhook.api.scoped import ScopedHook
from triggerhook.cli.token_cmd import new_token
from triggerhook.domain.namespaces import (
    ALL,
    MAX_PREFIX_CHARS,
    NO_ID_PREFIX,
    Namespace,
    Principal,
    parse_namespaces,
    token_hash,
)
from triggerhook.domain.task import ID_PATTERN
from triggerhook.errors import ConfigError, Forbidden
from triggerhook.settings import Settings
from triggerhook.wiring import assemble, command_config

BILLING = Namespace("billing", "billing-", ("billing.#", "audit.billing"))
TOKEN = "th_billing-secret"


def principal(*scopes: str) -> Principal:
    return Principal("billing-api", BILLING, frozenset(scopes or ("read", "write", "admin")))


def space(name: str, prefix: str, *keys: str) -> dict[str, Any]:
    return {"name": name, "id_prefix": prefix, "routing_keys": list(keys or ("#",))}


def token(name: str, secret: str, namespace: str | None, *scopes: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "sha256": token_hash(secret), "scopes": list(scopes)}
    if namespace is not None:
        entry["namespace"] = namespace
    return entry


# -- the rules ------------------------------------------------------------------------------


def test_a_create_needs_an_id_and_a_routing_key_of_its_namespace() -> None:
    billing = principal()
    billing.check_create("billing-7", "billing.charge.eu")
    billing.check_create("billing-7", "audit.billing")
    with pytest.raises(Forbidden) as outside:
        billing.check_create("shop-7", "billing.charge")
    assert str(outside.value) == (
        "task id 'shop-7' is outside namespace 'billing' (its ids start with 'billing-')"
    )
    with pytest.raises(Forbidden) as key:
        billing.check_create("billing-7", "shop.paid")
    assert str(key.value) == (
        "routing key 'shop.paid' is not one namespace 'billing' publishes to"
        " (billing.#, audit.billing)"
    )


def test_each_call_needs_its_scope() -> None:
    reader = principal("read")
    reader.check_id("billing-1", "read")
    with pytest.raises(Forbidden, match=r"^token 'billing-api' has no 'write' scope$"):
        reader.check_id("billing-1", "write")
    with pytest.raises(Forbidden, match="'write' scope"):
        reader.check_create("billing-1", "billing.x")
    with pytest.raises(Forbidden, match="'admin' scope"):
        principal("read", "write").need("admin")


def test_a_token_of_every_namespace_may_do_anything() -> None:
    ALL.check_create("anything", "any.key")
    ALL.check_id("x", "admin")
    assert ALL.narrow(None) is None
    assert ALL.narrow("abc") == "abc"
    assert ALL.id_prefix == ""


ids = st.from_regex(r"[a-c:-]{0,6}", fullmatch=True)


@given(own=ids.filter(bool), asked=st.none() | ids, task_id=ids.filter(bool))
def test_a_listing_is_narrowed_to_exactly_the_ids_of_both_prefixes(
    own: str, asked: str | None, task_id: str
) -> None:
    narrowed = Principal("t", Namespace("n", own, ("#",))).narrow(asked)
    assert narrowed is not None
    in_both = task_id.startswith(own) and (asked is None or task_id.startswith(asked))
    assert task_id.startswith(narrowed) == in_both
    if narrowed == NO_ID_PREFIX:
        assert not ID_PATTERN.match(NO_ID_PREFIX)  # no id starts with it


# -- the file's contents --------------------------------------------------------------------


def test_the_file_gives_namespaces_and_tokens_by_their_hash() -> None:
    found = parse_namespaces(
        {
            "namespace": [space("billing", "billing-", "billing.#"), space("shop", "shop-")],
            "token": [
                token("billing-ro", TOKEN, "billing", "read"),
                token("ops", "th_ops", None, "read", "write", "admin"),
            ],
        }
    )
    billing = found.principal(TOKEN)
    assert billing is not None
    assert billing.name == "billing-ro"
    assert billing.namespace == Namespace("billing", "billing-", ("billing.#",))
    assert billing.scopes == {"read"}
    ops = found.principal("th_ops")
    assert ops is not None and ops.namespace is None
    assert found.principal("th_unknown") is None
    assert found.principal(TOKEN + " ") is None


def test_a_new_token_is_random_and_its_line_is_accepted() -> None:
    first, second = new_token(), new_token()
    assert first != second
    assert re.fullmatch(r"th_[A-Za-z0-9_-]{43}", first)
    entry = {"name": "n", "sha256": token_hash(first), "scopes": ["read"]}
    assert parse_namespaces({"token": [entry]}).principal(first) is not None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"namespaces": []},
            "namespaces file: unknown table 'namespaces' (namespace, token, amqp_user)",
        ),
        ({"namespace": {}}, "namespace must be an array of tables"),
        ({"namespace": [space("Billing", "b-")]}, "namespace[0].name: 'Billing' is not"),
        (
            {"namespace": [space("b", "b-"), space("b", "c-")]},
            "namespace[1].name: 'b' is named twice",
        ),
        ({"namespace": [space("b", "")]}, "namespace[0].id_prefix: '' is not 1-28 characters"),
        ({"namespace": [space("b", "b/")]}, "namespace[0].id_prefix: 'b/' is not"),
        (
            {"namespace": [space("b", "x" * (MAX_PREFIX_CHARS + 1))]},
            "namespace[0].id_prefix: 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxx' is not 1-28",
        ),
        (
            {"namespace": [space("shop", "shop-"), space("shop-eu", "shop-eu-")]},
            "namespace 'shop-eu': id_prefix 'shop-eu-' starts with namespace 'shop''s 'shop-'",
        ),
        ({"namespace": [{**space("b", "b-"), "routing_keys": []}]}, "routing_keys: a non-empty"),
        ({"namespace": [space("b", "b-", "a..b")]}, "namespace[0].routing_keys: 'a..b': the"),
        ({"namespace": [{**space("b", "b-"), "quota": 1}]}, "namespace[0].quota: unknown key"),
        ({"token": [{"name": "t", "scopes": ["read"]}]}, "token[0].sha256: a string is required"),
        (
            {"token": [{"name": "t", "sha256": "ABC", "scopes": ["read"]}]},
            "token[0].sha256: 64 lower-case hex digits",
        ),
        ({"token": [token("t", "s", "nowhere", "read")]}, "token[0].namespace: no namespace"),
        ({"token": [token("t", "s", None)]}, "token[0].scopes: a non-empty list"),
        ({"token": [token("t", "s", None, "root")]}, "token[0].scopes: a non-empty list"),
        (
            {"token": [token("a", "s", None, "read"), token("b", "s", None, "read")]},
            "token[1].sha256: the same as 'a''s",
        ),
        ({"token": [token("a b", "s", None, "read")]}, "token[0].name: 'a b' is not"),
        (
            {"token": [token("a", "s", None, "read"), token("a", "t", None, "read")]},
            "token[1].name: 'a' is taken",
        ),
        ({"token": [token("api_token", "s", None, "read")]}, "token[0].name: 'api_token' is"),
        ({"amqp_user": [{"user_id": "", "scopes": ["read"]}]}, "amqp_user[0].user_id: 1 to 255"),
        (
            {"amqp_user": [{"user_id": "svc", "scopes": ["read"]}] * 2},
            "amqp_user[1].user_id: 'svc' is named twice",
        ),
        (
            {"amqp_user": [{"user_id": "svc", "namespace": "x", "scopes": ["read"]}]},
            "amqp_user[0].namespace: no namespace named 'x'",
        ),
        ({"amqp_user": [{"user_id": "svc"}]}, "amqp_user[0].scopes: a non-empty list"),
        ({"amqp_user": [{"user_id": "svc", "sha256": "x"}]}, "amqp_user[0].sha256: unknown"),
    ],
)
def test_a_wrong_file_is_refused_naming_the_entry_and_field(
    data: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_namespaces(data)
    assert message in str(refused.value)


prefixes = st.lists(st.from_regex(r"[ab-]{1,4}", fullmatch=True), max_size=8, unique=True)


@given(prefixes)
def test_prefixes_are_refused_exactly_when_one_starts_with_another(chosen: list[str]) -> None:
    entries = [space(f"n{i}", prefix) for i, prefix in enumerate(chosen)]
    overlapping = any(a != b and b.startswith(a) for a in chosen for b in chosen)
    if overlapping:
        with pytest.raises(ConfigError, match="an id would be in both"):
            parse_namespaces({"namespace": entries})
    else:
        assert len(parse_namespaces({"namespace": entries}).spaces) == len(chosen)


# -- the file, read and read again -----------------------------------------------------------


class Ticks:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def write(path: Path, *tokens: tuple[str, str]) -> None:
    lines = ['[[namespace]]\nname = "billing"\nid_prefix = "billing-"\nrouting_keys = ["#"]\n']
    for name, secret in tokens:
        lines.append(
            f'[[token]]\nname = "{name}"\nnamespace = "billing"\nscopes = ["read"]\n'
            f'sha256 = "{token_hash(secret)}"\n'
        )
    path.write_text("".join(lines))


def test_a_changed_file_takes_effect_after_reload_s_and_a_bad_one_keeps_the_last(
    tmp_path: Path,
) -> None:
    path = tmp_path / "namespaces.toml"
    write(path, ("old", "th_old"))
    ticks = Ticks()
    access = Access("admin-token", str(path), reload_s=5.0, monotonic=ticks)
    assert access.principal("Bearer admin-token") is ALL
    assert access.principal("Bearer th_old") is not None
    write(path, ("new", "th_new"))  # the rotation: the old token's line is gone
    os.utime(path, ns=(1, 1))  # a changed mtime, whatever the file system's resolution
    assert access.principal("Bearer th_new") is None  # not looked at again yet
    ticks.now_s += 5.0
    assert access.principal("Bearer th_new") is not None
    assert access.principal("Bearer th_old") is None
    path.write_text("[[namespace]\n")  # not TOML
    ticks.now_s += 5.0
    assert access.principal("Bearer th_new") is not None  # the last good contents
    assert access.reload_failures == 1
    ticks.now_s += 5.0
    access.principal("Bearer th_new")
    assert access.reload_failures == 1  # once per change, not per look


def test_without_a_token_or_a_file_everyone_is_every_namespace() -> None:
    access = Access("")
    assert not access.required
    assert access.principal("") is ALL


@pytest.mark.parametrize("header", ["", "th_new", "Bearer", "Bearer ", "bearer th_new", "Bearer é"])
def test_a_header_that_is_not_a_known_bearer_token_is_nobody(tmp_path: Path, header: str) -> None:
    path = tmp_path / "n.toml"
    write(path, ("new", "th_new"))
    assert Access("", str(path)).principal(header) is None


def test_a_file_that_cannot_be_read_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"namespaces_file: cannot read '.*missing.toml'"):
        read_namespaces(str(tmp_path / "missing.toml"))
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match="is over 16,777,216 bytes"):
        read_namespaces(str(big))
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[[token]]\nname = "t"\nscopes = ["read"]\n')
    with pytest.raises(ConfigError, match=r"wrong.toml': token\[0\].sha256: a string is required"):
        read_namespaces(str(wrong))


def test_token_new_prints_the_token_and_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["token", "new"]) == 0
    secret, line = capsys.readouterr().out.splitlines()
    assert line == f'sha256 = "{token_hash(secret)}"'
    entry = {"name": "n", "sha256": token_hash(secret), "scopes": ["read"]}
    assert parse_namespaces({"token": [entry]}).principal(secret) is not None


# -- the command channel's guard -------------------------------------------------------------


def test_the_command_guard_answers_who_a_command_acts_as(tmp_path: Path) -> None:
    path = tmp_path / "n.toml"
    write(path, ("billing-ro", "th_ro"))
    settings = Settings(api_token="admin", namespaces_file=str(path), command_allowed_users="svc")
    guard = CommandGuard(command_config(settings))
    assert guard.authenticates
    assert guard.check({"authorization": "Bearer admin"}, None, None) is ALL
    assert guard.check({}, "svc", None) is ALL
    reader = guard.check({"authorization": "Bearer th_ro"}, None, None)
    assert (reader.name, set(reader.scopes)) == ("billing-ro", {"read"})
    with pytest.raises(Rejected, match="wrong bearer token"):
        guard.check({"authorization": "Bearer th_nobody"}, None, None)


def test_an_amqp_user_of_the_file_acts_in_its_namespace(tmp_path: Path) -> None:
    path = tmp_path / "n.toml"
    write(path)
    with path.open("a") as file:
        file.write(
            '[[amqp_user]]\nuser_id = "billing-svc"\nnamespace = "billing"\nscopes = ["write"]\n'
            '[[amqp_user]]\nuser_id = "svc"\nscopes = ["read"]\n'
        )
    settings = Settings(namespaces_file=str(path), command_allowed_users="svc,ops")
    guard = CommandGuard(command_config(settings))
    billing = guard.check({}, "billing-svc", None)
    assert billing.namespace is not None
    assert (billing.name, billing.namespace.name, set(billing.scopes)) == (
        "billing-svc",
        "billing",
        {"write"},
    )
    # The file's entry before command_allowed_users: it says the user's powers.
    assert set(guard.check({}, "svc", None).scopes) == {"read"}
    assert guard.check({}, "ops", None) is ALL
    with pytest.raises(Rejected, match="user_id 'nobody' is not allowed"):
        guard.check({}, "nobody", None)


def test_a_command_out_of_scope_is_rejected_as_forbidden_and_writes_nothing() -> None:
    store = FakeStore()
    hook = assemble(
        Settings(instance_id="unit", switch_interval_us=0, shutdown_timeout_s=1),
        store,
        FakeClock(),
        lambda buffer, sink, retry, fail: FakePublisher(),
    )
    hook.start()
    try:
        scoped = ScopedHook(hook, principal("write"))
        body = b'{"id": "shop-1", "delay_ms": 60000, "routing_key": "billing.x"}'
        with pytest.raises(Rejected) as refused:
            execute(scoped, Command("create", body), 10_000)
        assert (refused.value.code, refused.value.message) == (
            "forbidden",
            "task id 'shop-1' is outside namespace 'billing' (its ids start with 'billing-')",
        )
        with pytest.raises(Rejected, match="has no 'write' scope"):
            execute(
                ScopedHook(hook, principal("read")),
                Command("cancel", b'{"id": "billing-1"}'),
                10_000,
            )
        assert store.rows == {}
    finally:
        hook.close()


def test_a_commands_message_id_names_its_task_within_the_namespace() -> None:
    billing = ScopedHook(None, principal())  # type: ignore[arg-type]  # no call reaches the library
    assert billing.id_of_message("m-1") == "billing-m-1"
    assert billing.id_of_message("billing-m-1") == "billing-m-1"
    assert billing.id_of_message("m" * 60) is None  # prefixed, no longer an id
    assert billing.id_of_message(None) is None
    anyone = ScopedHook(None, ALL)  # type: ignore[arg-type]
    assert anyone.id_of_message("m-1") == "m-1"
    assert anyone.id_of_message("no spaces allowed") is None


def test_only_api_token_itself_is_api_token(tmp_path: Path) -> None:
    path = tmp_path / "n.toml"
    write(path, ("billing-ro", "th_ro"))
    access = Access("admin", str(path))
    assert access.carries_api_token("Bearer admin")
    assert not access.carries_api_token("Bearer th_ro")  # a token of the file: the web view's no
    assert not access.carries_api_token("Bearer admin ")
    assert not access.carries_api_token("Bearer \udcff")  # not UTF-8
    assert not Access("", str(path)).carries_api_token("Bearer ")
