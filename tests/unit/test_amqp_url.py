"""amqp_url as a list of nodes: how it is read (several URLs, each checked,
errors naming the one that is wrong)."""

from __future__ import annotations

import pytest

from triggerhook.amqp.connection import amqp_parameters, node_name
from triggerhook.errors import ConfigError
from triggerhook.settings import load_settings

ONE = "amqp://guest:guest@127.0.0.1:5681/%2F"
TWO = "amqp://guest:guest@127.0.0.1:5682/%2F"
THREE = "amqps://u:p@rabbit-3.example:5671/prod"


@pytest.mark.parametrize(
    "urls",
    [
        f"{ONE} {TWO} {THREE}",
        f"{ONE},{TWO},{THREE}",
        f" {ONE} ,\n{TWO}\t{THREE} ",
        f"{ONE},,{TWO} {THREE}",
    ],
)
def test_several_urls_are_the_nodes_in_order(urls: str) -> None:
    nodes = amqp_parameters(urls)
    assert [node_name(n) for n in nodes] == [
        "127.0.0.1:5681",
        "127.0.0.1:5682",
        "rabbit-3.example:5671",
    ]
    assert nodes[2].virtual_host == "prod" and nodes[2].ssl_options is not None
    assert all(n.connection_attempts == 1 for n in nodes)  # the loop moves on, not pika


def test_one_url_is_one_node() -> None:
    [node] = amqp_parameters(ONE)
    assert (node.host, node.port, node.virtual_host) == ("127.0.0.1", 5681, "/")
    assert node.credentials.username == "guest"


@pytest.mark.parametrize(
    ("urls", "message"),
    [
        ("", "amqp_url: give at least one amqp:// or amqps:// URL"),
        (" , ", "amqp_url: give at least one amqp:// or amqps:// URL"),
        ("127.0.0.1:5672", "amqp_url: must start with amqp:// or amqps://"),
        (f"{ONE} http://127.0.0.1:15672", "amqp_url (URL 2 of 2): must start with amqp://"),
        (f"{ONE} amqp://h:notaport/%2F", "amqp_url (URL 2 of 2): "),
        (" ".join([ONE] * 17), "amqp_url: at most 16 URLs"),
    ],
)
def test_a_bad_list_is_refused_naming_the_url(urls: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        amqp_parameters(urls)
    assert str(refused.value).startswith(message)


def test_the_password_is_never_in_a_node_name() -> None:
    assert "p@" not in node_name(amqp_parameters(THREE)[0])


def test_the_queue_type_gives_the_queues_arguments() -> None:
    assert load_settings(environ={}).queue_arguments() == {}  # classic: RabbitMQ's default
    quorum = load_settings(environ={"TRIGGERHOOK_AMQP_QUEUE_TYPE": "quorum"})
    assert quorum.queue_arguments() == {"x-queue-type": "quorum"}


@pytest.mark.parametrize("queue_type", ["", "Quorum", "mirrored", "stream"])
def test_an_unknown_queue_type_is_refused(queue_type: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={"TRIGGERHOOK_AMQP_QUEUE_TYPE": queue_type})
    assert str(refused.value) == "amqp_queue_type: must be one of classic, quorum"
