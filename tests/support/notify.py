"""A stand-in for systemd's notification socket: a datagram socket that keeps
every message sent to it (``KEY=VALUE`` lines, see triggerhook/sdnotify.py)."""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Self


class NotifySocket:
    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="th-notify-")
        self.path = str(Path(self._dir.name) / "notify.sock")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(self.path)
        self._sock.settimeout(0.1)
        self.messages: list[dict[str, str]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._closed:
            try:
                data = self._sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            with self._cond:
                self.messages.append(fields)
                self._cond.notify_all()

    def count(self, key: str) -> int:
        with self._cond:
            return sum(1 for message in self.messages if key in message)

    def wait_for(self, key: str, count: int = 1, timeout_s: float = 20.0) -> bool:
        """Wait until ``count`` messages carrying ``key`` arrived."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while sum(1 for m in self.messages if key in m) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def close(self) -> None:
        self._closed = True
        self._reader.join(1)
        self._sock.close()
        self._dir.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
