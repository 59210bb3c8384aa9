"""The layered layout search (solver/search/layered.py) and the layout answers shared between rows (issue 15):
on small rows with several kinds of block it finds a layout for exactly the per-rank counts some cut has and
none for counts no cut has (enumeration of every holding of the cut family, tests/every_cut.py), and a row's exact layout answers are the
same whichever row asked first. The ordered search through it alone: tests/test_interleaved_cuts.py."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from parasol.solver.search import interleaved, layered
from parasol.solver.search.cut_program import UNBOUNDED
from parasol.solver.search.cuts import rank_counts
from parasol.solver.search.interleaved import InterleavedCuts
from parasol.solver.search.layered import layered_layout
from tests.every_cut import distinct_cuts
from tests.test_interleaved_cuts import _several_kind_rows


def _layered(cuts: InterleavedCuts, targets: tuple[tuple[int, ...], ...]) -> tuple[int, ...] | None:
    return layered_layout(np.array(cuts._prefix_codes[0], dtype=np.int64),
                          [cuts._suffix_arrays[cuts._edge(r)] for r in range(cuts.pp)],
                          cuts.relaxed.place.astype(np.int64), cuts.least, np.array(targets, dtype=np.int64),
                          lambda: False)


def _moved(targets: tuple[tuple[int, ...], ...]) -> list[tuple[tuple[int, ...], ...]]:
    """The count tuples one block of one kind moved from a rank to another away from `targets`."""
    out = []
    for a, b in itertools.permutations(range(len(targets)), 2):
        for g, held in enumerate(targets[a]):
            if held:
                moved = [list(t) for t in targets]
                moved[a][g] -= 1
                moved[b][g] += 1
                out.append(tuple(map(tuple, moved)))
    return out


def test_layered_search_finds_exactly_the_counts_some_cut_has() -> None:
    """Every per-rank count tuple some cut has gets a layout holding exactly it; every tuple one block away
    from one (moved between two ranks: the model's totals kept) that no cut has gets None."""
    found = refused = 0
    for c, counts, _ in _several_kind_rows():
        cuts = InterleavedCuts(c, counts)
        merged = cuts.relaxed.counts
        held = {tuple(map(tuple, rank_counts(layout, cuts.pp, merged))) for layout in distinct_cuts(cuts)}
        for targets in sorted(held):
            layout = _layered(cuts, targets)
            assert layout is not None and tuple(map(tuple, rank_counts(layout, cuts.pp, merged))) == targets
            found += 1
        for targets in sorted({m for t in held for m in _moved(t)} - held):
            assert _layered(cuts, targets) is None
            refused += 1
    assert found >= 500 and refused >= 200


def test_exact_layouts_do_not_depend_on_the_row_that_asked_first() -> None:
    """Rows of one sequence, PP and VPP share their exact layout answers (_layouts): for each pair of such
    rows with different costs, the answers to the counts of sample cuts are the same asked by either row under
    its own bounds (the sample's slowest time and peak memory on it) or with none."""
    rows = list(_several_kind_rows())
    pairs = [(a, b) for a, b in itertools.combinations(rows, 2)
             if (a[0].row.pp, a[0].row.vpp) == (b[0].row.pp, b[0].row.vpp) and a[0] != b[0]]
    assert pairs
    for (first, counts, _), (second, _, _) in pairs[:4]:
        samples = []
        for c in (first, second):
            interleaved._layouts.cache_clear()
            cuts = InterleavedCuts(c, counts)
            merged = cuts.relaxed.counts
            layouts = distinct_cuts(cuts)[::7][:20]
            slowest, peak = (max(x) for x in zip(*(cuts.measure(layout) for layout in layouts), strict=True))
            sums = cuts.relaxed.decomposable(slowest, peak)
            samples.append([cuts.realise_exactly(np.array(rank_counts(layout, cuts.pp, merged)), sums)
                            for layout in layouts])
        interleaved._layouts.cache_clear()
        fresh = InterleavedCuts(second, counts)
        merged = fresh.relaxed.counts
        layouts = distinct_cuts(fresh)[::7][:20]
        sums = fresh.relaxed.decomposable(UNBOUNDED, UNBOUNDED)
        again = [fresh.realise_exactly(np.array(rank_counts(layout, fresh.pp, merged)), sums) for layout in layouts]
        assert samples[0] == samples[1] == again
    interleaved._layouts.cache_clear()


def test_needs_read_by_division_answer_as_the_digit_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank whose packed needs take more values than layered.DIGIT_TABLE has its needs divided out of the
    packed number instead of read from a table: with no table at all, every question of the first test (the
    counts some cut has, and those one block away) gets the same answer."""
    asked = []
    for c, counts, _ in _several_kind_rows():
        cuts = InterleavedCuts(c, counts)
        merged = cuts.relaxed.counts
        held = sorted({tuple(map(tuple, rank_counts(layout, cuts.pp, merged))) for layout in distinct_cuts(cuts)})
        asked += [(cuts, targets) for targets in held[::5] + sorted({m for t in held[::5] for m in _moved(t)})]
    tabled = [_layered(cuts, targets) for cuts, targets in asked]
    monkeypatch.setattr(layered, "DIGIT_TABLE", 0)
    assert [_layered(cuts, targets) for cuts, targets in asked] == tabled
    assert sum(found is None for found in tabled) >= 50 and sum(found is not None for found in tabled) >= 50
