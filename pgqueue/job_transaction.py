"""Deprecated path: ``pgqueue.job_transaction`` moved to :mod:`pgqueue.handler.job_transaction`.

Importing it from here warns; this path will be removed in a later release."""

import warnings

from pgqueue.handler.job_transaction import *  # noqa: F403

warnings.warn(
    "pgqueue.job_transaction moved to pgqueue.handler.job_transaction: import from there",
    DeprecationWarning,
    stacklevel=2,
)
