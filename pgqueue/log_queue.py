"""Deprecated path: ``pgqueue.log_queue`` moved to :mod:`pgqueue.handler.log_queue`.

Importing it from here warns; this path will be removed in a later release."""

import warnings

from pgqueue.handler.log_queue import *  # noqa: F403

warnings.warn(
    "pgqueue.log_queue moved to pgqueue.handler.log_queue: import from there",
    DeprecationWarning,
    stacklevel=2,
)
