"""Deprecated path: ``pgqueue.options`` moved to :mod:`pgqueue.rules.options`.

Importing it from here warns; this path will be removed in a later release."""

import warnings

from pgqueue.rules.options import *  # noqa: F403

warnings.warn(
    "pgqueue.options moved to pgqueue.rules.options: import from there",
    DeprecationWarning,
    stacklevel=2,
)
