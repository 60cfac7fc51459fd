"""Deprecated path: ``pgqueue.ops`` moved to :mod:`pgqueue.db.ops`.

Importing it from here warns; this path will be removed in a later release."""

import warnings

from pgqueue.db.ops import *  # noqa: F403

warnings.warn(
    "pgqueue.ops moved to pgqueue.db.ops: import from there", DeprecationWarning, stacklevel=2
)
