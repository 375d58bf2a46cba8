"""`/api/v1/pools`: the pools and their slots (a read), and setting a pool's slots (an
admin's write), as `sluice pools list` and `sluice pools set` do."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field
from sqlalchemy import select

from sluice.scheduler.api.deps import CanAdmin, CanRead, DbSession
from sluice.scheduler.api.errors import unprocessable
from sluice.scheduler.api.responses import errors
from sluice.scheduler.control.inputs import INT_MAX, InputError, check_int, check_name
from sluice.scheduler.core.models import Pool
from sluice.scheduler.core.queries.tis import used_slots_by_pool
from sluice.scheduler.core.upsert import upsert

router = APIRouter(prefix="/api/v1/pools", tags=["pools"])


class PoolOut(BaseModel):
    name: str
    slots: int
    used: int = Field(description="slots of its queued and running task instances")
    description: str | None = None


class PoolList(BaseModel):
    pools: list[PoolOut]


class PoolIn(BaseModel):
    slots: int = Field(description=f"0 to {INT_MAX}")


@router.get("", response_model=PoolList, dependencies=[CanRead], responses=errors())
def list_pools(session: DbSession) -> PoolList:
    """Every pool, its slots and how many are used."""
    used = used_slots_by_pool(session)
    pools = session.scalars(select(Pool).order_by(Pool.name)).all()
    return PoolList(
        pools=[
            PoolOut(name=p.name, slots=p.slots, used=used.get(p.name, 0), description=p.description)
            for p in pools
        ]
    )


@router.put("/{name}", response_model=PoolOut, dependencies=[CanAdmin], responses=errors())
def set_pool(name: str, body: PoolIn, session: DbSession) -> PoolOut:
    """Create the pool `name` or set its slots (an admin's)."""
    try:
        check_name(name, "the pool name")
        check_int(body.slots, "slots", 0, INT_MAX)
    except InputError as exc:
        raise unprocessable(str(exc)) from None
    upsert(session, Pool, {"name": name, "slots": body.slots}, keys=["name"], update=["slots"])
    used = used_slots_by_pool(session).get(name, 0)
    return PoolOut(name=name, slots=body.slots, used=used)
