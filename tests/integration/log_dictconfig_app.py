"""An application that configures logging itself when imported, the way many do:
``logging.config.dictConfig`` with the default ``disable_existing_loggers=True`` and a format
that uses pgqueue's record fields.

pgq work tests.integration.log_dictconfig_app:pgq
"""

from __future__ import annotations

import logging.config

from tests.integration.log_tasks import pgq

__all__ = ["pgq"]

FORMAT = (
    "APP %(levelname)s %(name)s job=%(job_id)s task=%(task)s queue=%(queue)s "
    "attempt=%(attempt)s worker=%(worker_id)s | %(message)s"
)

logging.config.dictConfig(
    {
        "version": 1,
        "formatters": {"app": {"format": FORMAT}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "app",
            }
        },
        # The app names its own loggers; everything else that exists now is disabled.
        "loggers": {"myapp": {"level": "INFO"}},
        "root": {"level": "INFO", "handlers": ["stderr"]},
    }
)
