"""The contract testing kit: model doubles, a progress recorder, contract checks, local model
servers and the pytest plugin. Users import it from its front, :mod:`agentloop.testing`.
Importing this package does not import Celery.
"""
