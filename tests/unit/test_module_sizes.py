"""Small modules with one job each: no Python module of the package over 600 lines, no named
query file over 700 (docs/design.md, "Code layout"). A module that grows past it is split by
responsibility, not trimmed of its comments."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pgqueue"
MOST_LINES = {".py": 600, ".sql": 700}


def test_no_module_of_the_package_is_over_its_size() -> None:
    over = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*"))
        if path.suffix in MOST_LINES
        and (lines := len(path.read_text().splitlines())) > MOST_LINES[path.suffix]
    }
    assert not over, f"split these by responsibility: {over}"
