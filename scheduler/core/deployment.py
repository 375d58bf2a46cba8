"""The deployment's identity: the id its database was given by its migration.

Two deployments that share a broker and a namespace (a Redis db, `SLUICE_NAMESPACE`) but
not a database would consume each other's messages. Publishers put their database's id in
every message (header `sluice_deployment`); a worker compares it with its own and puts a
stranger's message back instead of acknowledging it as stale.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler.core.models import Deployment

HEADER = "sluice_deployment"
"""The message header that names the deployment that published a message."""


def deployment_id(factory: sessionmaker[Session]) -> str:
    """This database's deployment id (read once per process by its callers)."""
    with factory() as session:
        found = session.scalar(select(Deployment.id).limit(1))
    if found is None:
        raise LookupError("the database has no deployment id: run `sluice db migrate`")
    return str(found)
