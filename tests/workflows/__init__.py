"""The runnables the tests register, one module a subject (``workflows.parity``, ``workflows.human``...).

``tests/`` is on the path of the tests and of the workers they start, so a test imports one as
``workflows.<subject>`` and a worker loads it with ``AGENTLOOP_IMPORTS=workflows.<subject>``. A
runnable named by its class is ``workflows.<subject>.<Class>``.
"""
