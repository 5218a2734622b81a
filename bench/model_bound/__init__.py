"""Model-bound runs on one worker host: the framework against the latency-bound ideal and a bare chord.

``python -m bench.model_bound`` (see ``bench/README.md``): N runs, each a loop of
3 calls of 200 ms, fanned out as one composite (``max_concurrency = None``) on a
``--pool threads`` worker, beside a bare Celery chord of N tasks that wait the
same way, on the same Redis, worker and pool.
"""
