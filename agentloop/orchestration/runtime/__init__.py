"""The runtime: what runs a node of a run on a worker and decides its next step.

:class:`~agentloop.orchestration.runtime.engine.WorkflowEngine` runs one node (a loop, a
stage, a pack of branches) through the runnable contract, Celery-free; ``next_step`` is what
it answers (a value, stages to chain, branches to fan out); ``launches`` starts a run and
``run_gate`` admits a node of one; ``run_end`` records a failed run's end by whichever path
can reach the store; ``context`` builds the business context a runnable reads and
``step_cache`` the cache its steps share.
"""
