"""The order in which ``make pytest`` hands the suite's modules to its xdist workers.

``--dist loadfile`` keeps each test module on one xdist worker (its module-scoped fixtures made
once, the chaos scenarios one after another). Stock xdist then hands the modules out largest
first by *number of tests*, which has little to do with what they cost: the 440 quick cases of
test_caller_transactions.py went first, the chaos module (16 tests, the costliest module)
three minutes in, and a three-minute benchmark module in the last four minutes of the run.
Here the units go out costliest first (``COSTS``; a module not listed counts ``PER_TEST`` a
test), so the long ones overlap from the start and the short ones fill in the end.

``SPLIT`` modules are not kept together: each of their tests is a unit of its own. The doc
pages (``test_doc_snippets.py``) each run in a database and a directory of their own and share
nothing but the parsed pages, and together they take longer than any other module: on one
worker they were the run's longest tail.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

# What the modules (for SPLIT modules, their tests) of over 40 s took, in seconds: the sum of
# their tests' times in `make pytest PYTEST_ARGS=--durations=0` on two cores shared with other
# work (load average ~15). Only the order matters: refresh it when a module grows or appears.
COSTS: Mapping[str, float] = {
    "tests/chaos/test_chaos.py": 732,
    "tests/integration/test_django_tasks.py": 467,
    "tests/integration/test_django_manage_pgq.py": 314,
    "tests/integration/test_migrations.py": 304,
    "tests/integration/test_cli_output.py": 283,
    "tests/integration/test_examples.py": 220,
    "tests/integration/test_django_connections.py": 215,
    "tests/integration/test_doc_snippets.py::test_page_code_runs[docs/how-to/django.md]": 210,
    "tests/integration/test_benchmark_durable.py": 175,
    "tests/integration/test_caller_transactions.py": 169,
    "tests/integration/test_worker_process_pool.py": 163,
    "tests/integration/test_job_search.py": 149,
    "tests/integration/test_doc_snippets.py::test_page_code_runs[docs/guide/operating.md]": 144,
    "tests/integration/test_cli_core.py": 142,
    "tests/integration/test_dashboard_reads.py": 142,
    "tests/integration/test_doc_snippets.py::test_page_code_runs[docs/how-to/upgrading.md]": 141,
    "tests/unit/test_typing.py": 139,
    "tests/integration/test_durable_parking.py": 137,
    "tests/integration/test_logging.py": 137,
    "tests/integration/test_benchmark_harness.py": 122,
    "tests/integration/test_testing_plugin.py": 120,
    "tests/integration/test_cron_autoscale.py": 114,
    "tests/integration/test_flow_limits.py": 112,
    "tests/integration/test_progress.py": 111,
    "tests/integration/test_worker_processes.py": 108,
    "tests/integration/test_dashboard.py": 106,
    "tests/integration/test_workflows.py": 104,
    "tests/integration/test_read_replica.py": 102,
    "tests/integration/test_dashboard_browser.py": 102,
    "tests/integration/test_debian_pg15.py": 101,
    "tests/integration/test_flow_policies.py": 92,
    "tests/unit/test_typing_django.py": 85,
    "tests/integration/test_startup_checks.py": 81,
    "tests/hostile/test_hostile_enqueue.py": 79,
    "tests/integration/test_batches.py": 75,
    "tests/integration/test_alembic_app.py": 73,
    "tests/integration/test_typed_args.py": 71,
    "tests/integration/test_flow_fairness.py": 68,
    "tests/integration/test_connection_exhaustion.py": 66,
    "tests/integration/test_durable_steps.py": 55,
    "tests/unit/test_sync_twins.py": 53,
    "tests/integration/test_benchmark_latency.py": 48,
    "tests/integration/test_benchmark_startup.py": 45,
    "tests/integration/test_task_names.py": 44,
    "tests/unit/test_query_names.py": 43,
    "tests/integration/test_benchmark_horizon.py": 42,
    "tests/integration/test_tracing.py": 41,
}
SPLIT = ("tests/integration/test_doc_snippets.py",)
PER_TEST = 0.5  # the cost of a test of a module not in COSTS


class CostFirstScheduling(LoadFileScheduling):  # type: ignore[misc]
    """``--dist loadfile``, handing out the costliest unit of work first."""

    def _split_scope(self, nodeid: str) -> str:
        if nodeid.startswith(SPLIT):
            return nodeid
        return super()._split_scope(nodeid)

    def _assign_work_unit(self, node: object) -> None:
        costliest = max(self.workqueue, key=lambda scope: cost(scope, self.workqueue[scope]))
        self.workqueue.move_to_end(costliest, last=False)  # the one the base class pops
        super()._assign_work_unit(node)


def cost(scope: str, tests: Mapping[str, bool]) -> float:
    return COSTS.get(scope, PER_TEST * len(tests))


def make_scheduler(config: pytest.Config, log: object) -> CostFirstScheduling | None:
    """(pytest_xdist_make_scheduler) Ours for ``--dist loadfile``; xdist's for the others."""
    if config.getvalue("dist") != "loadfile":
        return None
    return CostFirstScheduling(config, log)
