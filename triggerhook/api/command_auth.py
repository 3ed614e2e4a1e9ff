"""Who may send commands, and where replies may go — checked before the body is read.

:class:`CommandGuard` looks only at a message's properties (a header lookup
and a constant-time comparison), so an unauthorized command is dead-lettered
without its body ever being decoded. It raises
:class:`~triggerhook.api.command_messages.Rejected`:

* :class:`Unauthorized` when ``api_token`` (or ``namespaces_file``) is set and
  the message carries neither the header ``authorization: Bearer <token>`` of
  one of them nor a ``user_id`` of the file's ``[[amqp_user]]`` entries (it
  then acts in that entry's namespace, with its scopes) or of
  ``command_allowed_users`` (every namespace). RabbitMQ refuses a
  ``user_id`` other than the publishing connection's user, unless that user
  has the ``impersonator`` tag;
* ``forbidden_reply_to`` when ``reply_to`` is neither direct reply-to nor a
  queue whose name starts with ``command_reply_prefix``: the daemon must not
  be a tool to publish into any queue of the vhost.

:class:`~triggerhook.ratelimit.RateLimitedLog` keeps a flood of such commands from flooding the log.
"""

from __future__ import annotations

from collections.abc import Mapping

from triggerhook.api.access import Access
from triggerhook.api.command_messages import Rejected
from triggerhook.api.config import CommandConfig
from triggerhook.domain.namespaces import ALL, Principal
from triggerhook.domain.outcomes import Outcome

AUTH_HEADER = "authorization"
DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"
# A direct reply-to as the consumer receives it: the broker appends the
# requesting channel's key.
_DIRECT_REPLY_TO_PREFIX = DIRECT_REPLY_TO + "."
LOG_INTERVAL_S = 10.0


class Unauthorized(Rejected):
    """A command without a valid token or allowed user_id.

    Its dead letter's error header is just ``unauthorized``: which check
    failed is logged (rate-limited), not written next to the token attempt.
    """

    def __init__(self, message: str) -> None:
        super().__init__(Outcome.UNAUTHORIZED.code, message)

    @property
    def reason(self) -> str:
        return self.code


class CommandGuard:
    """The checks of one command channel, built from its configuration. Its
    namespaces file is re-read on the channel's I/O thread, which checks."""

    def __init__(self, config: CommandConfig) -> None:
        # Neither a token nor a file: the channel is open (vhost permissions only).
        self._access = Access(config.api_token, config.namespaces_file, config.namespaces_reload_s)
        self._users = config.allowed_users
        self._reply_prefix = config.reply_prefix
        # A reply must never land in a queue the daemon consumes itself.
        self._own_queues = frozenset({config.queue, f"{config.queue}.dead"})

    @property
    def authenticates(self) -> bool:
        return self._access.required

    def check(self, headers: object, user_id: object, reply_to: object) -> Principal:
        """Who the command acts as; raise :class:`Rejected` unless it may be
        applied and answered."""
        principal = self.authorize(headers, user_id)
        self.check_reply_to(reply_to)
        return principal

    def authorize(self, headers: object, user_id: object) -> Principal:
        if not self._access.required:
            return ALL
        if isinstance(user_id, str):
            # The file's entry first: it names the user's namespace and scopes.
            named = self._access.user(user_id)
            if named is not None:
                return named
            if user_id in self._users:
                return ALL
        given = headers.get(AUTH_HEADER) if isinstance(headers, Mapping) else None
        if given is None:
            raise Unauthorized(_without_token(user_id))
        # Only ASCII text can be "Bearer <token>"; anything else is wrong, never an error.
        if not (isinstance(given, str) and given.isascii()):
            raise Unauthorized("authorization header is not ASCII text")
        principal = self._access.principal(given)
        if principal is None:
            raise Unauthorized("wrong bearer token")
        return principal

    def check_reply_to(self, reply_to: object) -> None:
        if reply_to is None or reply_to == "":
            return  # no reply asked for
        if not isinstance(reply_to, str):
            raise _forbidden("reply_to is not text")
        if reply_to == DIRECT_REPLY_TO or reply_to.startswith(_DIRECT_REPLY_TO_PREFIX):
            return
        if reply_to in self._own_queues:
            raise _forbidden(f"reply_to {reply_to!r} is a command queue")
        prefix = self._reply_prefix
        if prefix and reply_to.startswith(prefix):
            return
        allowed = f"or a queue starting with {prefix!r}" if prefix else "(the only one allowed)"
        raise _forbidden(
            f"reply_to {reply_to!r} is not direct reply-to ({DIRECT_REPLY_TO}) {allowed}"
        )


def _forbidden(detail: str) -> Rejected:
    return Rejected.of(Outcome.FORBIDDEN_REPLY_TO, detail=detail)


def _without_token(user_id: object) -> str:
    if isinstance(user_id, str) and user_id:
        return f"no authorization header, and user_id {user_id!r} is not allowed"
    return "no authorization header and no user_id"
