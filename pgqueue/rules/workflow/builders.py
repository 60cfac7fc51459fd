"""Workflow builders: ``chain``, ``group``, ``chord`` and ``DAG``, compiled to a list of nodes.

Everything here is pure: building validates the pieces, :meth:`Workflow.compile` turns them into
:class:`Compiled` (job specs plus parent links by index), which :mod:`pgqueue.db.workflow_plans`
writes in one transaction.

Passing results: a step that follows another receives the previous result in its first
required parameter that ``.s()`` left free (a chain step after a group, and a chord callback,
receive the list of the group's results, in group order). A step whose required parameters are
all bound ignores the result (parameters with defaults never receive it implicitly). DAG nodes
receive nothing (a handler can read its parents' results with ``pgq.result()``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pgqueue.errors import InvalidJobError
from pgqueue.rules.job_specs import JobSpec
from pgqueue.rules.options import (
    MAX_META_BYTES,
    check_meta,
    check_tags,
    merge_meta,
    merge_tags,
    to_timedelta,
)
from pgqueue.rules.payload import dumps
from pgqueue.rules.tasks import JobCall

if TYPE_CHECKING:
    from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
    from pgqueue.rules.app import App
    from pgqueue.rules.workflow.run import WorkflowRun

Receive = Literal["one", "list"]
Step: TypeAlias = "JobCall | Chain | Group"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One job of a workflow, ready to write."""

    spec: JobSpec
    parents: tuple[int, ...] = ()  # indices of other nodes in the same workflow
    receive: Receive | None = None
    result_arg: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class FailureStep:
    """The ``on_failure`` step: enqueued once, when a member first ends dead or cancelled."""

    spec: JobSpec
    result_arg: str | None


@dataclass(slots=True)
class Compiled:
    nodes: list[NodeSpec]
    outputs: list[int]  # the nodes whose results are the workflow's result
    list_output: bool  # the workflow's result is a list (a group) rather than one value
    name: str | None = None
    on_failure: FailureStep | None = None
    result_ttl: timedelta | None = None
    app: App | None = None
    names: dict[str, int] = field(default_factory=dict)  # DAG node names -> index


class Workflow:
    """Shared by every builder: options, compiling and enqueueing. ``meta`` and ``tags`` are
    the workflow's: every member (and the ``on_failure`` step) gets them, a member's own keys
    over the workflow's and its own tags after the workflow's."""

    def __init__(
        self,
        *,
        name: str | None = None,
        on_failure: JobCall | None = None,
        result_ttl: float | timedelta | None = None,
        meta: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
    ) -> None:
        if name is not None and (not isinstance(name, str) or len(name) > 200):
            raise InvalidJobError("a workflow name must be a string of at most 200 characters")
        if on_failure is not None and not isinstance(on_failure, JobCall):
            raise InvalidJobError(
                f"on_failure must be a job description (task.s(...)), got "
                f"{type(on_failure).__name__}"
            )
        self.name = name
        self.on_failure = on_failure
        self.result_ttl = _ttl(result_ttl)
        self.meta = None if meta is None else check_meta(meta)
        self.tags = None if tags is None else check_tags(tags)

    def compile(self) -> Compiled:
        """The workflow's jobs and edges, validated and ready to be written (``enqueue`` calls
        it)."""
        raise NotImplementedError

    def _finish(self, compiled: Compiled) -> Compiled:
        if not compiled.nodes:
            raise InvalidJobError(f"an empty {type(self).__name__.lower()} has nothing to run")
        compiled.name = self.name
        compiled.result_ttl = self.result_ttl
        compiled.app = _app_of(self)
        if self.on_failure is not None:
            arg = self.on_failure.result_arg()
            compiled.on_failure = FailureStep(self.on_failure.spec(receives=True), arg)
        if self.meta or self.tags:
            compiled.nodes = [
                replace(node, spec=self._marked(node.spec)) for node in compiled.nodes
            ]
            if compiled.on_failure is not None:
                step = compiled.on_failure
                compiled.on_failure = replace(step, spec=self._marked(step.spec))
        return compiled

    def _marked(self, spec: JobSpec) -> JobSpec:
        """A member's spec with the workflow's metadata and tags added under its own."""
        own = json.loads(spec.meta_json) if spec.meta_json is not None else None
        meta = merge_meta(self.meta, own)
        spec = spec.with_meta_json(
            None if meta is None else dumps(meta, limit=MAX_META_BYTES, what="meta")
        )
        spec.tags = merge_tags(self.tags, spec.tags)
        return spec

    def enqueue(self, *, conn: ConnectionArg | None = None) -> WorkflowRun:
        """Write every job of the workflow in one transaction (the caller's, with ``conn``)."""
        compiled = self.compile()
        assert compiled.app is not None
        return compiled.app.enqueue_compiled(compiled, conn=conn)

    async def enqueue_async(self, *, conn: AsyncConnectionArg | None = None) -> WorkflowRun:
        """The async twin of :meth:`enqueue`; ``conn`` is an async connection or session."""
        compiled = self.compile()
        assert compiled.app is not None
        return await compiled.app.enqueue_compiled_async(compiled, conn=conn)


class _Composite(Workflow):
    """chain and group: a sequence of steps (job descriptions or nested chains/groups)."""

    def __init__(
        self,
        *steps: Step | Iterable[Step],
        name: str | None = None,
        on_failure: JobCall | None = None,
        result_ttl: float | timedelta | None = None,
        meta: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
    ) -> None:
        super().__init__(
            name=name, on_failure=on_failure, result_ttl=result_ttl, meta=meta, tags=tags
        )
        # group(task.s(i) for i in ...) as well as group(a.s(), b.s())
        if len(steps) == 1 and isinstance(steps[0], Iterable):
            steps = tuple(steps[0])
        for step in steps:
            if isinstance(step, Workflow) and not isinstance(step, _Composite):
                raise InvalidJobError(f"a {type(step).__name__} cannot be nested in a chain/group")
            if isinstance(step, _Composite) and (
                step.on_failure is not None
                or step.result_ttl is not None
                or step.meta is not None
                or step.tags is not None
            ):
                raise InvalidJobError(
                    "on_failure, result_ttl, meta and tags belong to the outermost workflow, "
                    "not a nested one"
                )
            if not isinstance(step, JobCall | _Composite):
                raise InvalidJobError(
                    f"workflow steps must be job descriptions (task.s(...)), chains or groups, "
                    f"got {type(step).__name__}"
                )
        self.steps: tuple[Step, ...] = tuple(steps)  # type: ignore[arg-type]

    def compile(self) -> Compiled:
        """The steps as jobs and edges, validated and ready to be written (``enqueue`` calls it)."""
        compiled = Compiled(nodes=[], outputs=[], list_output=False)
        outputs, list_output = _add(compiled.nodes, self, (), None)
        compiled.outputs = list(outputs)
        compiled.list_output = list_output
        return self._finish(compiled)

    def __repr__(self) -> str:
        return f"{type(self).__name__.lower()}({', '.join(map(_describe, self.steps))})"


class Chain(_Composite):
    """``chain(a.s(1), b.s(), c.s())``: a, then b(a's result), then c(b's result)."""


class Group(_Composite):
    """``group(a.s(1), a.s(2))`` or ``group(a.s(i) for i in range(10))``: steps in parallel;
    the group's result is the list of their results, in order."""


#: The builders, by the names people know them by.
chain = Chain
group = Group


def chord(
    header: Group | Iterable[Step],
    callback: Step,
    *,
    name: str | None = None,
    on_failure: JobCall | None = None,
    result_ttl: float | timedelta | None = None,
    meta: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
) -> Chain:
    """A group and a callback that receives the list of all the group's results, once."""
    members = header if isinstance(header, Group) else Group(header)
    return Chain(
        members,
        callback,
        name=name,
        on_failure=on_failure,
        result_ttl=result_ttl,
        meta=meta,
        tags=tags,
    )


def _add(
    nodes: list[NodeSpec],
    step: JobCall | _Composite,
    parents: tuple[int, ...],
    receive: Receive | None,
) -> tuple[tuple[int, ...], bool]:
    """Append ``step``'s nodes after ``parents``; returns (its output nodes, list output?)."""
    if isinstance(step, JobCall):
        arg = step.result_arg() if receive is not None else None
        nodes.append(
            NodeSpec(
                spec=step.spec(receives=arg is not None),
                parents=parents,
                receive=receive if arg is not None else None,
                result_arg=arg,
            )
        )
        return (len(nodes) - 1,), False
    if isinstance(step, Chain):
        outputs, list_output = parents, receive == "list"
        for index, member in enumerate(step.steps):
            mode: Receive | None = receive if index == 0 else ("list" if list_output else "one")
            outputs, list_output = _add(nodes, member, outputs, mode if outputs else None)
        return outputs, list_output
    if not step.steps:
        raise InvalidJobError("an empty group has nothing to run")
    outputs = ()
    for member in step.steps:
        member_outputs, _ = _add(nodes, member, parents, receive)
        outputs += member_outputs
    return outputs, True


# -- DAG ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Node:
    """A handle on a DAG node, for ``depends_on`` and for finding its job id afterwards."""

    dag: DAG = field(repr=False)
    index: int
    name: str | None


class DAG(Workflow):
    """Jobs with explicit dependencies::

        dag = DAG(name="etl")
        a = dag.add(extract.s())
        b = dag.add(transform.s(1), depends_on=[a])
        c = dag.add(transform.s(2), depends_on=[a])
        dag.add(load.s(), depends_on=[b, c])
        run = dag.enqueue()

    ``depends_on`` takes nodes of this DAG, node names (declared before or after), or ids of
    jobs that already exist. A job becomes ready once every parent succeeded. Cycles are
    rejected when the DAG is compiled (at enqueue), naming the cycle.
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        on_failure: JobCall | None = None,
        result_ttl: float | timedelta | None = None,
        meta: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
    ) -> None:
        super().__init__(
            name=name, on_failure=on_failure, result_ttl=result_ttl, meta=meta, tags=tags
        )
        self._calls: list[JobCall] = []
        self._depends: list[tuple[Node | str | int, ...]] = []
        self._names: dict[str, int] = {}

    def add(
        self,
        call: JobCall,
        *,
        depends_on: Sequence[Node | str | int] = (),
        name: str | None = None,
    ) -> Node:
        """Add a node: ``call`` (``task.s(...)``) runs once every node, node name or job id in
        ``depends_on`` has succeeded. ``name`` lets later nodes depend on it by name. Returns the
        node (``run[node]`` is its job id once enqueued). Raises ``InvalidJobError`` for a
        duplicate name or a node of another DAG."""
        if not isinstance(call, JobCall):
            raise InvalidJobError(
                f"DAG nodes are job descriptions (task.s(...)), got {type(call).__name__}"
            )
        if isinstance(depends_on, str | Node | int):
            depends_on = (depends_on,)
        for parent in depends_on:
            if isinstance(parent, Node) and parent.dag is not self:
                raise InvalidJobError(f"node {parent.index} belongs to another DAG")
            if not isinstance(parent, Node | str | int) or isinstance(parent, bool):
                raise InvalidJobError(
                    f"depends_on takes nodes, node names or job ids, got {parent!r}"
                )
        if name is not None:
            if name in self._names:
                raise InvalidJobError(f"a node named {name!r} already exists in this DAG")
            self._names[name] = len(self._calls)
        self._calls.append(call)
        self._depends.append(tuple(depends_on))
        return Node(self, len(self._calls) - 1, name)

    def compile(self) -> Compiled:
        """The nodes as jobs and edges, validated (unknown parents, cycles) and ready to be written
        (``enqueue`` calls it)."""
        labels = {index: name for name, index in self._names.items()}
        nodes: list[NodeSpec] = []
        parents_of: list[tuple[int, ...]] = []
        for index, (call, depends) in enumerate(zip(self._calls, self._depends, strict=True)):
            internal: dict[int, None] = {}
            external: dict[int, None] = {}
            for parent in depends:
                if isinstance(parent, Node):
                    internal[parent.index] = None
                elif isinstance(parent, str):
                    if parent not in self._names:
                        raise InvalidJobError(
                            f"node {labels.get(index, index)!r} depends on unknown node {parent!r}"
                        )
                    internal[self._names[parent]] = None
                else:
                    external[parent] = None
            spec = call.spec()
            if external:
                extra = dict.fromkeys((*spec.depends_on, *external))
                spec = _with_depends(spec, tuple(extra))
            parents_of.append(tuple(internal))
            nodes.append(NodeSpec(spec=spec, parents=tuple(internal), name=labels.get(index)))
        _reject_cycles(parents_of, labels, self._calls)
        has_children = {p for parents in parents_of for p in parents}
        compiled = Compiled(
            nodes=nodes,
            outputs=[i for i in range(len(nodes)) if i not in has_children],
            list_output=True,
            names=dict(self._names),
        )
        return self._finish(compiled)


def _reject_cycles(
    parents_of: list[tuple[int, ...]], labels: dict[int, str], calls: list[JobCall]
) -> None:
    """Depth-first search; a back edge is a cycle, reported as a -> b -> ... -> a."""
    state = [0] * len(parents_of)  # 0: unseen, 1: on the current path, 2: done
    path: list[int] = []

    def label(index: int) -> str:
        return labels.get(index) or f"#{index} {calls[index].task.name}"

    def visit(index: int) -> None:
        state[index] = 1
        path.append(index)
        for parent in parents_of[index]:
            if state[parent] == 1:
                cycle = [*path[path.index(parent) :], parent]
                raise InvalidJobError(
                    "workflow has a cycle: " + " -> ".join(label(i) for i in reversed(cycle))
                )
            if state[parent] == 0:
                visit(parent)
        path.pop()
        state[index] = 2

    for index in range(len(parents_of)):
        if state[index] == 0:
            visit(index)


def _with_depends(spec: JobSpec, depends_on: tuple[int, ...]) -> JobSpec:
    from dataclasses import replace

    return replace(spec, depends_on=depends_on)


def _ttl(value: float | timedelta | None) -> timedelta | None:
    if value is None:
        return None
    ttl = to_timedelta(value, "result_ttl")
    if ttl <= timedelta(0):
        raise InvalidJobError(f"result_ttl must be positive, got {value!r}")
    return ttl


def _app_of(workflow: Workflow) -> App:
    call = _first_call(workflow)
    return call.task.app


def _first_call(step: Any) -> JobCall:
    if isinstance(step, JobCall):
        return step
    if isinstance(step, DAG):
        return step._calls[0]
    return _first_call(step.steps[0])


def _describe(step: Step) -> str:
    return step.task.name if isinstance(step, JobCall) else repr(step)
