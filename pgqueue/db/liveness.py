"""Connections that notice a server gone silent.

A database host that dies without a word (power lost, a failover that moves its address, a
firewall or NAT that forgets the connection) sends no reset: every connection to it stays open,
and a read of a reply that will never come waits until TCP gives up. With the system's
defaults that is more than two hours (the first keepalive after 7,200 s of silence), or about
15 minutes for a request the server never acknowledged. A worker stuck so claims nothing,
writes no outcome and extends no lease for that long; an application's enqueue hangs as long.

So every connection pgqueue keeps open (a worker's; a client's pools and its result listener;
not the application's own, which ``conn=`` hands in) carries TCP keepalives (a probe after
``KEEPALIVE_IDLE`` seconds of silence, then every ``KEEPALIVE_INTERVAL``, given up after
``KEEPALIVE_COUNT``) and a user timeout (data unacknowledged for ``USER_TIMEOUT`` seconds ends
the connection): a vanished server is noticed within about half a minute, and the worker
connects again as after any outage (a client's call fails with the driver's
``OperationalError``). libpq applies them to TCP connections only (a Unix socket's peer cannot
vanish that way). A DSN that sets any of these parameters keeps its own value.
"""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict, make_conninfo

KEEPALIVE_IDLE = 10
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3
#: Seconds sent data may stay unacknowledged (a lease is 30 s by default: a worker cut off
#: longer than that has lost its leases anyway).
USER_TIMEOUT = 30

_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": str(KEEPALIVE_IDLE),
    "keepalives_interval": str(KEEPALIVE_INTERVAL),
    "keepalives_count": str(KEEPALIVE_COUNT),
    "tcp_user_timeout": str(USER_TIMEOUT * 1000),  # (libpq takes milliseconds)
}


def dead_peer_checked(dsn: str) -> str:
    """``dsn`` with the parameters above added where it does not set them."""
    given = conninfo_to_dict(dsn)
    missing = {key: value for key, value in _DEFAULTS.items() if key not in given}
    return make_conninfo(dsn, **missing) if missing else dsn
