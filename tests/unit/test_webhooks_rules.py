"""The webhook targets' rules (triggerhook/domain/webhooks.py): the file's
errors name ``webhook[i].field``; the signature of a known vector; which
addresses a target may not call, against the ipaddress module's own
properties; what a status means; the back-off, seeded and replayable."""

from __future__ import annotations

import ipaddress
import random
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triggerhook.domain.webhooks import (
    Verdict,
    WebhookTarget,
    address_refusal,
    backoff_ms,
    parse_webhooks,
    retry_after_s,
    signature,
    verdict,
)
from triggerhook.errors import ConfigError

GOOD: dict[str, object] = {
    "name": "billing",
    "url": "https://hooks.example.com/in",
    "routing_keys": ["billing.#"],
}


def _one(**fields: object) -> dict[str, object]:
    return {"webhook": [{**GOOD, "secret_file": "/etc/th/billing.secret", **fields}]}


def test_a_good_entry_with_its_defaults() -> None:
    (target,) = parse_webhooks(_one())
    assert target == WebhookTarget(
        "billing",
        "https://hooks.example.com/in",
        ("billing.#",),
        secret_file="/etc/th/billing.secret",
    )
    assert (target.concurrency, target.timeout_s, target.max_attempts) == (4, 10.0, 8)
    assert target.takes("billing.invoice.due") and not target.takes("shipping.x")


def test_no_file_no_targets() -> None:
    assert parse_webhooks({}) == ()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"name": "Billing"}, "webhook[0].name"),
        ({"url": "ftp://x/"}, "webhook[0].url"),
        ({"url": "http:///nohost"}, "webhook[0].url"),
        ({"url": "http://h:99999/"}, "webhook[0].url"),
        ({"routing_keys": []}, "webhook[0].routing_keys"),
        ({"routing_keys": ["a..b"]}, "webhook[0].routing_keys"),
        ({"secret_file": ""}, "webhook[0].secret_file"),
        ({"secret_env": "1BAD"}, "webhook[0].secret_env"),
        ({"concurrency": 0}, "webhook[0].concurrency"),
        ({"concurrency": 65}, "webhook[0].concurrency"),
        ({"concurrency": True}, "webhook[0].concurrency"),
        ({"timeout_s": 0}, "webhook[0].timeout_s"),
        ({"timeout_s": "10"}, "webhook[0].timeout_s"),
        ({"max_attempts": 0}, "webhook[0].max_attempts"),
        ({"backoff_initial_ms": 10, "backoff_max_ms": 5}, "webhook[0].backoff_max_ms"),
        ({"allow_private": "yes"}, "webhook[0].allow_private"),
        ({"colour": "red"}, "webhook[0].colour"),
    ],
)
def test_an_error_names_the_entry_and_its_field(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_webhooks(_one(**fields))
    assert str(caught.value).startswith(named + ":")


def test_the_url_is_never_in_the_error() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_webhooks(_one(url="gopher://user:hunter2@x/"))
    assert "hunter2" not in str(caught.value)


def test_a_name_twice_and_other_tables() -> None:
    entry = {**GOOD, "secret_env": "BILLING_SECRET"}
    with pytest.raises(ConfigError, match=r"webhook\[1\]\.name: 'billing' is named twice"):
        parse_webhooks({"webhook": [entry, entry]})
    with pytest.raises(ConfigError, match="unknown table 'hook'"):
        parse_webhooks({"hook": []})
    with pytest.raises(ConfigError, match=r"webhook\[0\]: must be a table"):
        parse_webhooks({"webhook": ["x"]})


def test_the_signature_of_a_known_vector() -> None:
    # Computed independently: printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac whsec_test
    expected = "v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
    got = signature((b"whsec_test",), 1_700_000_000, b'{"a":1}')
    assert got == expected


def test_two_secrets_two_signatures() -> None:
    both = signature((b"new", b"old"), 5, b"x")
    assert both.split(",") == [signature((b"new",), 5, b"x"), signature((b"old",), 5, b"x")]


def _is_refused_by_ipaddress(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        address.is_loopback
        or address.is_link_local
        or address.is_private
        or address.is_unspecified
        or address.is_multicast
        or address.is_reserved
        or not address.is_global
    )


@given(st.ip_addresses())
def test_an_address_is_refused_exactly_when_it_is_not_public(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    assert (address_refusal(address) is not None) == _is_refused_by_ipaddress(address)


@pytest.mark.parametrize(
    "text",
    ["127.0.0.1", "169.254.169.254", "10.1.2.3", "172.16.0.1", "192.168.1.1", "0.0.0.0",
     "::1", "fe80::1", "fd00::1", "::ffff:169.254.169.254", "224.0.0.1", "100.64.0.1"],
)  # fmt: skip
def test_the_addresses_a_target_must_not_reach(text: str) -> None:
    assert address_refusal(ipaddress.ip_address(text)) is not None


@pytest.mark.parametrize("text", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_pass(text: str) -> None:
    assert address_refusal(ipaddress.ip_address(text)) is None


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, Verdict.DELIVERED),
        (204, Verdict.DELIVERED),
        (299, Verdict.DELIVERED),
        (301, Verdict.DEAD),
        (400, Verdict.DEAD),
        (401, Verdict.DEAD),
        (404, Verdict.DEAD),
        (408, Verdict.RETRY),
        (410, Verdict.DEAD),
        (429, Verdict.RETRY),
        (500, Verdict.RETRY),
        (503, Verdict.RETRY),
        (599, Verdict.RETRY),
    ],
)
def test_what_a_status_means(status: int, expected: Verdict) -> None:
    assert verdict(status) is expected


@given(st.integers(0, 2**32), st.integers(1, 10_000), st.integers(1, 100_000))
def test_the_backoff_is_replayable_and_bounded(seed: int, initial_ms: int, extra_ms: int) -> None:
    max_ms = initial_ms + extra_ms
    first = [backoff_ms(n, initial_ms, max_ms, random.Random(seed)) for n in range(1, 12)]
    again = [backoff_ms(n, initial_ms, max_ms, random.Random(seed)) for n in range(1, 12)]
    assert first == again
    for attempt, wait_ms in enumerate(first, start=1):
        ceiling = min(max_ms, initial_ms * 2 ** (attempt - 1))
        assert ceiling / 2 <= wait_ms <= ceiling + 1


def test_the_backoff_schedule_of_a_seed() -> None:
    rng = random.Random(7)
    schedule = [backoff_ms(n, 100, 1000, rng) for n in range(1, 7)]
    assert schedule == [backoff_ms(n, 100, 1000, r) for n, r in _replay(7, 6)]
    assert all(500 <= wait <= 1000 for wait in schedule[4:])  # capped


def _replay(seed: int, count: int) -> list[tuple[int, random.Random]]:
    rng = random.Random(seed)
    return [(n, rng) for n in range(1, count + 1)]


def test_retry_after() -> None:
    now_s = 1_700_000_000.0
    assert retry_after_s(None, now_s, 60) is None
    assert retry_after_s("7", now_s, 60) == 7.0
    assert retry_after_s("7000", now_s, 60) == 60.0
    assert retry_after_s("soon", now_s, 60) is None
    date = format_datetime(datetime.fromtimestamp(now_s + 30, UTC), usegmt=True)
    assert retry_after_s(date, now_s, 60) == pytest.approx(30.0)
    past = format_datetime(datetime.fromtimestamp(now_s - 30, UTC), usegmt=True)
    assert retry_after_s(past, now_s, 60) == 0.0
