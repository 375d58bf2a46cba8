"""Sluice data plane: the Celery app, queues, the message contract and the worker-side task."""
