"""The deduplication options without a database: the derived key and the checks."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest

from pgqueue import ConfigurationError, PgQueue
from pgqueue.errors import InvalidJobError
from pgqueue.rules.dedupe import derived_key
from pgqueue.rules.job_specs import make_spec


def spec(options, defaults=None, args=None):
    return make_spec("t", args or {}, options, defaults=defaults or {}, payload_limit=10_000)


# The key is part of the stored data (a job enqueued by this version is found by the next):
# pinned, so a change to the canonical form is a deliberate one. The first is the SHA-256 of
# the text '{"doc":7,"version":"v1"}' (as `printf %s '...' | sha256sum` says).
PINNED: dict[str, dict[str, Any]] = {
    "t:0e0a0073f1ff13438bcea599f89211a4b17375ad90f4d6c1a033a69264c4b5ad": {
        "version": "v1",
        "doc": 7,
    },
    "t:d3da1e81322103c1ff8d7940c3bbc43be733abb2d423f089d0973dd844353964": {
        "b": [1, 2.5, None, True],
        "a": {"y": "é", "x": 10**20},
    },
}


def test_the_derived_key_is_canonical():
    args = {"b": [1, 2.5, None, True], "a": {"y": "é", "x": 10**20}}
    key = derived_key("t", args, None)
    assert key.startswith("t:") and len(key) == 2 + 64
    reordered = {"a": {"x": 10**20, "y": "é"}, "b": (1, 2.5, None, True)}
    assert derived_key("t", reordered, None) == key  # key order and tuple/list do not matter
    assert derived_key("u", args, None) != key  # the task is part of it
    assert derived_key("t", {**args, "c": 0}, None) != key
    # A subset: other arguments do not count; a name the call did not pass is left out.
    assert derived_key("t", args, ("a",)) == derived_key("t", {"a": args["a"], "z": 1}, ("a",))
    assert derived_key("t", args, ("a", "missing")) == derived_key("t", args, ("a",))
    assert derived_key("t", {"n": 1}, None) != derived_key("t", {"n": 1.0}, None)
    assert derived_key("t", {"n": 1}, None) != derived_key("t", {"n": True}, None)


def test_the_derived_key_is_pinned_and_the_same_in_every_process():
    assert {derived_key("t", args, None): args for args in PINNED.values()} == PINNED
    code = (
        "from pgqueue.rules.dedupe import derived_key; "
        "print(derived_key('t', {'b': [1, 2.5, None, True], 'a': {'y': 'é', 'x': 10**20}}, None))"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PYTHONIOENCODING": "utf-8"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("0", "1", "12345")
    }
    assert keys == {"t:d3da1e81322103c1ff8d7940c3bbc43be733abb2d423f089d0973dd844353964"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_by": 3}, "unique_by must be True"),
        ({"unique_by": []}, "at least one argument name"),
        ({"unique_by": ["a", ""]}, "must name arguments"),
        ({"unique_among": "running", "idempotency_key": "k"}, "unique_among must be 'live' or"),
        ({"on_conflict": "merge", "idempotency_key": "k"}, "on_conflict must be 'keep', 'replace'"),
        ({"throttle": 1.5, "idempotency_key": "k"}, "whole number of seconds"),
        ({"throttle": 0.5, "idempotency_key": "k"}, "whole number of seconds"),
        ({"throttle": -1, "idempotency_key": "k"}, "must not be negative"),
        ({"throttle": 60}, "throttle needs a key"),
        (
            {"unique_among": "pending", "on_conflict": "replace"},
            "unique_among and on_conflict need",
        ),
        ({"idempotency_key": "k", "unique_by": True}, "either idempotency_key or unique_by"),
        ({"unique_by": True, "unique_among": "pending", "unique_for": 60}, "choose one"),
        ({"unique_by": True, "throttle": 60, "unique_for": 60}, "leave out unique_for"),
        ({"unique_for": 60}, "need an idempotency_key"),
    ],
)
def test_bad_dedupe_options_are_named(options, message):
    with pytest.raises(InvalidJobError, match=message):
        spec(options)


def test_defaults_and_what_a_call_changes():
    plain = spec({})
    assert (plain.unique_by, plain.unique_among, plain.on_conflict, plain.throttle) == (
        False,
        "live",
        "keep",
        None,
    )
    assert not plain.has_mode and plain.idempotency_key is None
    task = {"unique_by": ("doc",), "unique_among": "pending", "on_conflict": "replace"}
    derived = spec({}, defaults=task, args={"doc": 1, "v": 2})
    assert derived.has_mode and derived.idempotency_key == derived_key("t", {"doc": 1}, ("doc",))
    own_key = spec({"idempotency_key": "mine"}, defaults=task, args={"doc": 1})
    assert own_key.idempotency_key == "mine" and own_key.unique_by is False
    off = spec({"unique_by": False, "unique_among": "live", "on_conflict": "keep"}, defaults=task)
    assert off.idempotency_key is None and not off.has_mode
    throttled = spec({"idempotency_key": "k", "throttle": timedelta(minutes=1)})
    assert throttled.throttle == timedelta(seconds=60) and throttled.has_mode


def test_a_task_declaring_unknown_argument_names_is_refused():
    pgq = PgQueue("postgresql://unused")
    with pytest.raises(ConfigurationError, match=r"unique_by names 'dc'.*doc"):

        @pgq.task(name="x", unique_by=("dc",))
        def x(doc: int) -> None: ...

    @pgq.task(name="y", unique_by=("anything",))
    def y(**kwargs: int) -> None: ...  # takes any name

    assert y.defaults["unique_by"] == ("anything",)
