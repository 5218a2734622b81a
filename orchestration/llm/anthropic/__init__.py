"""The Anthropic provider: the Messages API on the official ``anthropic`` SDK (processor, mapping, stream,
errors; the ``anthropic`` extra).

Importing this package loads no SDK; every import in the project is absolute, so
``import anthropic`` anywhere (here too) is the SDK, never this package.
"""
