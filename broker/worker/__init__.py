"""The worker side: the Celery task that runs one TaskInstance (`task`), its runtime
(`runner`, `result`, `heartbeat`, `task_logs`, `tracing`), the in-process worker
of `sluice standalone` (`embedded`), starting a worker process (`process`) and installing
Sluice on a user's Celery app (`attaching`).

It decides what follows a result through `sluice.scheduler.decide` and publishes
through `sluice.broker.publisher`; it never imports the scheduler's jobs.
"""
