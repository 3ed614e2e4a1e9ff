"""What the publisher and the command consumer share about a pika connection."""

from __future__ import annotations

from typing import Any

import pika.exceptions


def close_connection(conn: Any) -> None:
    """Close a ``SelectConnection`` from its I/O thread, in whatever state it is.

    One still connecting is not closed but its loop stopped: pika cannot abort
    its own handshake cleanly (closing then fails an assertion inside pika's
    connection workflow, which would kill the thread); the socket goes with
    the connection object.
    """
    if conn.is_closing or conn.is_closed:
        return
    if not conn.is_open:
        conn.ioloop.stop()
        return
    try:
        conn.close()
    except pika.exceptions.ConnectionWrongStateError:
        conn.ioloop.stop()
