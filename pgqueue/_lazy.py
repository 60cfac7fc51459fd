"""The public names of ``pgqueue`` whose module is imported when one of them is first used
(PEP 562: the package's ``__getattr__`` and ``__dir__`` are these). The workflow builders are
not on a worker's start path (tests/integration/test_worker_imports.py); ``pgqueue/__init__.py``
also imports them under ``TYPE_CHECKING``, for type checkers and readers.

A floor module: it imports nothing of pgqueue until a name is asked for.
"""

from __future__ import annotations

import importlib
import sys

#: Public name -> the module it comes from.
LAZY = dict.fromkeys(
    ("DAG", "Chain", "Group", "WorkflowRun", "chain", "chord", "group"), "pgqueue.rules.workflow"
)


def __getattr__(name: str) -> object:
    module = LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pgqueue' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    setattr(sys.modules["pgqueue"], name, value)  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*vars(sys.modules["pgqueue"]), *LAZY})
