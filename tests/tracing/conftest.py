"""Fixtures of the tracing tests: an OTLP/HTTP receiver of this test's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.otlp_receiver import OtlpReceiver


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver()
    yield r
    r.close()
