"""The Host rule against DNS rebinding (triggerhook/api/hosts.py), as pure
functions: parsing a ``Host`` header, and which ones a rule accepts, for
hand-picked cases and for generated names, ports and IP addresses; and the
``http_allowed_hosts`` setting's checks."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triggerhook.api.hosts import HostRule, host_name
from triggerhook.errors import ConfigError
from triggerhook.settings import Settings

LOOPBACK = HostRule.of("127.0.0.1", api_token=False, allowed=())
LISTED = HostRule.of("127.0.0.1", api_token=False, allowed=("api.test", ".svc.example"))

_LABEL = st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}", fullmatch=True)
NAMES = st.lists(_LABEL, min_size=1, max_size=4).map(".".join)
PORTS = st.one_of(st.just(""), st.integers(0, 65535).map(lambda port: f":{port}"))
IPV4 = st.ip_addresses(v=4).map(str)
IPV6 = st.ip_addresses(v=6).map(lambda ip: f"[{ip}]")


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost:8080", "localhost"),
        ("LocalHost", "localhost"),
        ("localhost.:8080", "localhost"),
        ("127.0.0.1:8080", "127.0.0.1"),
        ("[::1]:8080", "::1"),
        ("[::1]", "::1"),
        ("api.test:", "api.test"),
        ("evil.example:80", "evil.example"),
        ("", None),
        ("::1", None),  # IPv6 needs its brackets
        ("[::1", None),
        ("[evil.example]:80", None),
        ("a b", None),
        ("user@localhost", None),
        ("localhost:80:80", None),
        ("localhost:http", None),
        ("localhost:65536", None),
        ("localhost:123456", None),
        ("[::1]x", None),
    ],
)
def test_a_host_header_is_parsed_or_refused(header: str, name: str | None) -> None:
    assert host_name(header) == name


@pytest.mark.parametrize(
    ("rule", "header", "accepted"),
    [
        (LOOPBACK, None, True),  # HTTP/1.0: no browser
        (LOOPBACK, "localhost:8080", True),
        (LOOPBACK, "127.0.0.1:8080", True),
        (LOOPBACK, "[::1]:9999", True),  # any port: a tunnel's
        (LOOPBACK, "10.1.2.3:8080", True),  # a pod's address
        (LOOPBACK, "evil.example:8080", False),
        (LOOPBACK, "localhost.evil.example", False),
        (LOOPBACK, "evil.localhost", False),
        (LOOPBACK, "not a host", False),
        (LISTED, "api.test:8080", True),
        (LISTED, "API.TEST", True),
        (LISTED, "svc.example", True),
        (LISTED, "a.b.svc.example:1", True),
        (LISTED, "xsvc.example", False),
        (LISTED, "api.test.evil.example", False),
        (HostRule.of("myhost.lan", False, ()), "myhost.lan:8080", True),  # http_host's name
        (HostRule.of("0.0.0.0", False, ()), "evil.example", False),  # no token: checked
        (HostRule.of("0.0.0.0", True, ()), "evil.example", True),  # public, token: open
        (HostRule.of("0.0.0.0", True, ("api.test",)), "evil.example", False),  # a list: checked
        (HostRule.of("127.0.0.1", True, ()), "evil.example", False),  # loopback: checked
        (HostRule.of("127.0.0.1", False, ("*",)), "evil.example", True),
    ],
)
def test_the_rule(rule: HostRule, header: str | None, accepted: bool) -> None:
    assert rule.accepts(header) is accepted


@given(ip=st.one_of(IPV4, IPV6), port=PORTS)
def test_any_ip_address_with_any_port_is_accepted(ip: str, port: str) -> None:
    assert LOOPBACK.accepts(ip + port)


@given(name=NAMES, port=PORTS)
def test_a_name_is_accepted_only_when_listed(name: str, port: str) -> None:
    listed = name in ("localhost", "api.test", "svc.example") or name.endswith(".svc.example")
    try:
        ipaddress.ip_address(name)  # "1.2.3.4" drawn as labels: an address
        listed = True
    except ValueError:
        pass
    assert LISTED.accepts(name + port) is listed
    assert LISTED.accepts(name.upper() + "." + port) is listed  # case, a trailing dot


@given(header=st.text(max_size=40))
def test_any_text_is_answered_without_an_error(header: str) -> None:
    name = host_name(header)
    assert name is None or name == name.lower()
    LOOPBACK.accepts(header)


@pytest.mark.parametrize("value", ["http://api.test", "api.test:8080", "a b", "[::1]", "*.x"])
def test_a_bad_allowed_host_is_an_error_naming_the_setting(value: str) -> None:
    with pytest.raises(ConfigError, match=r"http_allowed_hosts: .* is not a host name"):
        Settings(http_allowed_hosts=f"ok.test, {value}")


def test_allowed_hosts_are_a_lower_case_list() -> None:
    settings = Settings(http_allowed_hosts=" API.test , .Svc.Example., *")
    assert settings.allowed_hosts() == ["api.test", ".svc.example", "*"]
    assert Settings().allowed_hosts() == []
