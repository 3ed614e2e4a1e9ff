"""Who may see the web view, and which forms are genuine (pure: no I/O).

* Login: with ``api_token`` set, a request carries ``Authorization: Bearer
  <token>`` (checked by the HTTP API, like /v1) or the session cookie that
  ``/ui/login`` sets once the token was typed in. The cookie holds an expiry
  and its HMAC under a key derived from the token, never the token itself:
  every API process (they share the port) and a restarted daemon accept it,
  and changing the token ends every session.
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
_SESSION = re.compile(r"([0-9]{1,12})\.([0-9a-f]{64})")


def _mac(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def _derive(secret: bytes, purpose: str) -> bytes:
    return hmac.new(secret, f"triggerhook web view: {purpose}".encode(), hashlib.sha256).digest()


class WebAuth:
    """Sessions and CSRF tokens for one API token (empty: the pages are open)."""

    def __init__(self, api_token: str, process_secret: bytes | None = None) -> None:
        """``process_secret``: the CSRF key's source without a token (default:
        random, so forms rendered before a restart are refused after it)."""
        self._token = api_token.encode()
        secret = self._token or process_secret or secrets.token_bytes(32)
        self._session_key = _derive(secret, "session")
        self._csrf_key = _derive(secret, "csrf")

    @property
    def required(self) -> bool:
        """Whether the pages need a login at all."""
        return bool(self._token)

    # -- login --------------------------------------------------------------------

    def token_matches(self, given: str) -> bool:
        """The token typed into the login form (constant-time)."""
        if not self._token:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self._token)

    def new_session(self, now_s: float) -> str:
        """A session cookie's value, valid for :data:`SESSION_S`."""
        expires = str(int(now_s) + SESSION_S)
        return f"{expires}.{_mac(self._session_key, expires)}"

    def session_valid(self, value: str | None, now_s: float) -> bool:
        """A cookie :meth:`new_session` made with this token, not expired."""
        if not self._token or value is None:
            return False
        found = _SESSION.fullmatch(value)
        if found is None:
            return False
        expires, mac = found.groups()
        genuine = hmac.compare_digest(mac, _mac(self._session_key, expires))
        return genuine and now_s < int(expires)

    def logged_in(self, cookies: Mapping[str, str], now_s: float) -> bool:
        return self.session_valid(cookies.get(SESSION_COOKIE), now_s)

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
