"""Evaluations: a registered runnable run over a dataset, each output scored, the results kept.

``agentloop eval RUNNABLE DATASET.jsonl --scorer SPEC`` (:mod:`agentloop.orchestration.cli.evals`, which
parses and prints) runs :func:`~agentloop.orchestration.evals.evaluation.evaluate`, which puts these together:

- :mod:`~agentloop.orchestration.evals.dataset`: the JSON Lines dataset, each line checked;
- :mod:`~agentloop.orchestration.evals.running`: the runs, in-process or as one Celery batch;
- :mod:`~agentloop.orchestration.evals.scorers` (and :mod:`~agentloop.orchestration.evals.judge`,
  the model-judged scorer's typed step): what ``--scorer`` names;
- :mod:`~agentloop.orchestration.evals.evaluation`: one evaluation: the runs, each case's scores, the report;
- :mod:`~agentloop.orchestration.evals.report`, :mod:`~agentloop.orchestration.evals.version`: the
  result, with the code version and the model;
- :mod:`~agentloop.orchestration.evals.keep`: kept under ``AGENTLOOP_HOME/evals/``;
- :mod:`~agentloop.orchestration.evals.compare`, :mod:`~agentloop.orchestration.evals.pages`: what
  changed between two, and the HTML pages.
"""
