"""Webhook targets in production (docs/webhooks.md): the events of some
routing keys, consumed from RabbitMQ and POSTed, signed, to a URL.

:mod:`.targets` reads the targets file and the secrets; :mod:`.bridge` runs
a consumer and its delivery threads per target, beside the engine (which it
never touches: an event reaches a target through the broker, so a webhook
never holds up publishing).
"""
