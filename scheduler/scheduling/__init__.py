"""The scheduler's passes on the database: runs (`dagrun`, `run_decision`,
`fresh_runs`), expanding mapped tasks, timetables, the DAG folder's sync, clearing,
cancelling, marking, timeouts and leftovers.

Used by the scheduler's jobs and the control plane; built on the decision core
(`sluice.scheduler.decide`, which the worker's result path uses too) and `core`. It
neither publishes nor runs tasks: callers publish what it queued, after their commit.
"""
