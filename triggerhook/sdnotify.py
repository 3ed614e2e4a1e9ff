"""The systemd notification protocol (sd_notify), spoken directly.

Under ``Type=notify`` systemd passes ``NOTIFY_SOCKET`` (a datagram socket's
path, or ``@name`` for the abstract namespace) and, with ``WatchdogSec=``,
``WATCHDOG_USEC`` (and ``WATCHDOG_PID``). Each message is one datagram of
``KEY=VALUE`` lines: ``READY=1``, ``STATUS=...``, ``WATCHDOG=1``,
``STOPPING=1``. Outside systemd every call is a no-op.

The daemon sends READY only once it is ready (``/readyz`` answers 200, see
triggerhook/service.py); systemd's watchdog runs from then on.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        self._address = "\0" + path[1:] if path.startswith("@") else path
        self.watchdog_s = _watchdog_s(env)

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def notify(self, *lines: str) -> bool:
        """Send one message; False when not under systemd or the send failed."""
        if not self._address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto("\n".join(lines).encode(), self._address)
        except OSError as exc:
            log.warning("sd_notify to %r failed: %s", self._address, exc)
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}")

    def status(self, status: str) -> bool:
        """A STATUS= line alone (``systemctl status`` shows it), e.g. why a start
        is still waiting."""
        return self.notify(f"STATUS={status}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self, status: str) -> bool:
        return self.notify("STOPPING=1", f"STATUS={status}")


def _watchdog_s(env: Mapping[str, str]) -> float | None:
    """The watchdog timeout in seconds, when it is meant for this process."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid != str(os.getpid()):
        return None
    return int(usec) / 1_000_000
