"""The daemon's service interfaces: the HTTP API and the AMQP command channel."""
