"""Job progress (``ctx.progress(0.4)``, ``ctx.progress({"done": 40, "of": 100})``): what a
handler may report, checked and encoded once, where it reports it.

A handler reports as often as it likes; the worker keeps the latest value per job and writes
it with the next heartbeat (no statement per call), so the database shows it within a
heartbeat interval (a third of the lease).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

#: Stored with the job and shown by running_jobs, the dashboard and `pgq jobs show`.
MAX_PROGRESS_BYTES = 4096

Progress = float | dict[str, Any]


def encode(value: object) -> str:
    """``value`` as the JSON stored, or ValueError naming what is wrong: a fraction done (a
    number from 0 to 1) or a JSON object of at most :data:`MAX_PROGRESS_BYTES` bytes."""
    if isinstance(value, bool):
        raise ValueError("progress must be a fraction from 0 to 1 or a dict, got a bool")
    if isinstance(value, int | float):
        if not (math.isfinite(value) and 0 <= value <= 1):
            raise ValueError(f"progress as a number is the fraction done, 0 to 1; got {value!r}")
        return json.dumps(float(value))
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise ValueError("progress dict keys must be strings")
        try:
            text = json.dumps(dict(value), allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"progress must be JSON-serialisable: {exc}") from None
        if len(text.encode()) > MAX_PROGRESS_BYTES:
            raise ValueError(
                f"progress is {len(text.encode())} bytes as JSON, more than "
                f"{MAX_PROGRESS_BYTES}: report counts, not data"
            )
        if "\\u0000" in text:
            raise ValueError("progress must not contain NUL characters")
        return text
    raise ValueError(
        f"progress must be a fraction from 0 to 1 or a dict, got {type(value).__name__}"
    )
