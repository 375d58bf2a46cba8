"""Exceptions raised by DAG authoring, loading and task execution.

All but ``TaskTimeout`` and ``TaskStopped`` derive from ``Exception``: a task runner
that catches ``Exception`` sees every one of them, and a worker shutdown
(``SystemExit``) is never mistaken for one. ``TaskTimeout`` and ``TaskStopped`` derive
from ``BaseException`` on purpose, as Airflow's ``AirflowTaskTimeout`` does: a task's own
``except Exception`` must not swallow the timeout or the stop of its try (a runner
catches them by name). A body that swallows even those is killed after a grace
(``SLUICE_TIMEOUT_GRACE``, ``broker.worker.time_limits``).
"""

from __future__ import annotations


class DagDefinitionError(Exception):
    """A DAG or task is defined wrongly; the message is one line meant for the user."""


class Skip(Exception):
    """Raised by a task to mark itself (and, by trigger rules, its dependents) skipped."""


class TaskTimeout(BaseException):
    """A task ran past its ``execution_timeout`` (or a callback past its timeout, a DAG
    file's import past ``SLUICE_PARSE_TIMEOUT``)."""


class TaskStopped(BaseException):
    """The try was stopped while it ran (its run cancelled, the TI marked or timed out):
    raised inside the task's code by the worker; the try's state is already written."""


class ResultError(Exception):
    """A task's return value cannot be stored (not JSON-serialisable, or too large)."""


class ShellCommandError(Exception):
    """A shell task's command exited with a non-zero code.

    ``returncode`` is the exit code; ``stderr_tail`` is the last stderr line (may be empty).
    """

    def __init__(self, message: str, returncode: int, stderr_tail: str) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr_tail = stderr_tail
