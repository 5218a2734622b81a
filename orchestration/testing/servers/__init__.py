"""Private servers for integration tests: Redis, PostgreSQL, RabbitMQ, an OpenAI-wire server,
and real worker processes configured like production."""
