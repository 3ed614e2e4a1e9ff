"""RabbitMQ adapter (pika): the only package that imports the broker client."""
