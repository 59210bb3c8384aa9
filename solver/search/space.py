"""The search space: allowed values per degree, and the degree rows the CP-SAT program chooses from.

Degrees are few and structured (divisors of the world size), so the program works on table rows:
every combination of allowed values whose folding identity has whole solutions (D_a, D_e and m are
whole numbers, seed 000 §并行分组) becomes a row with precomputed costs. Every rule is still posted
on the row's degree variables, so a row that breaks a rule is excluded by CP-SAT, not here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import product

from parasol.constraints.physics.exchanges import links_for
from parasol.problems.loader import Problem
from parasol.problems.mapping import DEGREES, Mapping, RankOrder, Recompute

POWERS_OF_TWO = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _pins(value: int | list[int] | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    return (value,) if isinstance(value, int) else tuple(sorted(set(value)))


MIN_TOKENS_PER_CP_RANK = 1024
"""Default CP stops where a rank would hold fewer tokens of a sequence than this."""


def default_domains(problem: Problem) -> dict[str, tuple[int, ...]]:
    """Values tried when the problem's `search` leaves a degree open: TP within a node dividing the
    heads, PP up to the block count, CP up to 8 with at least MIN_TOKENS_PER_CP_RANK tokens per rank
    and S divisible by 2·CP, EP dividing the experts, VPP 1-2, MBS 1-2. ETP is 1 or TP (see rows);
    a search section widens any of them."""
    model, gpus, seq = problem.model, problem.gpus, problem.training.seq_len
    node = problem.hardware.topology.gpus_per_node
    heads = model.attention.num_heads
    tp = tuple(t for t in POWERS_OF_TWO if t <= node and heads % t == 0)
    pp = tuple(p for p in POWERS_OF_TWO if p <= model.num_layers and gpus % p == 0)
    cp = tuple(c for c in POWERS_OF_TWO[:4]
               if c == 1 or (seq % (2 * c) == 0 and seq // c >= MIN_TOKENS_PER_CP_RANK))
    experts = model.moe.num_experts if model.moe else 1
    ep = tuple(e for e in range(1, experts + 1) if experts % e == 0 and e <= gpus)
    return {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "etp": tp, "vpp": (1, 2), "mbs": (1, 2)}


def search_domains(problem: Problem) -> dict[str, tuple[int, ...]]:
    """The problem's search space: its pins and lists where given, the defaults elsewhere."""
    defaults = default_domains(problem)
    search = problem.spec.search
    out = {}
    for name in DEGREES:
        pinned = _pins(getattr(search, name))
        out[name] = pinned if pinned is not None else defaults[name]
    if problem.training.micro_batch is not None and search.mbs is None:
        out["mbs"] = (problem.training.micro_batch,)
    return out


def recompute_choices(problem: Problem) -> tuple[Recompute, ...]:
    """Recompute options the solver may pick (all three unless the problem's search restricts them)."""
    chosen = problem.spec.search.recompute
    if chosen is None:
        return tuple(Recompute)
    return (chosen,) if isinstance(chosen, Recompute) else tuple(sorted(set(chosen), key=list(Recompute).index))


def rank_order_choices(problem: Problem) -> tuple[RankOrder, ...]:
    """Rank orders the solver may pick: the one a problem's Megatron options set explicitly, else the
    search section's, else both."""
    options = problem.spec.framework.options
    if "use_tp_pp_dp_mapping" in options.model_fields_set:
        return (RankOrder.dp_last if options.use_tp_pp_dp_mapping else RankOrder.pp_last,)
    chosen = problem.spec.search.rank_order
    if chosen is None:
        return tuple(RankOrder)
    return (chosen,) if isinstance(chosen, RankOrder) else tuple(o for o in RankOrder if o in chosen)


def distinct_orders(problem: Problem, orders: tuple[RankOrder, ...], row: Row) -> tuple[RankOrder, ...]:
    """The orders worth a row of their own when the search chooses: tp-cp-ep-pp-dp only where Megatron
    accepts it with PP > 1 (TP·CP == ETP·EP, parallel_state.py:898-907) and it puts some group kind on
    other links than the default order does; elsewhere it would repeat the default's row."""
    if len(orders) == 1:
        return orders
    r = row
    if not (r.pp > 1 and r.tp * r.cp == r.etp * r.ep and problem.gpus // (r.tp * r.cp * r.pp) > 1):
        return (RankOrder.pp_last,)
    topology, mapping = problem.hardware.topology, r.mapping(problem)
    swapped = mapping.model_copy(update={"rank_order": RankOrder.dp_last})
    if links_for(topology, mapping) == links_for(topology, swapped):
        return (RankOrder.pp_last,)
    return orders


@dataclass(frozen=True, order=True)
class Row:
    """One candidate combination of degrees and recompute, in a stable order."""

    pp: int
    vpp: int
    tp: int
    cp: int
    ep: int
    etp: int
    mbs: int
    recompute: str
    rank_order: str = RankOrder.pp_last.value
    saving: str = "none"
    """A memory saving solve switched on for this row (solver/search/savings.py), 'none' for the problem's own."""

    def mapping(self, problem: Problem, layout: tuple[int, ...] | None = None) -> Mapping:
        """The full mapping this row stands for (layout None: the default split)."""
        return Mapping(gpus=problem.gpus, gbs=problem.training.global_batch, seq_len=problem.training.seq_len,
                       tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep, etp=self.etp, vpp=self.vpp,
                       mbs=self.mbs, recompute=self.recompute, layout=layout, rank_order=self.rank_order)


def whole_folding(gpus: int, gbs: int, tp: int, pp: int, cp: int, ep: int, etp: int, mbs: int) -> bool:
    """D_a = N/(TP·PP·CP), D_e = N/(ETP·EP·PP) and m = GBS/(MBS·D_a) are whole (m >= 1)."""
    if gpus % (tp * pp * cp) or gpus % (etp * ep * pp):
        return False
    per_step = mbs * gpus // (tp * pp * cp)
    return gbs % per_step == 0


def expert_tp_choices(problem: Problem, tp: int, listed: tuple[int, ...]) -> tuple[int, ...]:
    """ETP values a row with this TP takes: a dense model has no expert grid, so ETP = TP only (whatever
    `search.etp` lists, and even where TP leaves the node); a MoE model takes the listed values, or when
    ETP is left open TP (Megatron's default) and 1 (whole experts per rank)."""
    if problem.model.moe is None:
        return (tp,)
    return listed if problem.spec.search.etp is not None else tuple(sorted({1, tp}))


CLOCK_EVERY = 4096
"""Degree combinations enumerated between two looks at the clock."""


def enumerate_rows(problem: Problem, domains: dict[str, tuple[int, ...]] | None = None) -> tuple[Row, ...]:
    """Every row of the search space with a whole folding identity and at least one block per stage."""
    return rows_until(problem, None, domains)[0]


def rows_until(problem: Problem, deadline: float | None,
               domains: dict[str, tuple[int, ...]] | None = None) -> tuple[tuple[Row, ...], bool]:
    """The rows of enumerate_rows listed until `deadline` (time.perf_counter(), None: no limit), and
    whether the listing is complete (a search space too large for the time limit is cut short). ETP per
    TP as expert_tp_choices says."""
    doms = domains or search_domains(problem)
    gpus, gbs = problem.gpus, problem.training.global_batch
    blocks = problem.model.num_layers
    orders = rank_order_choices(problem)
    rows = []
    others = [doms[n] for n in DEGREES if n != "etp"]
    for k, (tp, pp, cp, ep, vpp, mbs) in enumerate(product(*others)):
        if deadline is not None and k % CLOCK_EVERY == 0 and time.perf_counter() > deadline:
            return tuple(sorted(rows)), False
        for etp in expert_tp_choices(problem, tp, doms["etp"]):
            if pp * vpp <= blocks and whole_folding(gpus, gbs, tp, pp, cp, ep, etp, mbs):
                rows.extend(_rows(problem, orders, Row(pp, vpp, tp, cp, ep, etp, mbs, Recompute.none.value)))
    return tuple(sorted(rows)), True


def _rows(problem: Problem, orders: tuple[RankOrder, ...], base: Row) -> list[Row]:
    """The rows of one degree combination: one per recompute option and distinct rank order."""
    return [Row(base.pp, base.vpp, base.tp, base.cp, base.ep, base.etp, base.mbs, r.value, o.value)
            for r in recompute_choices(problem) for o in distinct_orders(problem, orders, base)]
