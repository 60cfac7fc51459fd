"""Tasks with typed arguments and results, importable by real `pgq work` processes (and by
the children of ``--pool process``):

    pgq work tests.integration.typed_app:pgq

Each handler records the Python types it was handed in the ledger (a JSON note), so a test
sees what the worker decoded whoever enqueued the job (Python, SQL, a cron tick, a workflow).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, TypedDict
from uuid import UUID

import pydantic

from pgqueue import PgQueue
from tests.integration.worker_app import record

pgq = PgQueue()


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(TypedDict):
    street: str
    since: date


class Customer(pydantic.BaseModel):
    id: UUID
    joined: datetime
    credit: Decimal


@dataclass(frozen=True)
class Echo:
    """What a handler was handed: each argument's type name, and the typed values back."""

    kinds: dict[str, str]
    when: datetime
    amount: Decimal
    pair: tuple[int, str]
    point: Point | None = None


@dataclass(frozen=True)
class Point:  # defined after Echo, which names it: annotations resolve at first use
    x: Decimal
    at: datetime


def kinds_of(**values: Any) -> dict[str, str]:
    """Each value's type name (and its items' for containers), as the ledger records it."""
    kinds = {}
    for name, value in values.items():
        kind = type(value).__name__
        if isinstance(value, list | tuple | set | frozenset):
            kind += "[" + ",".join(sorted({type(item).__name__ for item in value})) + "]"
        elif isinstance(value, dict):
            kind += (
                "{" + ",".join(f"{k}:{type(v).__name__}" for k, v in sorted(value.items())) + "}"
            )
        kinds[name] = kind
    record("end", note=json.dumps(kinds, sort_keys=True))
    return kinds


@pgq.task(name="typed.echo", result_ttl=3600)
def echo(
    when: datetime,
    ref: UUID,
    amount: Decimal,
    wait: timedelta,
    colour: Colour,
    pair: tuple[int, str],
    ids: set[int],
    point: Point,
    address: Address,
    customer: Customer | None = None,
    day: date | None = None,
    at: time | None = None,
    history: list[datetime] | None = None,
    prices: dict[str, Decimal] | None = None,
) -> Echo:
    kinds = kinds_of(
        when=when, ref=ref, amount=amount, wait=wait, colour=colour, pair=pair, ids=ids,
        point=point, address=address, customer=customer, day=day, at=at, history=history,
        prices=prices,
    )  # fmt: skip
    return Echo(kinds, when, amount, pair, point)


@pgq.task(name="typed.async_echo", result_ttl=3600)
async def async_echo(when: datetime, ref: UUID) -> tuple[datetime, UUID]:
    kinds_of(when=when, ref=ref)
    return when, ref


@pgq.task(name="typed.stamp")
def stamp(when: datetime, by: timedelta) -> datetime:
    kinds_of(when=when, by=by)
    return when + by


@pgq.task(name="typed.price")
def price(n: int) -> Decimal:
    return Decimal(n) / 10


@pgq.task(name="typed.total")
def total(prices: list[Decimal]) -> Decimal:
    kinds_of(prices=prices)
    return sum(prices, Decimal(0))


@pgq.task(name="typed.tick")
def tick(day: date, colour: Colour = Colour.RED) -> None:
    kinds_of(day=day, colour=colour)
