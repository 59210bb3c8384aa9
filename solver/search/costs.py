"""Per-row cost tables: what each kind of block costs in memory and time on the rank that holds it.

The CP-SAT program and the brute-force reference both read these integer tables, and the memory
numbers are exactly those of the Python ledger (constraints/physics/memory.py sums the same contributions),
so a stage's memory and time follow from how many blocks of each kind it holds.

Resolution of the objectives: step time in units of TIME_UNIT_S, peak memory in MEMORY_UNIT_MB MB,
both rounded up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Protocol

import numpy as np

from parasol.constraints.physics.memory import (
    Contribution,
    block_contribution,
    block_kind,
    dispatch_buffer_bytes,
    edge_contribution,
    fsdp_buffer_bytes,
    inflight_microbatches,
    workspace_bytes,
)
from parasol.constraints.physics.schedule import pipeline_time_scaled
from parasol.problems.derived import Derived, derive
from parasol.problems.loader import Problem
from parasol.problems.mapping import Mapping
from parasol.problems.memo import memo_table, memoised
from parasol.problems.model.architecture import Block
from parasol.solver.search.space import Row, with_choices

TIME_UNIT_S = 1e-4
"""Step-time resolution of the solver's objective: 0.1 ms."""
MB = 10**6
"""Memory tables are whole MB (decimal), each entry rounded up: the solver's memory is never below
the ledger's, and exceeds it by at most one MB per table entry summed."""
MEMORY_UNIT_MB = 10
"""Peak-memory resolution of the solver's objective: 10 MB (0.01 GB)."""
MICROSECONDS = 10**6


class StageTimeModel(Protocol):
    """The step-time model as the solver sees it: a stage's time per microbatch is its edge time
    (embedding on the first rank; head, loss and MTP on the last) plus the time of each block it
    holds, and the step adds a per-row time outside the pipeline (exposed PP, gradient reduction,
    optimizer). The pipeline formula is RowCosts.step_time_us_scaled."""

    def block_times_s(self, mapping: Mapping, derived: Derived, blocks: list[Block]) -> list[float]: ...

    def edge_times_s(self, mapping: Mapping, derived: Derived) -> list[float]: ...

    def step_extra_s(self, mapping: Mapping, derived: Derived) -> float: ...

    def for_problem(self, problem: Problem) -> StageTimeModel: ...

    def cut_step_times_s(self, mapping: Mapping, derived: Derived, counts: np.ndarray) -> np.ndarray:
        """Exact step seconds of N cuts (counts: N × PP × kinds blocks per pipeline rank), as printed."""
        ...

    def step_floor_s(self, mapping: Mapping, derived: Derived, totals: np.ndarray) -> float:
        """A lower bound on the exact step seconds of every cut (totals: blocks of each kind) under every
        MoE dispatcher and CP communication type the row may choose: solve judges a row by its floor
        before it settles those options (solver/search/choices.py)."""
        ...


def block_kinds(problem: Problem) -> tuple[tuple, ...]:
    """The distinct kinds of main blocks, in order of first appearance (memoised per model)."""
    return tuple(kind_representatives(problem))


def prefix_counts(problem: Problem, kinds: tuple[tuple, ...]) -> tuple[tuple[int, ...], ...]:
    """For each kind, how many of the first i blocks are of that kind (i = 0..L)."""
    out = []
    for kind in kinds:
        acc, row = 0, [0]
        for b in problem.model.blocks:
            acc += block_kind(b) == kind
            row.append(acc)
        out.append(tuple(row))
    return tuple(out)


def _mb(nbytes: int) -> int:
    return -(-nbytes // MB)


def usable_mb(problem: Problem) -> int:
    """Usable HBM per GPU in whole MB, rounded down."""
    return int(problem.hardware.gpu.usable_hbm_bytes) // MB


def _us(seconds: float) -> int:
    return math.ceil(seconds * MICROSECONDS)


@dataclass(frozen=True)
class RowCosts:
    """Integer cost tables of one row: per block kind, per stage edge, and per-row constants.

    Memory per kind/edge is split as the ledger splits it, in whole MB: static (weights, gradients,
    optimizer), activation per microbatch, recompute working set, and whether it holds routed experts."""

    row: Row
    derived: Derived
    microbatches: int
    kind_static: tuple[int, ...]
    kind_activation: tuple[int, ...]
    kind_peak: tuple[int, ...]
    kind_moe: tuple[bool, ...]
    edge_static: tuple[int, ...]
    edge_activation: tuple[int, ...]
    edge_peak: tuple[int, ...]
    edge_moe: tuple[bool, ...]
    inflight: tuple[Fraction, ...]
    dispatch_mb: int
    workspace_mb: int
    kind_time_us: tuple[int, ...]
    edge_time_us: tuple[int, ...]
    constant_time_us: int
    kind_bytes: tuple[tuple[int, int, int], ...] = ()
    """Per kind, the ledger's exact (static, activation, recompute peak) bytes; edge_bytes per stage."""
    edge_bytes: tuple[tuple[int, int, int], ...] = ()
    dispatch_bytes: int = 0
    fixed_bytes: int = 0
    """Workspace and FSDP unit buffers: on every rank."""

    def stage_memory(self, stage: int, counts: tuple[int, ...]) -> int:
        """MB of the heaviest rank of `stage` holding `counts` blocks of each kind (the ledger's terms,
        each rounded up to a whole MB)."""
        static = self.edge_static[stage] + sum(c * n for c, n in zip(self.kind_static, counts, strict=True))
        held = self.edge_activation[stage] + sum(c * n for c, n in zip(self.kind_activation, counts, strict=True))
        frac = self.inflight[stage]
        act = -(-frac.numerator * held // frac.denominator)
        peak = max([self.edge_peak[stage]] + [p for p, n in zip(self.kind_peak, counts, strict=True) if n])
        moe = self.edge_moe[stage] or any(m for m, n in zip(self.kind_moe, counts, strict=True) if n)
        return static + act + peak + (self.dispatch_mb if moe else 0) + self.workspace_mb

    def stage_bytes(self, stage: int, counts: tuple[int, ...]) -> int:
        """Bytes of the heaviest rank of `stage` holding `counts` blocks of each kind, exactly as the
        ledger sums them (constraints/physics/memory.py assemble_stage): what explain prints."""
        static, held, peak = self.edge_bytes[stage]
        for (k_static, k_act, k_peak), n in zip(self.kind_bytes, counts, strict=True):
            if n:
                static, held, peak = static + n * k_static, held + n * k_act, max(peak, k_peak)
        frac = self.inflight[stage]
        moe = self.edge_moe[stage] or any(m for m, n in zip(self.kind_moe, counts, strict=True) if n)
        return (static + -(-frac.numerator * held // frac.denominator) + peak
                + (self.dispatch_bytes if moe else 0) + self.fixed_bytes)

    def stage_time_us(self, stage: int, counts: tuple[int, ...]) -> int:
        """Forward plus backward time of one microbatch on `stage`, microseconds."""
        return self.edge_time_us[stage] + sum(t * n for t, n in zip(self.kind_time_us, counts, strict=True))

    def step_time_us_scaled(self, stage_times: list[int]) -> int:
        """VPP × step time: vpp·C plus VPP × the pipeline time (constraints/physics/schedule.py)."""
        vpp = self.row.vpp
        return vpp * self.constant_time_us + pipeline_time_scaled(sum(stage_times), max(stage_times),
                                                                  self.microbatches, vpp)

    def objectives(self, stage_counts: list[tuple[int, ...]]) -> tuple[int, int]:
        """(step time, peak memory) in the solver's units, rounded up."""
        times = [self.stage_time_us(s, c) for s, c in enumerate(stage_counts)]
        peak = max(self.stage_memory(s, c) for s, c in enumerate(stage_counts))
        time_units = -(-self.step_time_us_scaled(times) // (self.row.vpp * round(TIME_UNIT_S * MICROSECONDS)))
        return time_units, -(-peak // MEMORY_UNIT_MB)


def row_costs(problem: Problem, row: Row, time_model: StageTimeModel | None) -> RowCosts:
    """Build the cost tables of one row from the memory ledger and the step-time model (None: memory
    only, all times zero, for the cheap first pass that finds the rows with a cut that fits); the row's
    framework options (dispatcher, CP communication type) price it."""
    problem = with_choices(problem, row)
    time_model = time_model.for_problem(problem) if time_model is not None else None
    mapping = row.mapping(problem)
    d = derive(problem.model, mapping)
    training = problem.training
    representatives = kind_representatives(problem)
    kinds = block_kinds(problem)
    pp = row.pp
    per_kind, by_end = _contributions(problem, mapping, d)
    edges = [by_end[s == 0, s == pp - 1] for s in range(pp)]
    dispatch = dispatch_buffer_bytes(problem.model, mapping, training)
    workspace, fsdp = workspace_bytes(training), fsdp_buffer_bytes(problem.model, mapping, d, training)
    return RowCosts(
        row=row,
        derived=d,
        microbatches=int(d.num_microbatches),
        kind_static=tuple(_mb(c.static) for c in per_kind),
        kind_activation=tuple(_mb(c.activation) for c in per_kind),
        kind_peak=tuple(_mb(c.recompute_peak) for c in per_kind),
        kind_moe=tuple(c.moe for c in per_kind),
        edge_static=tuple(_mb(c.static) for c in edges),
        edge_activation=tuple(_mb(c.activation) for c in edges),
        edge_peak=tuple(_mb(c.recompute_peak) for c in edges),
        edge_moe=tuple(c.moe for c in edges),
        inflight=tuple(inflight_microbatches(s, pp, row.vpp, d.num_microbatches) for s in range(pp)),
        dispatch_mb=_mb(dispatch),
        workspace_mb=_mb(workspace) + _mb(fsdp),
        kind_time_us=tuple(_us(t) for t in time_model.block_times_s(mapping, d, [representatives[k] for k in kinds]))
        if time_model else (0,) * len(kinds),
        edge_time_us=tuple(_us(t) for t in time_model.edge_times_s(mapping, d)) if time_model else (0,) * pp,
        constant_time_us=_us(time_model.step_extra_s(mapping, d)) if time_model else 0,
        kind_bytes=tuple((c.static, c.activation, c.recompute_peak) for c in per_kind),
        edge_bytes=tuple((c.static, c.activation, c.recompute_peak) for c in edges),
        dispatch_bytes=dispatch,
        fixed_bytes=workspace + fsdp,
    )


CONTRIBUTION_MEMO = 65536
"""Rows' contributions kept per problem (the table starts afresh past this)."""


def _contributions(problem: Problem, mapping: Mapping, d: Derived) -> tuple[list[Contribution],
                                                                            dict[tuple[bool, bool], Contribution]]:
    """(each block kind's contribution, the edges' by (first, last)) of a row, computed once per problem and
    the mapping fields they read: rows differing only in VPP, rank order or cut share them."""
    m = mapping
    key = (m.pp, m.tp, m.expert_tp, m.cp, m.mbs, m.recompute, d.dp_attn, d.dp_expert, d.experts_per_rank)
    table = memo_table(problem, "contributions")
    found = table.get(key)
    if found is None:
        if len(table) >= CONTRIBUTION_MEMO:
            table.clear()
        model, training, options = problem.model, problem.training, problem.spec.framework.options
        representatives = kind_representatives(problem)
        per_kind = [block_contribution(model, m, d, training, representatives[k], options) for k in block_kinds(problem)]
        ends = sorted({(s == 0, s == m.pp - 1) for s in (0, m.pp - 1, min(1, m.pp - 1))})
        found = table[key] = (per_kind, {end: edge_contribution(model, m, d, training, *end, options) for end in ends})
    return found


def kind_representatives(problem: Problem) -> dict[tuple, Block]:
    """The first block of each kind (block_kinds' order), memoised per model."""
    def build() -> dict[tuple, Block]:
        found: dict[tuple, Block] = {}
        for b in problem.model.blocks:
            found.setdefault(block_kind(b), b)
        return found

    return memoised(problem.model, "kind_representatives", build)


def memory_floor_mb(c: RowCosts, totals: np.ndarray) -> Fraction:
    """A lower bound, in MB, on the heaviest rank's memory (RowCosts.stage_memory) under every cut of the
    row (`totals`: blocks of each kind in the model). The heaviest rank holds at least any weighted mean of
    the ranks; a rank holds at least its static memory, its activations times its in-flight share, the
    workspace and what it holds besides (least_held). Weighting rank r by 1/inflight_r makes every
    block's activations count alike wherever it sits, and even weights spread the static memory; either
    mean has its least value when every block sits on the rank where it weighs least."""
    inv, inv_den, share, share_den = _inflight_terms(tuple(c.inflight))
    least, most = min(c.inflight), max(c.inflight)
    spread = Fraction(sum(inv), inv_den)
    blocks = [(int(n), s, a) for n, s, a in zip(totals, c.kind_static, c.kind_activation, strict=True) if n]
    harmonic = (Fraction(sum(s * x for s, x in zip(c.edge_static, inv, strict=True)), inv_den)
                + sum(c.edge_activation) + sum(n * (s / (most if s >= 0 else least) + a) for n, s, a in blocks))
    even = (sum(c.edge_static) + Fraction(sum(a * x for a, x in zip(c.edge_activation, share, strict=True)), share_den)
            + sum(n * (s + a * (least if a >= 0 else most)) for n, s, a in blocks))
    return max(harmonic / spread, even / len(c.inflight)) + least_held(c, totals) + c.workspace_mb


def least_held(c: RowCosts, totals: np.ndarray, in_bytes: bool = False) -> int:
    """What every pipeline rank holds besides its blocks' static memory and activations, under every cut,
    in MB (or in the ledger's exact bytes): the recompute working set (at least its edge's, and at least
    the least of the model's kinds, since every rank holds a block) and the dispatch buffers where the
    rank surely holds a MoE block (its edge does, or every kind is MoE). The heaviest rank's memory is at
    least a weighted mean of the ranks' other terms plus the least of these."""
    edge_peak = [e[2] for e in c.edge_bytes] if in_bytes else c.edge_peak
    kind_peak = [k[2] for k in c.kind_bytes] if in_bytes else c.kind_peak
    dispatch = c.dispatch_bytes if in_bytes else c.dispatch_mb
    kinds = [k for k, n in enumerate(totals) if n]
    every_moe = all(c.kind_moe[k] for k in kinds)
    return min(max(edge_peak[r], min(kind_peak[k] for k in kinds)) + (dispatch if c.edge_moe[r] or every_moe else 0)
               for r in range(c.row.pp))


@lru_cache(maxsize=4096)
def _inflight_terms(inflight: tuple[Fraction, ...]) -> tuple[tuple[int, ...], int, tuple[int, ...], int]:
    """Each rank's 1/inflight and inflight as whole numbers over one common denominator each:
    (1/f_r · L for every r, L, f_r · M for every r, M)."""
    inv_den = math.lcm(*(f.numerator for f in inflight))
    share_den = math.lcm(*(f.denominator for f in inflight))
    return (tuple(f.denominator * (inv_den // f.numerator) for f in inflight), inv_den,
            tuple(f.numerator * (share_den // f.denominator) for f in inflight), share_den)


def interval_counts(prefix: tuple[tuple[int, ...], ...]) -> np.ndarray:
    """counts[i, j, k]: blocks of kind k among blocks i..j−1 (zero unless i < j)."""
    table = np.array(prefix, dtype=np.int64).T
    counts = table[None, :, :] - table[:, None, :]
    return np.where(counts > 0, counts, 0)


NO_STAGE = np.iinfo(np.int64).max
"""all_stage_matrices' time and memory where i >= j: no stage holds no block."""


def all_stage_matrices(c: RowCosts, counts: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Time and memory of each stage s holding blocks i..j−1, for every i < j (NO_STAGE elsewhere): RowCosts
    formulas in bulk, the blocks' sums over each interval computed once and each stage adding its edge and
    in-flight share."""
    time = counts @ np.array(c.kind_time_us, dtype=np.int64)
    static = counts @ np.array(c.kind_static, dtype=np.int64)
    held = counts @ np.array(c.kind_activation, dtype=np.int64)
    present = counts > 0
    peak = np.zeros(held.shape, dtype=np.int64)
    moe = np.zeros(held.shape, dtype=bool)
    for k in range(counts.shape[2]):
        peak = np.where(present[:, :, k], np.maximum(peak, c.kind_peak[k]), peak)
        if c.kind_moe[k]:
            moe = moe | present[:, :, k]
    none = ~np.triu(np.ones(held.shape, dtype=bool), k=1)
    time[none] = static[none] = held[none] = peak[none] = 0
    out = []
    for s in range(c.row.pp):
        frac = c.inflight[s]
        act = -(-((c.edge_activation[s] + held) * frac.numerator) // frac.denominator)
        rank_moe = moe | c.edge_moe[s]
        memory = (c.edge_static[s] + static + act + np.maximum(peak, c.edge_peak[s])
                  + np.where(rank_moe, c.dispatch_mb, 0) + c.workspace_mb)
        stage_time = c.edge_time_us[s] + time
        stage_time[none] = memory[none] = NO_STAGE
        out.append((stage_time, memory))
    return out


