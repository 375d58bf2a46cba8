"""`attach(app)`: install Sluice on an existing Celery app, so its workers serve Sluice queues.

What attach changes on the user's app, and nothing else:
- registers `sluice.run_task_instance` (declared `acks_late=True`, `ignore_result=True` on the
  task itself, so the app's global `task_acks_late`/`task_ignore_result` do not matter);
- stores the Sluice settings as `app.conf.sluice_settings` (where `settings_of` finds them);
- adds `"json"` to `accept_content` if it is missing (Sluice's messages are JSON);
- stores the Celery queues its workers consume for Sluice as `app.conf.sluice_worker_queues`
  (`broker.worker.attached_queues`): `<namespace>.default`, the callback queue
  (`<namespace>.callbacks`) and `<namespace>.<q>` for each `q` in `queues`; none with
  `consume=False` (an app that only sends). A worker started without `-Q` (`celery -A
  tasks worker`) consumes them beside the app's own queues; one whose `-Q` names none of
  them logs a WARNING at start.
The app's own tasks, routes, queues, serializers and result settings stay as they were:
`task_queues` is not touched, so what the app's producers route and declare is unchanged.

Refused with `AttachError` (one line), because Sluice cannot work with them:
- `task_always_eager`: tasks would run inside the publisher, with no worker and no claim;
- message signing (`task_serializer="auth"`, or `accept_content == ["auth"]`): the worker
  must accept only signed messages, and Sluice publishes plain JSON. Accepting JSON as
  well would defeat the signing, so attach does not do it;
- a broker URL different from the Sluice settings' `broker_url` (explicit settings only):
  schedulers publish to `broker_url`, so these workers would never see Sluice's messages;
- `task_create_missing_queues=False` with no `<namespace>.*` queue in `task_queues`:
  `-Q sluice.default` would fail at worker start;
- `queues` that are not Sluice queue names (a string rather than a list, an empty name, a
  comma or a space in one: `-Q` could not name it), or `queues` with `consume=False`.
Accepted on purpose: `task_serializer="pickle"` (even with pickle-only `accept_content`):
Sluice's schedulers publish through their own JSON-only app, so adding "json" to
`accept_content` is all the worker needs, and the app's own tasks keep pickle;
`task_acks_late=False` and `task_reject_on_worker_lost=False`: redelivery is only a hint
for Sluice (a try whose worker died is retried by the heartbeat sweep, a lost message by
the queued sweep).

Call `attach` after the app is configured (`config_from_object`, `conf.update`): it reads
the configuration.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from celery import Celery
from kombu.utils.url import maybe_sanitize_url

from sluice.broker.worker.attached_queues import WORKER_QUEUES, worker_queues
from sluice.broker.worker.task import register
from sluice.scheduler.core.settings import Settings

_ATTACHED = "sluice_attached"

_OBJECT_SERIALIZERS = frozenset(
    {
        "pickle",
        "application/x-python-serialize",
        "yaml",
        "application/x-yaml",
        "msgpack",
        "application/x-msgpack",
    }
)
"""Content types whose loading builds objects of the sender's choice."""

_MAX_QUEUE_NAME = 200
"""Characters in a Sluice queue name given to `attach` (AMQP allows 255 in the whole name)."""

log = logging.getLogger(__name__)


class AttachError(ValueError):
    """A Celery configuration Sluice cannot work with; the message is one line."""


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, Iterable) else [str(value)]


def _same_broker(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def check(app: Celery, settings: Settings) -> None:
    """Raise `AttachError` if `app`'s configuration cannot carry Sluice (see the module doc)."""
    conf = app.conf
    if conf.task_always_eager:
        raise AttachError(
            "cannot attach Sluice to an app with task_always_eager=True: "
            "Sluice tasks must run on workers"
        )
    accept = _names(conf.accept_content)
    if conf.task_serializer == "auth" or accept == ["auth"]:
        raise AttachError(
            "cannot attach Sluice to an app that accepts only signed messages "
            "(serializer 'auth'): Sluice publishes plain JSON"
        )
    broker = conf.broker_url
    if broker and not _same_broker(str(broker), settings.broker_url):
        raise AttachError(
            f"the app's broker ({app.connection_for_write().as_uri()}) is not Sluice's broker_url "
            f"({maybe_sanitize_url(settings.broker_url)}): its workers would never see "
            "Sluice's messages"
        )
    if not conf.task_create_missing_queues:
        prefix = f"{settings.namespace}."
        names = [getattr(q, "name", q) for q in (conf.task_queues or [])]
        if not any(str(name).startswith(prefix) for name in names):
            raise AttachError(
                f"task_create_missing_queues=False and no '{prefix}*' queue in task_queues: "
                f"add Queue('{prefix}default') to task_queues"
            )


def _queue_names(queues: Iterable[str], consume: bool) -> list[str]:
    """`queues` as a list of Sluice queue names; `AttachError` for what is not one."""
    if isinstance(queues, str | bytes) or not isinstance(queues, Iterable):
        raise AttachError(f"queues must be a list of Sluice queue names, not {queues!r}")
    names = list(queues)
    for name in names:
        if not isinstance(name, str) or not name or len(name) > _MAX_QUEUE_NAME:
            raise AttachError(
                f"queues: {name!r} is not a Sluice queue name "
                f"(a non-empty string of at most {_MAX_QUEUE_NAME} characters)"
            )
        if "," in name or any(c.isspace() for c in name):
            raise AttachError(f"queues: {name!r} holds a comma or a space: -Q cannot name it")
    if names and not consume:
        raise AttachError("queues names queues to consume, and consume=False consumes none")
    return names


def attach(
    app: Celery,
    settings: Settings | None = None,
    *,
    queues: Iterable[str] = (),
    consume: bool = True,
) -> Celery:
    """Install Sluice on the existing Celery `app` and return it (idempotent; the last
    call's `queues` and `consume` hold).

    Without `settings`, they are `Settings.from_env()`, with the app's own broker URL
    when `SLUICE_BROKER_URL` is not set. A worker of the app started without `-Q` consumes
    Sluice's default and callback queues and `queues` (Sluice queue names, "heavy" for
    `<namespace>.heavy`) beside the app's own, unless `consume` is False.
    """
    names = _queue_names(queues, consume)
    if settings is None:
        settings = Settings.from_env()
        if not settings.broker_url_set and app.conf.broker_url:
            settings = settings.with_(broker_url=str(app.conf.broker_url))
    check(app, settings)

    accept = _names(app.conf.accept_content)
    if "json" not in accept and "application/json" not in accept:
        app.conf.accept_content = [*accept, "json"]
    unsafe = sorted({name for name in accept if name in _OBJECT_SERIALIZERS})
    if unsafe:
        log.warning(
            "this app's workers accept %s messages: whoever can write to the broker can run "
            "code on them (Sluice itself needs only json)",
            ", ".join(unsafe),
        )
    app.conf.sluice_settings = settings
    app.conf[WORKER_QUEUES] = worker_queues(settings, names) if consume else ()
    if not getattr(app, _ATTACHED, False):
        register(app)  # lazy on an unfinalized app: its other tasks are not touched
        setattr(app, _ATTACHED, True)
    return app
