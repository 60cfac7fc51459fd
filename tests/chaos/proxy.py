"""A TCP proxy between workers and PostgreSQL (which listens on a Unix socket in the tests) that
can cut the network: ``drop()`` resets every connection and refuses new ones, ``pause()``
blackholes traffic (nothing is lost: TCP would retransmit it once the partition heals),
``heal()`` restores it, and ``trap(pattern)`` lets one message matching ``pattern`` through,
then loses the server's reply and resets that connection: an ambiguous commit. With
``lose="request"`` the message itself is lost instead and only the client's side is reset: the
server keeps waiting on an open transaction, as it does when a client vanishes unannounced.
``trap(pattern, lose="delay", hold=s)`` loses nothing: the server's replies on that connection
reach the client ``s`` seconds late (a retransmission on a lossy link, or a client whose event
loop a handler blocks while the reply waits in its socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

#: The COMMIT of a handler's ``ctx.transaction()`` as it travels: a simple-protocol Query
#: message (psycopg ends a transaction outside a pipeline that way, and so do the ORMs through
#: it). The worker's own commits go in pipelines, so a trap on this pattern never catches them.
TRANSACTION_COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"
#: The commit of an idle worker's claim: no COMMIT statement, but the pipeline's Sync (the
#: statements before it are one implicit transaction), sent on its own once the claim's rows
#: are here. Trapped as a whole message (``trap(..., whole=True)``): every other statement's
#: Sync travels with the statement.
CLAIM_SYNC = b"S\x00\x00\x00\x04"


class Proxy:
    def __init__(self, upstream_dsn: str) -> None:
        params = conninfo_to_dict(upstream_dsn)
        self.socket_path = Path(str(params["host"])) / f".s.PGSQL.{params.get('port', 5432)}"
        self.upstream_dsn = upstream_dsn
        self.port = 0
        self.connections: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self.refusing = False
        self.trapped = 0  # ambiguous commits produced
        #: When a client's message last went through (monotonic): see :meth:`quiet_for`.
        self.last_sent = time.monotonic()
        self._trap: bytes | None = None
        self._trap_whole = False
        self._lose = "reply"
        self._hold = 0.0
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True, name="chaos-proxy")

    # -- control (any thread) -----------------------------------------------------------

    def start(self) -> Proxy:
        self._thread.start()
        self._started.wait(10)
        return self

    def dsn(self, dsn: str | None = None) -> str:
        """``dsn`` (default: the upstream one) pointed at the proxy."""
        return make_conninfo(dsn or self.upstream_dsn, host="127.0.0.1", port=str(self.port))

    def drop(self) -> None:
        """Reset every connection and refuse new ones until heal()."""
        self._call(self._drop)

    def pause(self) -> None:
        """Blackhole: connections stay open but nothing flows until heal()."""
        self._call(self._pause)

    def heal(self) -> None:
        self._call(self._heal)

    def trap(
        self, pattern: bytes, lose: str = "reply", *, whole: bool = False, hold: float = 0.0
    ) -> None:
        """The next client message containing ``pattern`` (``whole``: that is ``pattern`` and
        nothing more) reaches the server; its reply never comes back and the connection is
        reset (did it commit? the client cannot know). ``lose="request"``: the message never
        reaches the server, the client's side of the connection is reset and the server's is
        left open. ``lose="delay"``: nothing is lost, but what the server sends on that
        connection from then on reaches the client ``hold`` seconds late."""
        self._call(self._set_trap, pattern, lose, whole, hold)

    def quiet_for(self) -> float:
        """Seconds since a client last sent anything (a worker done with what it was doing
        sends nothing until it is woken or its next heartbeat)."""
        return time.monotonic() - self.last_sent

    def close(self) -> None:
        self._call(self._close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _call(self, func: Any, *args: Any) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                func(*args)
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(10)

    # -- the loop -----------------------------------------------------------------------

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._started.set()
        self._loop.run_forever()
        # Connections still being pumped when the proxy closed end here, not when the closed
        # loop is collected ("Task was destroyed but it is pending!").
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    def _drop(self) -> None:
        self.refusing = True
        for client, server in list(self.connections):
            for writer in (client, server):
                writer.transport.abort()
        self.connections.clear()

    def _pause(self) -> None:
        assert self._flowing is not None
        self._flowing.clear()

    def _heal(self) -> None:
        assert self._flowing is not None
        self.refusing = False
        self._flowing.set()

    def _set_trap(self, pattern: bytes, lose: str, whole: bool, hold: float) -> None:
        self._trap = pattern
        self._trap_whole = whole
        self._lose = lose
        self._hold = hold

    def _close(self) -> None:
        self._drop()
        if self._server is not None:
            self._server.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(self.socket_path))
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self.connections.add(pair)
        state: dict[str, Any] = {"reply_lost": False, "keep_server": False, "held_until": 0.0}
        await asyncio.gather(
            self._pump(reader, up_writer, pair, state, upstream=True),
            self._pump(up_reader, writer, pair, state, upstream=False),
            return_exceptions=True,
        )
        for side in pair:  # a server side kept open (lose="request") ends with the other
            side.transport.abort()
        self.connections.discard(pair)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
        state: dict[str, Any],
        *,
        upstream: bool,
    ) -> None:
        assert self._flowing is not None
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self._flowing.wait()
                if pair not in self.connections:
                    break
                if upstream:
                    self.last_sent = time.monotonic()
                if not upstream and state["reply_lost"]:
                    continue  # the reply to the trapped message (and anything after) is lost
                if not upstream and (late := state["held_until"] - time.monotonic()) > 0:
                    await asyncio.sleep(late)  # (what follows waits behind it: order kept)
                trapped = (
                    upstream
                    and self._trap is not None
                    and (data == self._trap if self._trap_whole else self._trap in data)
                )
                if trapped and self._lose == "request":
                    self._trap = None
                    self.trapped += 1
                    state["reply_lost"] = state["keep_server"] = True
                    client = pair[0]
                    self._loop.call_later(0.5, client.transport.abort)
                    continue  # never delivered; the server's side stays open
                if trapped and self._lose == "delay":
                    self._trap = None
                    self.trapped += 1
                    state["held_until"] = time.monotonic() + self._hold
                    trapped = False
                writer.write(data)
                await writer.drain()
                if trapped:
                    self._trap = None
                    self.trapped += 1
                    state["reply_lost"] = True
                    self._loop.call_later(0.5, self._reset, pair)
        finally:
            if not (upstream and state.get("keep_server")):
                with contextlib.suppress(Exception):
                    writer.transport.abort()

    def _reset(self, pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter]) -> None:
        for writer in pair:
            writer.transport.abort()
        self.connections.discard(pair)
