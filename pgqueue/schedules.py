"""Deprecated path: ``pgqueue.schedules`` moved to :mod:`pgqueue.rules.schedules`.

Importing it from here warns; this path will be removed in a later release."""

import warnings

from pgqueue.rules.schedules import *  # noqa: F403

warnings.warn(
    "pgqueue.schedules moved to pgqueue.rules.schedules: import from there",
    DeprecationWarning,
    stacklevel=2,
)
