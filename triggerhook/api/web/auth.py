"""Who may see the web view, and which forms are genuine (pure: no I/O).

* Login: when the API takes tokens (``api_token``, ``namespaces_file``), a
  request carries ``Authorization: Bearer <token>`` or the session cookie
  that ``/ui/login`` sets once a token was typed in. The cookie holds an
  expiry and the token's name (``api_token``, or its entry's in the
  namespaces file: the handlers look the name up again on every request, so
  removing a token from the file ends its sessions) and their HMAC under a
  key derived from the session secret, never the token itself. The secret
  is ``api_token`` when set (changing it ends every session), else
  ``web_session_token``, which ``triggerhook run`` makes at random at
  start when it is not set, for all of its API processes (they share the
  port).
* CSRF: a form's hidden ``csrf`` field is the HMAC of a random nonce kept in
  the ``th_csrf`` cookie (SameSite=Strict, HttpOnly). Another site's page can
  neither read the field nor, as it does not know the key, make one for a
  nonce it planted. The key is derived from the token too; without a token it
  is a random secret of this process.

Every comparison is constant-time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping

SESSION_COOKIE = "th_session"
CSRF_COOKIE = "th_csrf"
CSRF_FIELD = "csrf"
COOKIE_PATH = "/ui"
SESSION_S = 12 * 3600  # a login lasts this long
_NONCE = re.compile(r"[0-9a-f]{32}")
# An expiry, a token's name (namespaces.py: [A-Za-z0-9][A-Za-z0-9_.:-]*), a MAC.
_SESSION = re.compile(r"([0-9]{1,12})\.([A-Za-z0-9][A-Za-z0-9_.:-]{0,62})\.([0-9a-f]{64})")


def _mac(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def _derive(secret: bytes, purpose: str) -> bytes:
    return hmac.new(secret, f"triggerhook web view: {purpose}".encode(), hashlib.sha256).digest()


class WebAuth:
    """Sessions and CSRF tokens under one secret."""

    def __init__(self, secret: str, required: bool, process_secret: bytes | None = None) -> None:
        """``secret``: the session key's source (empty: ``process_secret``, by
        default random: forms and sessions of before a restart are refused
        after it); ``required``: whether the pages need a login at all."""
        key = secret.encode() or process_secret or secrets.token_bytes(32)
        self._session_key = _derive(key, "session")
        self._csrf_key = _derive(key, "csrf")
        self.required = required

    # -- login --------------------------------------------------------------------

    def new_session(self, who: str, now_s: float) -> str:
        """A session cookie's value for token ``who``, valid for :data:`SESSION_S`."""
        signed = f"{int(now_s) + SESSION_S}.{who}"
        return f"{signed}.{_mac(self._session_key, signed)}"

    def session_of(self, value: str | None, now_s: float) -> str | None:
        """The token name of a cookie :meth:`new_session` made under this
        secret, not expired; None: no such session."""
        if not self.required or value is None:
            return None
        found = _SESSION.fullmatch(value)
        if found is None:
            return None
        expires, who, mac = found.groups()
        genuine = hmac.compare_digest(mac, _mac(self._session_key, f"{expires}.{who}"))
        return who if genuine and now_s < int(expires) else None

    def logged_in(self, cookies: Mapping[str, str], now_s: float) -> str | None:
        return self.session_of(cookies.get(SESSION_COOKIE), now_s)

    # -- forms ----------------------------------------------------------------------

    @staticmethod
    def nonce_of(cookies: Mapping[str, str]) -> str | None:
        """The browser's CSRF nonce, when it has a well-formed one."""
        value = cookies.get(CSRF_COOKIE)
        return value if value is not None and _NONCE.fullmatch(value) else None

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_hex(16)

    def form_token(self, nonce: str) -> str:
        """The hidden field of every form rendered for ``nonce``."""
        return _mac(self._csrf_key, f"csrf:{nonce}")

    def form_genuine(self, cookies: Mapping[str, str], fields: Mapping[str, str]) -> bool:
        """The form came from one of our pages in this browser."""
        nonce = self.nonce_of(cookies)
        given = fields.get(CSRF_FIELD, "")
        if nonce is None:
            return False
        return hmac.compare_digest(
            given.encode("utf-8", "replace"), self.form_token(nonce).encode()
        )
