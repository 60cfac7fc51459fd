"""Benchmark drivers: one script per system, run as a subprocess by ``benchmarks.compare``.

The peers' drivers run in the benchmark's own virtualenv (``benchmarks/.peers-venv``), so nothing
in this package may import pgqueue except ``pgqueue_driver`` (run with the project's Python).
"""
