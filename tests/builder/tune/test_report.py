"""The tuning report says what the chosen config does with ONNX Runtime's idle workers."""

from __future__ import annotations

from builder.tune.candidates import Candidate, runner_spins
from builder.tune.report import markdown, spinning_line
from builder.tune.search import Point, SearchResult, Trial


def result(default: Candidate, chosen: Candidate) -> SearchResult:
    first = Trial(default, "measured", points=[Point(1, 100.0, 1.0, 2.0)])
    best = Trial(chosen, "measured", points=[Point(1, 150.0, 1.0, 2.0)])
    return SearchResult(10.0, first, best, [first, best])


def test_the_report_shows_the_chosen_spinning() -> None:
    default = Candidate(1, 0, (), 8)
    r = result(default, Candidate(1, 0, (), 8, spinning=False))
    line = spinning_line(r)
    unset = "spinning" if runner_spins(default) else "sleeping"  # the runner's rule on these cores
    assert line == (
        "Idle intra-op workers (targets.local.spinning): chosen sleeping, "
        f"spec default {unset} (unset: spin only with a core to spare)"
    )
    text = markdown(r, "m", None, "", {})
    assert line in text and "`i1 d0 p[-] mb8 nospin` **chosen**" in text


def test_no_spinning_line_when_it_was_not_searched() -> None:
    r = result(Candidate(1, 0, (), 8), Candidate(2, 0, (), 8))
    assert spinning_line(r) == "" and "targets.local.spinning" not in markdown(r, "m", None, "", {})
