"""A CP-SAT program over one interleaved row's cut: is there a cut with every rank within a time and a
memory bound? It settles the bounds the branch and bound (solver/search/interleaved.py) runs out of
budget on. Boundaries b_0 = 0 ≤ b_1 ≤ … ≤ b_{PP·VPP} = L, each stage holding at least its least
(empty_stages.py); every prefix sum (time, static and activation MB, blocks of each kind) is read at a
boundary by an element constraint; a rank's load is the sum of its virtual stages' differences, and its
memory the RowCosts.stage_memory terms on them."""

from __future__ import annotations

import math
from time import perf_counter

from parasol.cp_sat import cp_model
from parasol.solver.search.cpsat import deterministic_solver

UNBOUNDED = 1 << 62
"""A time or memory bound that bounds nothing."""
CUT_PROOF_WORK = 5.0
"""Deterministic work (CP-SAT's load-independent time units) one cut question may take; past it the
question is left open and the staircase is reported unproved."""


class Undecided(Exception):
    """The cut program used its work limit without an answer."""


def cut_within(cuts, slowest_us: int, cap_mb: int,  # noqa: ANN001 - InterleavedCuts
               deadline: float = math.inf, work: float | None = None) -> tuple[int, ...] | None:
    """A cut of `cuts`' row with every rank within `slowest_us` and `cap_mb`, or None when none exists;
    raises Undecided when CP-SAT runs out of work (`work` units, None: CUT_PROOF_WORK)."""
    c, b, n, pp, k = cuts.c, cuts.b, cuts.n, cuts.pp, cuts.stages
    m = cp_model.CpModel()
    before, total = cuts.least_before, cuts.least_before[-1]
    bounds = ([m.NewConstant(0)] + [m.NewIntVar(before[i], n - (total - before[i]), f"b{i}") for i in range(1, k)]
              + [m.NewConstant(n)])
    for i in range(k):
        m.Add(bounds[i + 1] >= bounds[i] + cuts.least[i])
    kinds = len(c.kind_static)

    def read(table: tuple[int, ...] | list[int], name: str) -> list[cp_model.IntVar]:
        out = []
        for i, x in enumerate(bounds):
            v = m.NewIntVar(min(table), max(table), f"{name}{i}")
            m.AddElement(x, list(table), v)
            out.append(v)
        return out

    time, static, act = read(b.time, "t"), read(b.static, "s"), read(b.act, "a")
    per_kind = [read([sum(1 for x in b.bit[:j] if x >> q & 1) for j in range(n + 1)], f"k{q}_") for q in range(kinds)]
    for r in range(pp):
        stages = range(r, k, pp)

        def load(prefix: list[cp_model.IntVar], stages: range = stages) -> cp_model.LinearExpr:
            return sum(prefix[s + 1] - prefix[s] for s in stages)

        if slowest_us < UNBOUNDED:
            m.Add(c.edge_time_us[r] + load(time) <= slowest_us)
        frac = c.inflight[r]
        held = c.edge_activation[r] + load(act)
        act_mb = m.NewIntVar(0, 10**12, f"act{r}")
        m.Add(frac.denominator * act_mb >= frac.numerator * held)
        peak = m.NewIntVar(0, max([c.edge_peak[r], *c.kind_peak]), f"peak{r}")
        m.Add(peak >= c.edge_peak[r])
        moe = m.NewBoolVar(f"moe{r}")
        if c.edge_moe[r]:
            m.Add(moe == 1)
        for q in range(kinds):
            present = m.NewBoolVar(f"has{r}_{q}")
            m.Add(load(per_kind[q]) == 0).OnlyEnforceIf(present.Not())
            m.Add(peak >= c.kind_peak[q]).OnlyEnforceIf(present)
            if c.kind_moe[q]:
                m.AddImplication(present, moe)
        m.Add(c.edge_static[r] + load(static) + act_mb + peak + c.dispatch_mb * moe + c.workspace_mb <= cap_mb)
    solver = deterministic_solver(min(3600.0, deadline - perf_counter()))
    solver.parameters.max_deterministic_time = CUT_PROOF_WORK if work is None else work
    status = solver.Solve(m)
    if status == cp_model.INFEASIBLE:
        return None
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise Undecided
    values = [solver.Value(x) for x in bounds]
    return tuple(values[i + 1] - values[i] for i in range(k))
