"""Benchmarks: the records a run evaluates (records.py), loading and validating a benchmark
file (loader.py, validate.py, benchmark_json.py), the importers of public benchmarks
(ovo_bench.py, streamingbench.py, trace_release.py, importing.py) and the built-in synthetic
benchmark and sample data (synthetic.py, sample.py).

May import: errors, frames.
"""
