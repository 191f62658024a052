"""``tritonforge tune``: the best batching / instance config for a p99 budget, found by measurement.

The search (candidates.py, search.py) is pure and unit-tested; measure.py loads each
candidate into a real tritonserver (explicit model control) and runs perf_analyzer.
"""
