"""Deprecated path: ``pgqueue.retention`` moved to :mod:`pgqueue.db.retention`.

Importing it from here warns; this path will be removed in a later release."""

import warnings

from pgqueue.db.retention import *  # noqa: F403

warnings.warn(
    "pgqueue.retention moved to pgqueue.db.retention: import from there",
    DeprecationWarning,
    stacklevel=2,
)
