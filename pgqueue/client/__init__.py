"""The application's handle on the queue: :class:`~pgqueue.PgQueue` (``core.py``) and the
connections it drives its plans on (``pools.py``)."""

from pgqueue.client.core import PgQueue

__all__ = ["PgQueue"]
