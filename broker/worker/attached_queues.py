"""The Sluice queues a worker of an attached app consumes, beside the app's own.

`attach` stores them as `app.conf.sluice_worker_queues` (`worker_queues`: the Celery
queues `<namespace>.default`, `<namespace>.<callback_queue>` and those it was given; none
with `consume=False`). Two of Celery's worker signals do the rest, for that app's workers
only (`celery worker`, `app.Worker`, `app.worker_main`):

- `celeryd_init`, sent before the worker applies `-Q`/`-X`: a worker started without `-Q`
  adds them with `app.amqp.queues.select_add`, so they join the queues it consumes by
  default (the app's `task_queues`, else its default queue), and `-X` can still leave one
  out. A queue the app declares itself (in `task_queues`) keeps its declaration; another is
  declared as Celery declares a queue it routes to (`Queues.new_missing`), as `-Q` would.
- `celeryd_after_setup`, sent once `-Q`/`-X` are applied and logging is set up, before the
  banner: a worker that consumes none of them logs one WARNING naming them (Sluice's
  tasks sent there would wait in `queued`). A worker whose `-Q` names some is left alone:
  a worker for one queue is a choice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from celery.signals import celeryd_after_setup, celeryd_init

from sluice.broker.queues import DEFAULT_QUEUE, celery_queue
from sluice.scheduler.core.settings import Settings

WORKER_QUEUES = "sluice_worker_queues"
"""The app's configuration key holding the Celery queues its workers consume for Sluice."""

log = logging.getLogger(__name__)


def worker_queues(settings: Settings, queues: Iterable[str]) -> tuple[str, ...]:
    """The Celery queues of Sluice queues "default", the callback queue and `queues`, in
    that order, each once."""
    wanted = [DEFAULT_QUEUE, settings.callback_queue, *queues]
    return tuple(dict.fromkeys(celery_queue(settings.namespace, q) for q in wanted))


@celeryd_init.connect
def _consume_by_default(instance: Any, conf: Any, options: Mapping[str, Any], **_: Any) -> None:
    """Before `-Q` is applied: without `-Q`, add the app's Sluice queues to those consumed."""
    names = conf.get(WORKER_QUEUES)
    if not names or options.get("queues"):
        return
    queues = instance.app.amqp.queues
    for name in names:
        queues.select_add(queues.get(name) or queues.new_missing(name))


@celeryd_after_setup.connect
def _warn_if_none_consumed(instance: Any, conf: Any, **_: Any) -> None:
    """After `-Q`/`-X`: one WARNING if the worker consumes none of the app's Sluice queues."""
    names = conf.get(WORKER_QUEUES)
    if not names:
        return
    consumed = instance.app.amqp.queues.consume_from
    if not any(name in consumed for name in names):
        log.warning(
            "this worker consumes none of Sluice's queues (%s): Sluice's tasks sent there "
            "wait in 'queued'; add them to -Q, or start the worker without -Q",
            ", ".join(names),
        )
