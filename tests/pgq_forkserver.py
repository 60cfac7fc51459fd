"""``pgq`` for the doc pages' shell blocks, forked from a process that has imported it already.

A doc page such as docs/guide/operating.md runs thirty ``pgq`` commands. Each is a process of
its own, and most of its time goes to importing pgqueue, psycopg, typer and rich before it
reads its arguments (about half a second of CPU; several seconds on a loaded machine). Here a
server imports ``pgqueue.cli`` once per page, and the ``pgq`` on the page's ``PATH`` is a
small client that hands the server its arguments, environment, working directory and its
stdin, stdout and stderr (the descriptors themselves), passes on the signals it gets (``kill
%1`` of a ``pgq work ... &``) and exits with the command's status.

Each command is still a process of its own, started fresh for that command: forked from the
server before anything ran (``pgqueue.cli.main`` is called in the fork, with ``sys.argv``,
``os.environ``, the working directory, ``sys.path`` and ``__main__`` as the console script
has them, so multiprocessing's ``spawn`` children start as they would from ``pgq``), reading
and writing the very descriptors bash gave the client, and ending the way the console script
ends (``sys.exit(main())``: threads joined, ``atexit`` run, streams flushed). Its exit status
(``128 + N`` when signal N killed it, as bash reports) is the client's, so ``bash -e`` checks
every command as before.

The server: ``python -m tests.pgq_forkserver SOCKET PGQ`` (PGQ: the console script's path).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import types
from pathlib import Path

# The client (run with -IS: no site, no environment-dependent paths; it imports only a few
# built-in modules, so it starts in a few milliseconds).
CLIENT = """\
import json, os, signal, socket, sys
command = None  # its pid, once the server sent it
early = []  # signals that came before


def forward(signum, frame):
    if command is None:
        early.append(signum)
    else:
        os.kill(command, signum)


# What bash sends a job (`kill %1`) goes on to the command; what it ignores stays ignored.
for signum in {forwarded!r}:
    if signal.getsignal(signum) != signal.SIG_IGN:
        signal.signal(signum, forward)


def read(server, size):
    data = b""
    while len(data) < size and (chunk := server.recv(size - len(data))):
        data += chunk
    if len(data) < size:
        sys.exit("pgq (doc pages' fork server): the command ended without a status")
    return int.from_bytes(data, "big")


request = json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}})
data = request.encode()
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
    server.connect({socket!r})
    socket.send_fds(server, [len(data).to_bytes(8, "big") + data], [0, 1, 2])
    command = read(server, 4)
    for signum in early:
        os.kill(command, signum)
    status = read(server, 4)
sys.exit(status)
"""
# SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 (by number: the client imports no names).
FORWARDED = [
    int(s)
    for s in (
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
    )
]


def write_client(path: Path, socket_path: str) -> None:
    """An executable ``pgq`` at ``path`` that runs its command through the server."""
    path.write_text(
        f"#!{sys.executable} -IS\n" + CLIENT.format(socket=socket_path, forwarded=FORWARDED)
    )
    path.chmod(0o755)


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    size = int.from_bytes(data[:8], "big")
    body = data[8:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise EOFError("the client went away mid-request")
        body += chunk
    request: dict[str, object] = json.loads(body)
    return request, fds


def _become_the_command(request: dict[str, object], fds: list[int], pgq: str) -> None:
    """In the fork: take on the client's descriptors, directory, environment and arguments."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(str(request["cwd"]))
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update(env)
    argv = request["argv"]
    assert isinstance(argv, list)
    sys.argv = [pgq, *map(str, argv)]
    sys.path[0] = str(Path(pgq).parent)  # a console script's first path entry: its directory
    main = types.ModuleType("__main__")  # the console script, for multiprocessing's spawn
    main.__file__ = pgq
    main.__spec__ = None
    sys.modules["__main__"] = main


def _watch(conn: socket.socket, pid: int) -> None:
    """Send the command's pid (the client forwards signals to it), wait for the command's
    process and send its status as bash would see it."""
    conn.sendall(pid.to_bytes(4, "big"))
    _pid, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    code = 128 - code if code < 0 else code
    conn.sendall(code.to_bytes(4, "big"))


def serve(socket_path: str, pgq: str) -> None:
    from pgqueue.cli import main  # the import each command would otherwise pay for

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the watchers reap themselves
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        if os.fork():  # the server: on to the next command
            conn.close()
            continue
        # The watcher: forks the command, reports its status, exits.
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        request, fds = _receive(conn)
        pid = os.fork()
        if pid:
            for fd in fds:
                os.close(fd)
            _watch(conn, pid)
            os._exit(0)
        conn.close()
        _become_the_command(request, fds, pgq)
        # The console script's own last line, ``sys.exit(main())`` (main returns None): the
        # interpreter exits from here as it would there.
        main()
        raise SystemExit


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
