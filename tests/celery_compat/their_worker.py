"""`celery -A tests.celery_compat.their_worker worker …`: the user's app, broker (and
result backend) from env."""

from __future__ import annotations

import os

from tests.celery_compat.their_app import make_app

app = make_app(os.environ["THEIR_BROKER_URL"], backend_url=os.environ.get("THEIR_BACKEND_URL"))
