"""The Celery adapter: the app factory, the tasks, the canvas compiler, batches and schedules,
privacy for Flower and logs, and the library patches a worker applies at start."""
