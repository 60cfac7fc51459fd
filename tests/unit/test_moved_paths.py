"""The documented import paths of modules that moved into the layers' folders still work, and
warn with the new path; ``pgqueue.alembic`` stays the public path, without a warning."""

from __future__ import annotations

import importlib
import logging.config
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest

import pgqueue

MOVED = {
    "pgqueue.options": "pgqueue.rules.options",
    "pgqueue.flow": "pgqueue.rules.flow_control",
    "pgqueue.schedules": "pgqueue.rules.schedules",
    "pgqueue.tracing": "pgqueue.rules.tracing",
    "pgqueue.admin": "pgqueue.db.admin",
    "pgqueue.ops": "pgqueue.db.ops",
    "pgqueue.inspect": "pgqueue.db.views",
    "pgqueue.retention": "pgqueue.db.retention",
    "pgqueue.job_transaction": "pgqueue.handler.job_transaction",
    "pgqueue.logs": "pgqueue.handler.logs",
    "pgqueue.log_queue": "pgqueue.handler.log_queue",
}


def forget(name: str) -> None:
    """Unload ``name`` so that the next import is a first one (the warning fires as the module
    loads)."""
    sys.modules.pop(name, None)
    parent, _, leaf = name.rpartition(".")
    if hasattr(sys.modules[parent], leaf):
        delattr(sys.modules[parent], leaf)


def fresh_import(name: str) -> ModuleType:
    forget(name)
    return importlib.import_module(name)


def test_every_old_path_is_covered_here():
    root = {path.stem for path in Path(pgqueue.__file__).parent.glob("*.py")}
    shims = {
        f"pgqueue.{name}" for name in root - {"__init__", "errors", "_version", "_lazy", "alembic"}
    }
    assert shims == set(MOVED)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_warns_naming_the_new_one_and_still_works(old: str, new: str):
    with pytest.warns(DeprecationWarning, match=rf"^{old} moved to {new}: import from there$"):
        shim = fresh_import(old)
    target = importlib.import_module(new)
    public = [name for name in vars(target) if not name.startswith("_")]
    assert public
    assert {name: getattr(shim, name) is getattr(target, name) for name in public} == {
        name: True for name in public
    }


def test_a_logging_config_naming_the_old_path_still_loads(tmp_path):
    """``"()": "pgqueue.logs.ContextFilter"`` in a dictConfig, as the logging guide once said."""
    forget("pgqueue.logs")
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"pgqueue": {"()": "pgqueue.logs.ContextFilter"}},
        "formatters": {"json": {"()": "pgqueue.logs.JsonFormatter"}},
        "handlers": {
            "file": {
                "class": "logging.FileHandler",
                "filename": str(tmp_path / "out.log"),
                "filters": ["pgqueue"],
                "formatter": "json",
            }
        },
        "loggers": {"moved.paths": {"handlers": ["file"], "level": "INFO"}},
    }
    with pytest.warns(DeprecationWarning, match="pgqueue.logs moved to pgqueue.handler.logs"):
        logging.config.dictConfig(config)
    from pgqueue.handler.logs import ContextFilter, JsonFormatter

    handler = logging.getLogger("moved.paths").handlers[0]
    assert isinstance(handler.filters[0], ContextFilter)
    assert isinstance(handler.formatter, JsonFormatter)
    logging.getLogger("moved.paths").removeHandler(handler)
    handler.close()


def test_pgqueue_alembic_stays_the_public_path_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        alembic_path = fresh_import("pgqueue.alembic")
    from pgqueue.db import alembic_env

    assert alembic_path.upgrade is alembic_env.upgrade
    assert alembic_path.autogenerate_filters is alembic_env.autogenerate_filters
