"""`sluice.attach` on a user's app: what it changes, what it keeps, what it refuses."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from celery import Celery

from sluice import DAG, CeleryTask, Upstream, task
from sluice.broker.app import settings_of
from sluice.broker.queues import CALLBACK_TASK_NAME, RUN_TASK_NAME
from sluice.broker.worker.attaching import AttachError, attach
from sluice.scheduler.core.settings import Settings
from sluice.tasks.celery_task import external_id_for, resolve
from sluice.tasks.serialize import serialize_dag
from tests.celery_compat.their_app import make_app

ATTACHING = "sluice.broker.worker.attaching"
"""The logger `attach` warns on (named by its module)."""

BROKER = "redis://127.0.0.1:1/9"  # never connected to: attach reads the URL only
SETTINGS = Settings(broker_url=BROKER, namespace="sl")


def test_attach_registers_sluice_and_keeps_the_users_settings() -> None:
    app = make_app(BROKER, attach_sluice=False)
    app.conf.update(
        task_serializer="pickle",
        accept_content=["pickle"],
        task_routes={"their_module.*": {"queue": "their_queue"}},
        task_acks_late=False,
    )

    assert attach(app, SETTINGS) is app
    assert attach(app, SETTINGS) is app  # idempotent

    assert RUN_TASK_NAME in app.tasks and "their_module.add" in app.tasks
    assert app.tasks[RUN_TASK_NAME].acks_late is True
    assert app.tasks[CALLBACK_TASK_NAME].acks_late is True  # callbacks run on their workers
    assert settings_of(app) == SETTINGS
    assert list(app.conf.accept_content) == ["pickle", "json"]
    assert app.conf.task_serializer == "pickle"
    assert app.conf.task_routes == {"their_module.*": {"queue": "their_queue"}}
    assert app.conf.task_default_queue == "their_queue"
    assert app.conf.task_acks_late is False


def test_attach_without_settings_takes_the_apps_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_BROKER_URL", raising=False)
    app = make_app(BROKER)
    assert settings_of(app).broker_url == BROKER
    assert list(app.conf.accept_content) == ["json"]


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"task_always_eager": True}, "task_always_eager"),
        ({"task_serializer": "auth", "accept_content": ["auth"]}, "signed messages"),
        ({"broker_url": "redis://127.0.0.1:1/8"}, "not Sluice's broker_url"),
        ({"task_create_missing_queues": False}, "task_create_missing_queues=False"),
    ],
)
def test_attach_refuses_what_sluice_cannot_work_with(conf: dict[str, object], message: str) -> None:
    app = make_app(BROKER, attach_sluice=False)
    app.conf.update(**conf)
    with pytest.raises(AttachError, match=message) as caught:
        attach(app, SETTINGS)
    assert "\n" not in str(caught.value)
    assert RUN_TASK_NAME not in app.tasks
    assert app.conf.get("sluice_settings") is None


def test_attach_names_the_queues_its_plain_workers_consume() -> None:
    """What a worker started without -Q adds (`tests/celery_compat/test_plain_worker.py`
    starts one): Sluice's default and callback queues, then those given, each once; none
    for an app that only sends. The app's own queues and routes are not touched."""
    app = make_app(BROKER, attach_sluice=False)
    attach(app, SETTINGS)
    assert app.conf.sluice_worker_queues == ("sl.default", "sl.callbacks")
    attach(app, SETTINGS, queues=["heavy", "default", "heavy"])
    assert app.conf.sluice_worker_queues == ("sl.default", "sl.callbacks", "sl.heavy")
    attach(app, SETTINGS, consume=False)
    assert app.conf.sluice_worker_queues == ()
    assert app.conf.task_queues is None and app.conf.task_default_queue == "their_queue"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"queues": "heavy"}, "must be a list of Sluice queue names"),
        ({"queues": None}, "must be a list of Sluice queue names"),
        ({"queues": [""]}, "is not a Sluice queue name"),
        ({"queues": [7]}, "is not a Sluice queue name"),
        ({"queues": ["x" * 201]}, "at most 200 characters"),
        ({"queues": ["heavy,light"]}, "-Q cannot name it"),
        ({"queues": ["heavy\n"]}, "-Q cannot name it"),
        ({"queues": ["heavy"], "consume": False}, "consume=False consumes none"),
    ],
)
def test_attach_refuses_queues_that_are_not_sluice_queue_names(
    kwargs: dict[str, Any], message: str
) -> None:
    app = make_app(BROKER, attach_sluice=False)
    with pytest.raises(AttachError, match=message) as caught:
        attach(app, SETTINGS, **kwargs)
    assert "\n" not in str(caught.value)
    assert RUN_TASK_NAME not in app.tasks
    assert app.conf.get("sluice_settings") is None
    assert app.conf.get("sluice_worker_queues") is None


def test_attach_accepts_explicit_sluice_queues_without_missing_queue_creation() -> None:
    from kombu import Queue

    app = Celery("x", broker=BROKER, set_as_current=False)
    app.conf.update(task_create_missing_queues=False, task_queues=[Queue("sl.default")])
    attach(app, SETTINGS)
    assert RUN_TASK_NAME in app.tasks


def test_celery_task_serializes_and_resolves_upstream_references() -> None:
    with DAG("mixed", schedule=None) as dag:

        @task
        def extract() -> int:
            return 20

        add = CeleryTask(
            "add",
            name="their_module.add",
            args=[Upstream("extract"), 22],
            kwargs={"also": "{{ upstream.extract }}", "n": [Upstream("extract")]},
            timeout=timedelta(seconds=30),
            retries=2,
        )
        extract >> add

    spec = serialize_dag(dag)["tasks"]["add"]
    assert spec["kind"] == "celery"
    assert spec["retries"] == 2
    assert spec["celery"] == {
        "name": "their_module.add",
        "args": [{"$upstream": "extract"}, 22],
        "kwargs": {"also": "{{ upstream.extract }}", "n": [{"$upstream": "extract"}]},
        "timeout": 30.0,
        "queue": None,
    }
    upstream = {"extract": 20}
    assert resolve(add.args, upstream) == [20, 22]
    assert resolve(add.kwargs, upstream) == {"also": 20, "n": [20]}
    with pytest.raises(LookupError, match="'missing'"):
        resolve([Upstream("missing")], upstream, "add")
    assert external_id_for("a") == external_id_for("a") != external_id_for("b")


def test_attach_refusing_a_broker_never_prints_its_password() -> None:
    app = make_app("redis://:theirsecret@127.0.0.1:1/8", attach_sluice=False)
    settings = Settings(broker_url="redis://:oursecret@127.0.0.1:1/9", namespace="sl")
    with pytest.raises(AttachError, match="not Sluice's broker_url") as caught:
        attach(app, settings)
    assert "oursecret" not in str(caught.value) and "theirsecret" not in str(caught.value)


@pytest.mark.parametrize("accepted", [["pickle"], ["json", "yaml"], ["application/x-msgpack"]])
def test_attach_warns_of_an_app_that_loads_objects(
    accepted: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """An app whose workers accept pickle, yaml or msgpack: whoever can write to the broker
    can run code on them; attach says so (once, as a warning) and attaches."""
    app = make_app(BROKER, attach_sluice=False)
    app.conf.update(accept_content=accepted)
    with caplog.at_level("WARNING", logger=ATTACHING):
        attach(app, SETTINGS)
    warned = [r.getMessage() for r in caplog.records if r.name == ATTACHING]
    assert len(warned) == 1 and "can run code on them" in warned[0]
    assert RUN_TASK_NAME in app.tasks


def test_attach_to_a_json_only_app_warns_of_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger=ATTACHING):
        attach(make_app(BROKER, attach_sluice=False), SETTINGS)
    assert [r for r in caplog.records if r.name == ATTACHING] == []
