"""Deprecated path: ``pgqueue.logs`` moved to :mod:`pgqueue.handler.logs`.

Importing it from here warns; this path will be removed in a later release."""

import warnings

from pgqueue.handler.logs import *  # noqa: F403

warnings.warn(
    "pgqueue.logs moved to pgqueue.handler.logs: import from there",
    DeprecationWarning,
    stacklevel=2,
)
