"""Deprecated path: ``pgqueue.admin`` moved to :mod:`pgqueue.db.admin`.

Importing it from here warns; this path will be removed in a later release."""

import warnings

from pgqueue.db.admin import *  # noqa: F403

warnings.warn(
    "pgqueue.admin moved to pgqueue.db.admin: import from there", DeprecationWarning, stacklevel=2
)
