"""The local event publisher of ``triggerhook dev``: fired events as JSON lines
on stdout and/or HTTP POSTs to a webhook, instead of RabbitMQ (docs/dev.md)."""
