"""Workflow builders compile to nodes: shapes, how results are passed, bad input."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgqueue import DAG, InvalidJobError, PgQueue, chain, chord, group

app = PgQueue("postgresql://unused")  # compiling never connects


@app.task(name="t.add")
def add(x: int, y: int = 0) -> int:
    return x + y


@app.task(name="t.total")
def total(values: list[int], scale: int = 1) -> int:
    return sum(values) * scale


@app.task(name="t.ping")
def ping() -> None:
    return None


@app.task(name="t.alert")
def alert(info: dict[str, object], channel: str) -> None:
    return None


def shape(workflow):
    compiled = workflow.compile()
    return [(n.spec.task, n.parents, n.receive, n.result_arg) for n in compiled.nodes], compiled


def test_chain_passes_each_result_to_the_first_free_required_parameter():
    nodes, compiled = shape(chain(add.s(1, 2), add.s(y=10), add.s(5)))
    assert nodes == [
        ("t.add", (), None, None),
        ("t.add", (0,), "one", "x"),
        ("t.add", (1,), None, None),  # x bound, y has a default: it ignores the result
    ]
    assert compiled.outputs == [2] and not compiled.list_output


def test_a_step_with_every_parameter_bound_ignores_the_result():
    nodes, _ = shape(chain(add.s(1), add.s(1, 2), ping.s()))
    assert [n[2:] for n in nodes] == [(None, None), (None, None), (None, None)]
    assert [n[1] for n in nodes] == [(), (0,), (1,)]


def test_group_and_chord():
    nodes, compiled = shape(group(add.s(i) for i in range(3)))
    assert [n[1] for n in nodes] == [(), (), ()]
    assert compiled.outputs == [0, 1, 2] and compiled.list_output
    nodes, compiled = shape(chord([add.s(i) for i in range(3)], total.s(scale=2)))
    assert nodes[-1] == ("t.total", (0, 1, 2), "list", "values")
    assert compiled.outputs == [3] and not compiled.list_output


def test_nested_chain_in_group_and_group_in_chain():
    nodes, compiled = shape(
        chain(add.s(1), group(add.s(y=1), chain(add.s(y=2), add.s(y=3))), total.s())
    )
    assert nodes == [
        ("t.add", (), None, None),
        ("t.add", (0,), "one", "x"),
        ("t.add", (0,), "one", "x"),
        ("t.add", (2,), "one", "x"),
        ("t.total", (1, 3), "list", "values"),
    ]
    assert compiled.outputs == [4]


def test_missing_arguments_are_an_error_unless_a_result_fills_them():
    with pytest.raises(InvalidJobError, match="missing a required argument: 'x'"):
        chain(add.s(), add.s(1)).compile()  # the first step has no parent
    with pytest.raises(InvalidJobError, match="missing a required argument: 'values'"):
        group(total.s()).compile()
    with pytest.raises(InvalidJobError, match="missing a required argument"):
        app.enqueue_many([add.s()])  # outside a workflow nothing fills it
    with pytest.raises(InvalidJobError, match="unexpected keyword argument 'z'"):
        add.s(z=1)


def test_on_failure_step_receives_the_failure_in_its_first_free_parameter():
    compiled = chain(add.s(1), on_failure=alert.s(channel="ops")).compile()
    assert compiled.on_failure is not None and compiled.on_failure.result_arg == "info"
    with pytest.raises(InvalidJobError, match="missing a required argument: 'channel'"):
        chain(add.s(1), on_failure=alert.s()).compile()
    with pytest.raises(InvalidJobError, match="outermost workflow"):
        chain(add.s(1), group(add.s(2), on_failure=alert.s(channel="x")))
    with pytest.raises(InvalidJobError, match="on_failure must be a job description"):
        chain(add.s(1), on_failure="alert")  # type: ignore[arg-type]


def test_workflow_options_are_checked():
    with pytest.raises(InvalidJobError, match="result_ttl must be positive"):
        chain(add.s(1), result_ttl=0)
    assert chain(add.s(1), result_ttl=60).compile().result_ttl == timedelta(seconds=60)
    with pytest.raises(InvalidJobError, match="empty group"):
        group().compile()
    with pytest.raises(InvalidJobError, match="must be job descriptions"):
        chain(add)  # type: ignore[arg-type]


def test_dag_nodes_by_handle_name_and_job_id():
    dag = DAG(name="etl")
    a = dag.add(add.s(1), name="a")
    b = dag.add(add.s(2), depends_on=[a])
    c = dag.add(add.s(3), depends_on=["a", 42])
    dag.add(total.s([]), depends_on=[b, c, b], name="d")
    nodes, compiled = shape(dag)
    assert [n[1] for n in nodes] == [(), (0,), (0,), (1, 2)]
    assert compiled.nodes[2].spec.depends_on == (42,)
    assert all(n[2] is None for n in nodes)  # DAG nodes receive nothing
    assert compiled.outputs == [3] and compiled.names == {"a": 0, "d": 3}


def test_dag_cycles_are_rejected_with_the_cycle_named():
    dag = DAG()
    dag.add(add.s(1), name="a", depends_on=["c"])
    dag.add(add.s(2), name="b", depends_on=["a"])
    dag.add(add.s(3), name="c", depends_on=["b"])
    with pytest.raises(InvalidJobError, match=r"cycle: .*a -> b -> c|cycle: .*c -> a -> b"):
        dag.compile()
    selfish = DAG()
    selfish.add(add.s(1), name="x", depends_on=["x"])
    with pytest.raises(InvalidJobError, match="cycle: x -> x"):
        selfish.compile()


def test_dag_bad_references():
    dag = DAG()
    dag.add(add.s(1), depends_on=["nope"])
    with pytest.raises(InvalidJobError, match="unknown node 'nope'"):
        dag.compile()
    other = DAG()
    node = other.add(add.s(1))
    with pytest.raises(InvalidJobError, match="another DAG"):
        DAG().add(add.s(1), depends_on=[node])
    with pytest.raises(InvalidJobError, match="already exists"):
        d = DAG()
        d.add(add.s(1), name="a")
        d.add(add.s(2), name="a")
    with pytest.raises(InvalidJobError, match="nothing to run"):
        DAG().compile()
