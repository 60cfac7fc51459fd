"""Workflows: chains, groups, chords and DAGs of jobs whose readiness is decided in PostgreSQL.

Build with :func:`chain`, :func:`group`, :func:`chord` or :class:`DAG`, then ``.enqueue()``
(atomically, in the caller's transaction with ``conn=``). A job whose parents have not all
succeeded waits in ``pgqueue.jobs`` with state ``waiting``; the statement that records a
parent's success (the worker's ack) settles its dependents in the same transaction, and a
parent that ends dead or cancelled cancels everything below it (and enqueues the workflow's
``on_failure`` step). See ``pgqueue.settle_finished``
(``migrations/sql/functions/settle_finished/``, created by migration 0004).
"""

from pgqueue.rules.workflow.builders import DAG, Chain, Group, Node, Workflow, chain, chord, group
from pgqueue.rules.workflow.run import WorkflowRun

__all__ = ["DAG", "Chain", "Group", "Node", "Workflow", "WorkflowRun", "chain", "chord", "group"]
