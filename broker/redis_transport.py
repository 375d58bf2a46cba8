"""Sluice's Redis transport: kombu's, where what is not a kombu message is dropped, not fatal.

Anything that can write to Redis can push onto a queue list (`<ns>.default`,
`<ns>.callbacks`). kombu's transport decodes each item it pops as a JSON envelope and
hands it on; an item that is not one (not JSON, not an object, no `properties` or
`delivery_tag`, a body its encoding cannot decode) raised out of the worker's event loop:
"Unrecoverable error: JSONDecodeError", and the worker stopped. Here:

- `CheckedMessage` (the channel's `Message` class) refuses an envelope kombu and Celery
  cannot read, with `MalformedEnvelope`, before the channel counts it as delivered (so no
  prefetch slot and no unacked entry is taken by it);
- `Transport.on_readable` (what the event loop calls) and `Transport.drain_events` (the
  loop without one) drop an item that failed so, with one WARNING per kind
  (`broker.untrusted`), and go on: the item was popped from its list, so it is gone,
  read once however large;
- `CheckedQoS.restore_by_tag` drops an entry of the `unacked` hash that is not a message
  kombu stored, instead of failing its restore every time.

A message whose envelope is sound but whose body or headers Celery cannot use is Celery's
business: it rejects or acknowledges it (`on_decode_error`, `on_unknown_message`, ...).
The binding sets (`_kombu.binding.<queue>`) are never read on Sluice's paths: Sluice
publishes through the default exchange, straight to the queue's list.

Every method overridden here is one kombu's own event loop, channel or QoS calls by its
public name; nothing private of kombu is touched. `broker.app.create_app` selects this
transport for `redis://` and `rediss://` broker URLs (`transport_for`).
"""

from __future__ import annotations

import binascii
import json
import ssl
from typing import Any
from urllib.parse import urlparse

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

from sluice.broker.untrusted import dropped

TRANSPORT = "sluice.broker.redis_transport:Transport"
"""The name Celery's `broker_transport` setting takes for this transport."""

_QUEUES = "a Redis queue"
_BODY_ENCODINGS = (None, "base64", "utf-8")


class MalformedEnvelope(ValueError):
    """An item of a queue list that is not a message kombu and Celery can read."""

    def __init__(self, why: str, payload: object) -> None:
        super().__init__(why)
        self.why = why
        self.payload = payload


def check_envelope(payload: Any) -> None:
    """Raise `MalformedEnvelope` unless `payload` has the shape kombu's Redis transport
    writes: an object with `properties` (an object with a string `delivery_tag`), an
    optional string `body` in a known `body_encoding`, and optional object `headers`."""
    if not isinstance(payload, dict):
        raise MalformedEnvelope(f"a JSON {type(payload).__name__}, not an object", payload)
    properties = payload.get("properties")
    if not isinstance(properties, dict):
        raise MalformedEnvelope("no 'properties' object", payload)
    if not isinstance(properties.get("delivery_tag"), str):
        raise MalformedEnvelope("no string 'delivery_tag'", payload)
    if not isinstance(properties.get("delivery_info", {}), dict):
        raise MalformedEnvelope("'delivery_info' is not an object", payload)
    encoding = properties.get("body_encoding")
    if encoding not in _BODY_ENCODINGS:
        raise MalformedEnvelope(f"unknown body_encoding {str(encoding)[:40]!r}", payload)
    if not isinstance(payload.get("body", ""), str | None):
        raise MalformedEnvelope("'body' is not a string", payload)
    if not isinstance(payload.get("headers", {}), dict | None):
        raise MalformedEnvelope("'headers' is not an object", payload)
    for field in ("content-type", "content-encoding"):
        if not isinstance(payload.get(field), str | None):
            raise MalformedEnvelope(f"{field!r} is not a string", payload)


class CheckedMessage(virtual.Message):
    """kombu's message, built only from an envelope `check_envelope` accepts."""

    def __init__(self, payload: Any, channel: Any = None, **kwargs: Any) -> None:
        check_envelope(payload)
        try:
            super().__init__(payload, channel=channel, **kwargs)
        except (binascii.Error, UnicodeError) as exc:  # a body that is not base64
            raise MalformedEnvelope(f"its body does not decode: {exc}", payload) from exc


class CheckedQoS(kombu_redis.QoS):
    """kombu's Redis QoS; an `unacked` entry that is not a stored message is deleted."""

    def restore_by_tag(self, tag: Any, client: Any = None, leftmost: bool = False) -> None:
        try:
            super().restore_by_tag(tag, client, leftmost)
        except (ValueError, TypeError) as exc:  # not JSON, or not [message, exchange, key]
            dropped("an unacked entry that is not a message", self.unacked_key, tag, str(exc))
            with self.channel.conn_or_acquire(client) as redis_client:
                redis_client.pipeline().zrem(self.unacked_index_key, tag).hdel(
                    self.unacked_key, tag
                ).execute()


class Channel(kombu_redis.Channel):
    Message = CheckedMessage
    QoS = CheckedQoS


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with `Channel`; drops what a queue list holds that is not
    a message (see the module)."""

    Channel = Channel

    def on_readable(self, *args: Any, **kwargs: Any) -> Any:
        """A socket is readable (the event loop's reader): kombu's, junk dropped."""
        try:
            return super().on_readable(*args, **kwargs)
        except (json.JSONDecodeError, MalformedEnvelope) as exc:
            _drop(exc)
            return None

    def drain_events(self, *args: Any, **kwargs: Any) -> Any:
        """Wait for and deliver one message (no event loop): kombu's, junk dropped."""
        try:
            return super().drain_events(*args, **kwargs)
        except (json.JSONDecodeError, MalformedEnvelope) as exc:
            _drop(exc)
            return None


def _drop(exc: json.JSONDecodeError | MalformedEnvelope) -> None:
    if isinstance(exc, json.JSONDecodeError):
        dropped("a queued item that is not JSON", _QUEUES, exc.doc, "not a kombu message")
    else:
        dropped("a queued item that is not a kombu message", _QUEUES, exc.payload, exc.why)


def transport_for(broker_url: str) -> tuple[str | None, dict[str, Any] | None]:
    """Celery's `broker_transport` and `broker_use_ssl` for `broker_url`: this transport
    for `redis://` and `rediss://` (with kombu's own default TLS options for `rediss://`,
    which kombu applies only when the transport is named `rediss`); (None, None) for any
    other URL (kombu's choice)."""
    scheme = urlparse(broker_url).scheme
    if scheme == "redis":
        return TRANSPORT, None
    if scheme == "rediss":
        return TRANSPORT, {"ssl_cert_reqs": ssl.CERT_NONE}
    return None, None
