"""Deprecated path: ``pgqueue.flow`` moved to :mod:`pgqueue.rules.flow_control`.

Importing it from here warns; this path will be removed in a later release."""

import warnings

from pgqueue.rules.flow_control import *  # noqa: F403

warnings.warn(
    "pgqueue.flow moved to pgqueue.rules.flow_control: import from there",
    DeprecationWarning,
    stacklevel=2,
)
