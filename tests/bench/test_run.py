"""The benchmark runner's own bookkeeping."""

from bench.run import summary_name


def test_a_partial_run_never_replaces_the_whole_runs_summary() -> None:
    assert summary_name(quick=False, partial=False) == "summary.md"
    assert summary_name(quick=False, partial=True) == "summary_partial.md"
    assert summary_name(quick=True, partial=True) == "summary_quick_partial.md"
