"""Sluice benchmarks: workloads W1–W8 against a raw Celery floor.

Run `python -m bench [--quick] [--only W1,W2] [--out bench/]`; see `bench.run`.
Not part of the test suite: `tests/integration/test_bench_smoke.py` only checks
that a tiny run works.
"""
