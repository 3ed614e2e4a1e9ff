"""Namespaces and the tokens that act in them (docs/design/shared-service.md,
section 1): pure, no I/O.

A namespace owns the task ids that start with its ``id_prefix`` and may
publish to the routing keys its ``routing_keys`` patterns match (AMQP topic
patterns, as ``rate_limits`` has them); its quotas bound what its tokens
create (:mod:`triggerhook.domain.quotas`). A token is known by its SHA-256; it
acts in one namespace, or in every one, with the scopes it names:

* ``read``: get a task or series, list, count, the timeline, the status;
* ``write``: create, reschedule, cancel, and a series' pause, resume,
  trigger and backfill;
* ``admin``: bulk cancel.

:class:`Principal` holds every decision; a refusal is :class:`Forbidden`,
whose message names the rule. :func:`parse_namespaces` reads the file's
contents (its TOML already parsed), and refuses, naming the entry and the
field, what would make an id belong to two namespaces.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from triggerhook.domain.quotas import NO_QUOTA, QUOTA_KEYS, Quota, parse_quota
from triggerhook.domain.ratelimits import MAX_PATTERNS, pattern_error, topic_matches
from triggerhook.domain.task import ID_PATTERN
from triggerhook.errors import ConfigError, Forbidden

READ, WRITE, ADMIN = "read", "write", "admin"
SCOPES = (READ, WRITE, ADMIN)
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# Bounds on the file: reading it is linear in its size, never more.
MAX_NAMESPACES = 10_000
MAX_TOKENS = 100_000
# The longest id_prefix: a made id (the prefix and a UUID, 36 characters)
# is an id (at most 64 characters).
MAX_PREFIX_CHARS = 28
# A listing filter's prefix that no id starts with: "{" is no id character
# (and sorts after them all, so its id range is an empty one of the index).
NO_ID_PREFIX = "{"
_MAX_USER_ID_CHARS = 255  # an AMQP shortstr


def token_hash(token: str) -> str:
    """The SHA-256 of a token, as the namespaces file holds it (hex)."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    id_prefix: str
    routing_keys: tuple[str, ...]
    quota: Quota = NO_QUOTA

    def owns(self, task_id: str) -> bool:
        return task_id.startswith(self.id_prefix)

    def publishes_to(self, routing_key: str) -> bool:
        return any(topic_matches(pattern, routing_key) for pattern in self.routing_keys)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: a token's ``name`` (never its secret), the
    ``namespace`` it acts in (None: every one) and its ``scopes``."""

    name: str
    namespace: Namespace | None
    scopes: frozenset[str] = field(default_factory=lambda: frozenset(SCOPES))

    def need(self, scope: str) -> None:
        if scope not in self.scopes:
            raise Forbidden(f"token {self.name!r} has no {scope!r} scope")

    def check_id(self, task_id: str, scope: str) -> None:
        """The call by id is the scope's, on an id of this namespace."""
        self.need(scope)
        space = self.namespace
        if space is not None and not space.owns(task_id):
            raise Forbidden(
                f"task id {task_id!r} is outside namespace {space.name!r}"
                f" (its ids start with {space.id_prefix!r})"
            )

    def check_create(self, task_id: str, routing_key: str) -> None:
        """A create of ``task_id`` publishing to ``routing_key``."""
        self.check_id(task_id, WRITE)
        space = self.namespace
        if space is not None and not space.publishes_to(routing_key):
            raise Forbidden(
                f"routing key {routing_key!r} is not one namespace {space.name!r}"
                f" publishes to ({', '.join(space.routing_keys)})"
            )

    @property
    def id_prefix(self) -> str:
        """What a new id of this caller starts with (none given: the server makes one)."""
        return "" if self.namespace is None else self.namespace.id_prefix

    def narrow(self, prefix: str | None) -> str | None:
        """A listing filter's id ``prefix`` within this namespace: the longer
        of the two when one starts with the other, else :data:`NO_ID_PREFIX`
        (no id starts with both)."""
        if self.namespace is None:
            return prefix
        own = self.namespace.id_prefix
        if prefix is None or own.startswith(prefix):
            return own
        return prefix if prefix.startswith(own) else NO_ID_PREFIX


ALL = Principal("api_token", None)  # today's single token: every namespace, every scope


@dataclass(frozen=True)
class Namespaces:
    """The file's contents: namespaces by name, and who each token is, by
    its hash and by its name (a web view session names its token)."""

    spaces: Mapping[str, Namespace]
    tokens: Mapping[str, Principal]
    named: Mapping[str, Principal] = field(default_factory=dict)
    users: Mapping[str, Principal] = field(default_factory=dict)  # by AMQP user_id

    def principal(self, token: str) -> Principal | None:
        """The token's principal; None: no such token."""
        return self.tokens.get(token_hash(token))


def parse_namespaces(data: Mapping[str, object]) -> Namespaces:
    """The namespaces file's contents (its TOML parsed): ``[[namespace]]``,
    ``[[token]]`` and ``[[amqp_user]]`` entries. Raises :class:`ConfigError`
    naming the entry and its field."""
    unknown = sorted(set(data) - {"namespace", "token", "amqp_user"})
    if unknown:
        raise ConfigError(
            f"namespaces file: unknown table {unknown[0]!r} (namespace, token, amqp_user)"
        )
    spaces = _spaces(_entries(data, "namespace", MAX_NAMESPACES))
    tokens: dict[str, Principal] = {}
    named: dict[str, Principal] = {}
    for index, entry in enumerate(_entries(data, "token", MAX_TOKENS)):
        where = f"token[{index}]"
        digest, principal = _token(entry, where, spaces)
        if digest in tokens:
            raise ConfigError(f"{where}.sha256: the same as {tokens[digest].name!r}'s")
        if principal.name in named or principal.name == ALL.name:
            raise ConfigError(f"{where}.name: {principal.name!r} is taken")
        tokens[digest] = named[principal.name] = principal
    users: dict[str, Principal] = {}
    for index, entry in enumerate(_entries(data, "amqp_user", MAX_TOKENS)):
        where = f"amqp_user[{index}]"
        _known(entry, where, ("user_id", "namespace", "scopes"))
        user = _string(entry, where, "user_id")
        if not 0 < len(user) <= _MAX_USER_ID_CHARS:
            raise ConfigError(f"{where}.user_id: 1 to {_MAX_USER_ID_CHARS} characters")
        if user in users:
            raise ConfigError(f"{where}.user_id: {user!r} is named twice")
        users[user] = _acting(entry, where, spaces, user)
    return Namespaces(spaces, tokens, named, users)


def _entries(data: Mapping[str, object], table: str, most: int) -> list[Mapping[str, object]]:
    entries = data.get(table, [])
    if not isinstance(entries, list):
        raise ConfigError(f"namespaces file: {table} must be an array of tables ([[{table}]])")
    if len(entries) > most:
        raise ConfigError(f"namespaces file: more than {most:,} [[{table}]] entries")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConfigError(f"{table}[{index}]: must be a table")
    return entries


def _spaces(entries: list[Mapping[str, object]]) -> dict[str, Namespace]:
    spaces: dict[str, Namespace] = {}
    for index, entry in enumerate(entries):
        where = f"namespace[{index}]"
        _known(entry, where, ("name", "id_prefix", "routing_keys", *QUOTA_KEYS))
        name = _string(entry, where, "name")
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{where}.name: {name!r} is not [a-z0-9][a-z0-9_-]{{0,62}}")
        if name in spaces:
            raise ConfigError(f"{where}.name: {name!r} is named twice")
        prefix = _string(entry, where, "id_prefix")
        if len(prefix) > MAX_PREFIX_CHARS or not ID_PATTERN.fullmatch(prefix):
            raise ConfigError(
                f"{where}.id_prefix: {prefix!r} is not 1-{MAX_PREFIX_CHARS} characters"
                " from [A-Za-z0-9._:-]"
            )
        spaces[name] = Namespace(
            name, prefix, routing_key_patterns(entry, where), parse_quota(entry, where)
        )
    _disjoint(list(spaces.values()))
    return spaces


def _disjoint(spaces: list[Namespace]) -> None:
    """No prefix starts with another. Sorted, the prefixes that start with one
    come right after it, so adjacent pairs are enough (n log n)."""
    ordered = sorted(spaces, key=lambda space: space.id_prefix)
    for before, after in itertools.pairwise(ordered):
        if after.id_prefix.startswith(before.id_prefix):
            raise ConfigError(
                f"namespace {after.name!r}: id_prefix {after.id_prefix!r} starts with"
                f" namespace {before.name!r}'s {before.id_prefix!r} (an id would be in both)"
            )


def routing_key_patterns(entry: Mapping[str, object], where: str) -> tuple[str, ...]:
    """An entry's ``routing_keys`` (a namespace's, a webhook target's): AMQP
    topic patterns, each once, in the order written; ConfigError names it."""
    patterns = entry.get("routing_keys")
    if not isinstance(patterns, list) or not patterns:
        raise ConfigError(f"{where}.routing_keys: a non-empty list of routing key patterns")
    if len(patterns) > MAX_PATTERNS:
        raise ConfigError(f"{where}.routing_keys: more than {MAX_PATTERNS} patterns")
    for pattern in patterns:
        why = pattern_error(pattern)
        if why is not None:
            raise ConfigError(f"{where}.routing_keys: {pattern!r}: {why}")
    return tuple(dict.fromkeys(patterns))


def _token(
    entry: Mapping[str, object], where: str, spaces: Mapping[str, Namespace]
) -> tuple[str, Principal]:
    _known(entry, where, ("name", "namespace", "scopes", "sha256"))
    name = _string(entry, where, "name")
    if not _TOKEN_NAME.fullmatch(name):
        raise ConfigError(f"{where}.name: {name!r} is not [A-Za-z0-9][A-Za-z0-9_.:-]{{0,62}}")
    digest = _string(entry, where, "sha256")
    if not _SHA256.fullmatch(digest):
        raise ConfigError(
            f"{where}.sha256: 64 lower-case hex digits (triggerhook token new prints it)"
        )
    return digest, _acting(entry, where, spaces, name)


def _acting(
    entry: Mapping[str, object], where: str, spaces: Mapping[str, Namespace], name: str
) -> Principal:
    """Who an entry (a token, an AMQP user) acts as: its namespace and scopes."""
    space: Namespace | None = None
    if "namespace" in entry:
        space_name = _string(entry, where, "namespace")
        space = spaces.get(space_name)
        if space is None:
            raise ConfigError(f"{where}.namespace: no namespace named {space_name!r}")
    scopes = entry.get("scopes")
    if not isinstance(scopes, list) or not scopes or not set(scopes) <= set(SCOPES):
        raise ConfigError(f"{where}.scopes: a non-empty list of {', '.join(SCOPES)}")
    return Principal(name, space, frozenset(scopes))


def _known(entry: Mapping[str, object], where: str, keys: tuple[str, ...]) -> None:
    unknown = sorted(set(entry) - set(keys))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (expected {', '.join(keys)})")


def _string(entry: Mapping[str, object], where: str, key: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key}: a string is required")
    return value
