"""Deprecated path: ``pgqueue.inspect`` moved to :mod:`pgqueue.db.views`.

Importing it from here warns; this path will be removed in a later release."""

import warnings

from pgqueue.db.views import *  # noqa: F403

warnings.warn(
    "pgqueue.inspect moved to pgqueue.db.views: import from there", DeprecationWarning, stacklevel=2
)
