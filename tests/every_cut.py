"""Reference enumerations of interleaved cuts for the exact-search tests: every cut Megatron's layout accepts
in the covered family (empty_stages.py: the first and last rank's virtual stages may be empty), one per
distinct holding where the family is too large to list, and random cuts of it."""

from __future__ import annotations

import random

import numpy as np

from parasol.problems.empty_stages import stage_least
from parasol.solver.search.interleaved import InterleavedCuts


def distinct_holdings(cuts: InterleavedCuts) -> list[tuple[tuple[int, ...], int]]:
    """One cut per distinct holding (every rank's kind-group counts) of the row, with the least spread
    Σ |stage length · stages − n| any cut of that holding has: (layout, spread) pairs. A rank's time and memory
    depend only on its holding, so these cuts have every (slowest time, peak memory) any cut has, and the least
    spread of each. Stage by stage, keeping one partial cut per (end block, holding so far)."""
    n, pp, stages = cuts.n, cuts.pp, cuts.stages
    codes = (cuts.relaxed.counts @ cuts.relaxed.place).tolist()
    least = cuts.least
    later = [sum(least[k + 1:]) for k in range(stages)]
    states: dict[tuple[int, tuple[int, ...]], tuple[int, tuple[int, ...]]] = {(0, (0,) * pp): (0, ())}
    for k in range(stages):
        r, grown = k % pp, {}
        for (pos, held), (spread, layout) in states.items():
            low = n if k == stages - 1 else pos + least[k]
            for end in range(low, n - later[k] + 1):
                ranks = list(held)
                ranks[r] += codes[pos][end]
                key, value = (end, tuple(ranks)), (spread + abs((end - pos) * stages - n), (*layout, end - pos))
                if key not in grown or value < grown[key]:
                    grown[key] = value
        states = grown
    return sorted((layout, spread) for (_, _), (spread, layout) in states.items())


def distinct_cuts(cuts: InterleavedCuts) -> list[tuple[int, ...]]:
    """distinct_holdings' cuts alone."""
    return [layout for layout, _ in distinct_holdings(cuts)]


def random_cuts(rng: random.Random | np.random.Generator, blocks: int, parts: int, pp: int,
                count: int) -> list[tuple[int, ...]]:
    """`count` cuts of the covered family drawn uniformly (stars and bars over the blocks past each stage's
    least), with a standard or a numpy random generator."""
    least = stage_least(pp, parts // pp)
    spare = blocks + parts - sum(least)
    out = []
    for _ in range(count):
        bars = rng.sample(range(1, spare), parts - 1) if isinstance(rng, random.Random) else \
            rng.choice(np.arange(1, spare), parts - 1, replace=False).tolist()
        edges = (0, *sorted(bars), spare)
        out.append(tuple(edges[i + 1] - edges[i] - 1 + least[i] for i in range(parts)))
    return out
