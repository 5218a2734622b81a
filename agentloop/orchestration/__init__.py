"""Orchestration: the only package that touches infrastructure.

Celery app and tasks, canvas compiler, runners, progress transports, the run
store and ``AiTool`` table (SQLAlchemy), the OpenAI processor, beat batches,
the CLI and the contract testing kit. Heavy imports stay in submodules so that
importing this package stays cheap.
"""
