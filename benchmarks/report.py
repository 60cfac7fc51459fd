"""The comparison's table (markdown), and writing it into docs/benchmarks.md between markers."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.compare import Results, Workload
    from benchmarks.systems import System

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BEGIN = "<!-- compare:begin (written by python -m benchmarks.compare) -->"
END = "<!-- compare:end -->"
#: Not peers: pgqueue's own flavours and the raw ceiling.
OURS = ("raw", "pgqueue", "pgqueue_def")


@dataclass
class Context:
    machine: str
    command: str
    runs: int
    load: tuple[float, float]
    minutes: float
    systems: list[System]
    workloads: list[Workload]


def _number(value: float, unit: str) -> str:
    if math.isnan(value):
        return "n/a"
    if unit == "ms":
        return f"{value:.1f}"
    return f"{value:,.0f}"


def _cell(values: list[float] | None, unit: str) -> str:
    if not values:
        return ""
    median = statistics.median(values)
    if len(values) == 1:
        return _number(median, unit)
    return f"{_number(median, unit)} ({_number(min(values), unit)}-{_number(max(values), unit)})"


def _ratio(mine: list[float] | None, theirs: list[float] | None) -> str:
    if not mine or not theirs:
        return ""
    a, b = statistics.median(mine), statistics.median(theirs)
    if b == 0 or math.isnan(a) or math.isnan(b):
        return "n/a"
    return f"{a / b:.2f}"


def render(context: Context, results: Results) -> str:
    labels = {s.key: s.label for s in context.systems}
    keys = [s.key for s in context.systems]
    # Ratio columns: each peer against the pgqueue flavour it is compared with (plain `def`
    # tasks for the thread- and process-based brokers, `async def` otherwise), if in the run.
    mine = {s.key: s.compare_with for s in context.systems}
    peers = [
        (mine[k] if mine[k] in keys else "pgqueue", k)
        for k in keys
        if k not in OURS and (mine[k] in keys or "pgqueue" in keys)
    ]
    lines = [
        f"Command: `{context.command}`",
        "",
        f"Machine: {context.machine}. Load average {context.load[0]:.2f} at the start, "
        f"{context.load[1]:.2f} at the end; {context.minutes:.0f} minutes.",
        "",
        f"Each figure: median of {context.runs} run(s) (min-max). Ratios are pgqueue divided "
        "by the other system's median: above 1 pgqueue is faster for jobs/s, below 1 pgqueue "
        "is faster for latencies (ms) and backlogs. A blank cell: the system has no such job "
        "or API (listed under the table).",
        "",
    ]
    header = ["workload", *(labels[k] for k in keys)]
    header += [f"{labels[ours]} / {labels[k]}" for ours, k in peers]
    with_raw = "raw" in keys and "pgqueue" in keys
    if with_raw:
        header.append("pgqueue / raw")
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for workload in context.workloads:
        figures = results.figures.get(workload.key, {})
        row = [f"{workload.label} ({workload.unit})"]
        row += [_cell(figures.get(k), workload.unit) for k in keys]
        if workload.ratio:
            row += [_ratio(figures.get(ours), figures.get(k)) for ours, k in peers]
            if with_raw:
                row.append(_ratio(figures.get("pgqueue"), figures.get("raw")))
        else:
            row += [""] * (len(peers) + with_raw)
        lines.append("| " + " | ".join(row) + " |")
    if results.statements:
        lines += ["", "Statements per 1,000 jobs (`pg_stat_statements`, top level, first run):", ""]
        columns = [
            ("enqueue_1", "single enqueue"),
            ("bulk", "bulk enqueue"),
            ("drain_1", "drain, 1 process"),
        ]
        lines.append("| system | " + " | ".join(c for _, c in columns) + " |")
        lines.append("|---|" + "---|" * len(columns))
        for key in keys:
            if key not in results.statements:
                continue
            counts: dict[str, Any] = results.statements[key]
            cells = [f"{counts[w]:,.1f}" if w in counts else "" for w, _ in columns]
            lines.append(f"| {labels[key]} | " + " | ".join(cells) + " |")
        for key in keys:
            breakdown = results.breakdown.get(key)
            if not breakdown:
                continue
            lines += ["", f"{labels[key]}, drain with 1 process: statements by call count", ""]
            lines.append("| calls | statement |")
            lines.append("|---|---|")
            for query, calls in breakdown:
                text = query if len(query) <= 110 else query[:107] + "..."
                lines.append(f"| {calls:,} | `{text.replace('|', '¦')}` |")
    lines += ["", "How each system is configured:", ""]
    lines += [f"- **{s.label}**: {s.description}" for s in context.systems]
    if results.notes:
        lines += ["", "Notes from the run:", ""]
        lines += [f"- {note}" for note in results.notes]
    return "\n".join(lines)


def markers(block: str) -> tuple[str, str]:
    """The begin and end markers of the named block (``compare``: the one the page had first)."""
    if block == "compare":
        return BEGIN, END
    return (
        f"<!-- {block}:begin (written by python -m benchmarks.compare --block {block}) -->",
        f"<!-- {block}:end -->",
    )


def write(path: Path, table: str, block: str = "compare") -> None:
    """Replace the text between the markers in ``path`` (append a section if they are absent)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    begin, end = markers(block)
    block_text = f"{begin}\n{table}\n{end}"
    if begin in text and end in text:
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = head + block_text + tail
    else:
        text = text.rstrip("\n") + "\n\n## Side by side with the peers\n\n" + block_text + "\n"
    path.write_text(text)
