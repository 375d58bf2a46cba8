"""Broker content can kill neither the scheduler nor the worker (issue 39, 4.1).

Anything that can write to Redis is untrusted: `SADD <ns>:news notanint` or a publish on
the wake-up channel stopped every scheduler (`ValueError` at `int(m)`), and a non-JSON
item pushed onto `<ns>.default` stopped the worker ("Unrecoverable error:
JSONDecodeError" from kombu's `_brpop_read`). Junk is now dropped, with one WARNING per
kind and place, and both processes serve on. Real `sluice scheduler` and `sluice worker`
subprocesses on real Redis and PostgreSQL.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from pathlib import Path

import redis
from kombu import Connection

from sluice.broker.redis_transport import Transport
from sluice.broker.wakeup import wakeup_channel
from tests.integration.test_ha import assert_all_once, trigger_many, write_fanout
from tests.procs import Sluice, wait_until

HUGE = b"x" * 10_000_000
"""10 MB: read once, never logged whole."""

SCALARS = [b"notanint", b"\xff\xfe\x00\x01binary", "²".encode(), b"9" * 40, b"", HUGE]


def envelope(body: str, headers: dict[str, object], **properties: object) -> bytes:
    """A kombu-shaped item, as a publisher would push it (its parts chosen by the test)."""
    return json.dumps(
        {
            "body": body,
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": {
                "delivery_tag": str(uuid.uuid4()),
                "body_encoding": "base64",
                "delivery_info": {"exchange": "", "routing_key": "x"},
                **properties,
            },
        }
    ).encode()


def queue_junk() -> list[bytes]:
    """Items no worker can run: not JSON, JSON but no envelope, envelopes Celery refuses."""
    not_json = base64.b64encode(b"{not json").decode()
    return [
        *SCALARS,
        b"[1, 2, 3]",
        b"123",
        b'"a string"',
        b'{"properties": "nope"}',
        b'{"properties": {}}',
        envelope("%%% not base64 %%%", {}),
        envelope(not_json, {}, body_encoding="rot13"),
        envelope(not_json, {}),  # no task header, a body that does not decode
        envelope(not_json, {"task": "no.such.task", "id": str(uuid.uuid4())}),
        envelope(not_json, {"task": "sluice.run_task_instance", "id": str(uuid.uuid4())}),
        envelope(not_json, {"task": "sluice.run_callback", "id": str(uuid.uuid4())}),
    ]


def write_junk(client: redis.Redis, sluice: Sluice) -> None:
    """Junk into every Sluice key and channel of the deployment's Redis db."""
    ns = sluice.namespace
    channel = wakeup_channel(sluice.broker_url, ns)
    for value in SCALARS:
        if value:
            client.sadd(f"{ns}:news", value)
        client.publish(channel, value)
    client.publish(channel, b"+")  # "news in the set": a scheduler pops the junk now
    for queue in (f"{ns}.default", f"{ns}.callbacks"):
        client.lpush(queue, *queue_junk())
    for binding in (f"_kombu.binding.{ns}.default", f"_kombu.binding.{ns}.callbacks"):
        client.sadd(binding, b"junk", HUGE, b"\x06\x16".join([b"a", b"b", b"c", b"d"]))
    client.hset("unacked", "junk-tag", HUGE)  # kombu's, for every namespace of the db
    client.zadd("unacked_index", {"junk-tag": 0})  # past its visibility timeout


def warnings_by_kind(text: str) -> dict[tuple[str, str], int]:
    """How often each (kind, place) WARNING of `broker.untrusted` is in a process's log."""
    counts: dict[tuple[str, str], int] = {}
    for line in text.splitlines():
        if "WARNING" in line and "Sluice ignores it" in line:
            found = re.search(r"dropped (.+?) from (.+?): ", line)
            assert found, line
            key = (found.group(1), found.group(2))
            counts[key] = counts.get(key, 0) + 1
    return counts


def test_junk_in_every_key_and_channel_stops_no_scheduler_nor_worker(
    sluice: Sluice, tmp_path: Path
) -> None:
    # Given a scheduler and a worker, with five runs under way
    log = tmp_path / "exec.log"
    write_fanout(sluice, log, width=3, sleep=0.2)
    sluice.run("dags", "list")
    scheduler = sluice.scheduler()
    worker = sluice.worker(queues="default", concurrency=2)
    runs = trigger_many(sluice, "fan", 5)
    client = redis.Redis.from_url(sluice.broker_url)
    try:
        # When junk is written into every key and channel, three times over
        for _ in range(3):
            write_junk(client, sluice)
            wait_until(lambda: client.llen(f"{sluice.namespace}.default") == 0, timeout=30)

        # Then every run succeeds, each task once, and both processes are still up
        for run_id in runs:
            assert sluice.wait_run("fan", run_id, timeout=60) == "success"
        assert_all_once(log, runs, ["start", "join", "t0", "t1", "t2"])
        assert scheduler.poll() is None, sluice.logs()
        assert worker.poll() is None, sluice.logs()
        # And the junk popped from the news set is gone (read once)
        assert client.scard(f"{sluice.namespace}:news") == 0
    finally:
        client.close()
    # And each kind of junk was said once per process, in lines of bounded length
    logs = {p.name: p.read_text(errors="replace") for p in sluice.log_dir.glob("*.log")}
    for name, text in logs.items():
        assert len(text) < 1_000_000, f"{name} logged a huge value"
        counts = warnings_by_kind(text)
        assert all(n == 1 for n in counts.values()), (name, counts)
    scheduler_warnings = warnings_by_kind(logs["scheduler-0.log"])
    worker_warnings = warnings_by_kind(logs["worker-1.log"])
    assert {kind for kind, _ in scheduler_warnings} >= {
        "a wake-up that names no run",
        "a shared-news member",
    }
    assert {kind for kind, _ in worker_warnings} >= {
        "a queued item that is not JSON",
        "a queued item that is not a kombu message",
    }
    assert "Unrecoverable error" not in logs["worker-1.log"]


def test_an_unacked_entry_that_is_not_a_message_is_deleted_not_restored_forever(
    redis_url: str,
) -> None:
    """kombu restores an `unacked` entry past its visibility timeout: one that is not a
    stored message failed that restore every time (an ERROR each time); it is deleted."""
    client = redis.Redis.from_url(redis_url)
    connection = Connection(redis_url, transport=Transport)
    try:
        channel = connection.default_channel
        qos = channel.qos
        client.hset(qos.unacked_key, mapping={"junk-1": b"{not json", "junk-2": b"[1]"})
        client.zadd(qos.unacked_index_key, {"junk-1": 0, "junk-2": 0})  # long overdue
        qos.restore_visible(interval=1)
        assert client.hlen(qos.unacked_key) == 0
        assert client.zcard(qos.unacked_index_key) == 0
    finally:
        connection.release()
        client.close()


def test_a_consumer_without_event_loop_drops_junk_and_gets_the_next_message(
    redis_url: str,
) -> None:
    """The same junk on the path without an event loop (`drain_events`: a synchronous
    consumer, as Celery's loop for eventlet or gevent pools)."""
    client = redis.Redis.from_url(redis_url)
    queue_name = f"t{uuid.uuid4().hex[:8]}.default"
    connection = Connection(redis_url, transport=Transport)
    try:
        queue = connection.SimpleQueue(queue_name)
        client.lpush(queue_name, *queue_junk()[:11])  # what no kombu consumer can read
        queue.put({"real": "message"})
        message = queue.get(timeout=10)
        assert message.payload == {"real": "message"}
        message.ack()
        queue.close()
    finally:
        connection.release()
        client.close()


def test_junk_on_a_rabbitmq_queue_stops_no_worker(
    sluice_on_rabbitmq: Sluice, tmp_path: Path
) -> None:
    """The same over AMQP: a body that is not JSON (or not allowed: pickle), with or
    without a task header, is Celery's to reject; the worker serves on."""
    sluice = sluice_on_rabbitmq
    log = tmp_path / "exec.log"
    write_fanout(sluice, log, width=2)
    sluice.run("dags", "list")
    sluice.scheduler()
    worker = sluice.worker()
    queue = f"{sluice.namespace}.default"
    with Connection(sluice.broker_url) as connection:
        wait_until(lambda: _declared(connection, queue), timeout=30)
        producer = connection.Producer()
        for body, content_type, headers in [
            (HUGE[:1_000_000], None, {}),
            (b"\xff\xfe binary", "application/json", {}),
            (b"{not json", "application/json", {"task": "sluice.run_task_instance", "id": "x"}),
            (
                b"\x80\x04K\x01.",
                "application/x-python-serialize",
                {"task": "sluice.run_task_instance", "id": "y"},
            ),
            (b"[]", "application/json", {"task": "no.such.task", "id": "z"}),
        ]:
            producer.publish(
                body,
                routing_key=queue,
                content_type=content_type or "application/data",
                content_encoding="binary",
                headers=headers,
            )
    runs = trigger_many(sluice, "fan", 2)
    for run_id in runs:
        assert sluice.wait_run("fan", run_id, timeout=60) == "success"
    assert worker.poll() is None, sluice.logs()


def _declared(connection: Connection, queue: str) -> bool:
    """Whether the worker declared `queue` (a passive declare of a missing one fails)."""
    try:
        connection.default_channel.queue_declare(queue, passive=True)
        return True
    except Exception:
        connection.close()  # a failed passive declare closes the channel
        return False
