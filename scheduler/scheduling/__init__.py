"""Scheduling decisions: readiness and trigger rules (`deps`), runs (`dagrun`), queueing
within pools and limits (`queueing`), the worker's decision of what follows a result
(`downstream`), timetables, span lifecycle and the DAG folder's sync.

Used by the scheduler's jobs and by the worker's result path; built on `core` only. It
neither publishes nor runs tasks: callers publish what it queued, after their commit.
"""
