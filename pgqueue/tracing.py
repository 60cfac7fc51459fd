"""Deprecated path: ``pgqueue.tracing`` moved to :mod:`pgqueue.rules.tracing`.

Importing it from here warns; this path will be removed in a later release."""

import warnings

from pgqueue.rules.tracing import *  # noqa: F403

warnings.warn(
    "pgqueue.tracing moved to pgqueue.rules.tracing: import from there",
    DeprecationWarning,
    stacklevel=2,
)
