"""Benchmarks: each script measures one thing and rewrites its own section of RESULTS.md.

Run one with ``python benchmarks/NAME.py`` (or ``python -m benchmarks.NAME``), all with
``python benchmarks/run_all.py``. Timings are never asserted in tests; they live here.
"""
