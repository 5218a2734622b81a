"""The fault suite: faults a hostile production environment deals a deployment, on a real
prefork worker, a private Redis and a private PostgreSQL database, with real workflows.

``python -m tests.faults`` (``make faults``) runs every scenario and prints, for each, the runs
tried / completed / failed with a reason / lost / stuck (:mod:`.tally` says what each means);
``--quick`` is the small version CI runs inside the test suite (``test_fault_suite.py``).
``python -m tests.faults soak`` (``make soak``) is the bounded soak (:mod:`.soak`).
``python -m tests.faults matrix`` (also in ``make faults``) is the guarantee matrix (:mod:`.matrix`):
the invariants of :mod:`.invariants` over paths, model steps, brokers and faults combined; its
CI cells run in ``test_matrix.py``, the checks' own tests in ``test_invariants.py``.

- :mod:`.rig`: the servers, the worker, the clients; :mod:`.workload`: the mixed runs;
- :mod:`.infra_scenarios`: worker SIGKILL, pool child killed, Redis restart, PostgreSQL outages;
- :mod:`.message_scenarios`: poison messages (:mod:`.poison`), duplicate run ids, model outages
  (:mod:`.chaos_model`);
- :mod:`.suite`: the order they run in; :mod:`.tally`: the classification and the table.
"""
