"""Pure pieces of the benchmark harness: DSN conversion for the peers, the table's ratios."""

from __future__ import annotations

from benchmarks import report
from benchmarks.compare import Results, Workload
from benchmarks.systems import RAW, System, url


def test_url_from_key_value_dsn():
    assert url("user=postgres dbname=bench host=localhost port=5432") == (
        "postgresql://postgres@localhost:5432/bench"
    )
    assert url("user=u password=p@ss dbname=d host=/run/pg port=5433") == (
        "postgresql://u:p%40ss@:5433/d?host=%2Frun%2Fpg"
    )
    assert url("postgresql://x@h/db") == "postgresql://x@h/db"


def test_table_has_medians_ranges_and_ratios():
    pgqueue = System("pgqueue", "pgqueue", [], "", "", "")
    results = Results()
    for value in (10.0, 30.0, 20.0):
        results.add("drain_1", "pgqueue", value)
    for value in (5.0, 10.0, 15.0):
        results.add("drain_1", "raw", value)
    context = report.Context(
        machine="m",
        command="c",
        runs=3,
        load=(0.0, 0.0),
        minutes=1,
        systems=[RAW, pgqueue],
        workloads=[Workload("drain_1", "drain", "jobs/s")],
    )
    table = report.render(context, results)
    assert "| drain (jobs/s) | 10 (5-15) | 20 (10-30) | 2.00 |" in table


def test_write_replaces_only_the_marked_block(tmp_path):
    path = tmp_path / "b.md"
    path.write_text(f"# B\n\nbefore\n\n{report.BEGIN}\nold\n{report.END}\n\nafter\n")
    report.write(path, "new table")
    assert (
        path.read_text() == f"# B\n\nbefore\n\n{report.BEGIN}\nnew table\n{report.END}\n\nafter\n"
    )
