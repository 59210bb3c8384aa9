"""Per-row cost tables: what each kind of block costs in memory and time on the rank that holds it.

The CP-SAT program and the brute-force reference both read these integer tables, and the memory
numbers are exactly those of the Python ledger (constraints/physics/memory.py sums the same contributions),
so a stage's memory and time follow from how many blocks of each kind it holds.

Resolution of the objectives: step time in units of TIME_UNIT_S, peak memory in MEMORY_UNIT_MB MB,
both rounded up.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import weakref
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache
from typing import NamedTuple, Protocol, TypeVar

import numpy as np

from parasol.constraints.physics.memory import (
    block_activations,
    block_kind,
    block_param_state,
    dispatch_buffer_bytes,
    edge_activations,
    edge_param_state,
    fsdp_buffer_bytes,
    inflight_microbatches,
    workspace_bytes,
)
from parasol.constraints.physics.schedule import (
    least_heaviest_rank_of_kinds,
    lightest_blocks,
    pipeline_time_scaled,
)
from parasol.constraints.physics.step_time import EpOption
from parasol.constraints.physics.weight_format import problem_weight_format
from parasol.problems.derived import Derived
from parasol.problems.empty_stages import edge_rank, least_rank_blocks, open_stages
from parasol.problems.loader import Problem
from parasol.problems.mapping import Mapping
from parasol.problems.memo import kept, memoised, memoised_by
from parasol.problems.model.architecture import Block
from parasol.solver.search.space import CHOICE_FIELDS, Row, with_choices

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

    def cut_stage_times_s(self, mapping: Mapping, derived: Derived, counts: np.ndarray) -> np.ndarray:
        """Each pipeline rank's stage seconds of one microbatch in N cuts (counts: N × PP × kinds → N × PP), as
        cut_step_times_s prices them: its step is at least their pipeline time (schedule.pipeline_seconds), since
        the per-step terms it adds are never negative."""
        ...

    def step_floor_s(self, mapping: Mapping, derived: Derived, totals: np.ndarray,
                     most: np.ndarray | None = None, ep_options: tuple[EpOption, ...] | None = None,
                     slowest_s: float = 0.0) -> float:
        """A lower bound on the exact step seconds of every cut (totals: blocks of each kind) holding at most
        most[r] blocks on pipeline rank r (None: any number; most_blocks gives what memory allows) under
        every CP communication type and every MoE dispatcher and backend of `ep_options` (None: every one): solve
        judges a row by its floor before it settles those options (solver/search/choices.py). `slowest_s`: a
        bound on the slowest rank's stage seconds the caller knows of the cuts it asks about (a model that has
        stage_floor_lines reads it: reprice.tail_floor_units)."""
        ...

    def compute_per_microbatch_s(self, mapping: Mapping, derived: Derived, totals: np.ndarray) -> float:
        """Seconds per microbatch whose even spread over the pipeline (schedule.even_stretch) is a lower bound on
        step_floor_s that costs least (reprice.compute_floor_units): solve screens every row by it. It must
        read only TP, CP, EP, ETP, MBS and recompute, and be the same under every saving: solve prices it
        once per those for all rows sharing them."""
        ...

    def exchange_floor_s(self, mapping: Mapping, totals: np.ndarray,
                         ep_options: tuple[EpOption, ...] | None = None) -> float:
        """Exposed exchange seconds of one microbatch that all ranks together never go below under any CP type and
        any EP option of `ep_options` (None: every one) the row may choose, beside compute_per_microbatch_s:
        solve screens every row by the two added up, spread over the pipeline, so it must read only the grid,
        rank order and MBS, and be the same under every saving (0 is admissible)."""
        ...

    def exposed_floor_s(self, mapping: Mapping, derived: Derived, totals: np.ndarray,
                        ep_options: tuple[EpOption, ...] | None = None) -> float:
        """A lower bound between the screening floor (compute_per_microbatch_s plus exchange_floor_s, spread) and
        step_floor_s in value and in cost: solve judges a row by it after the screening floor and before
        step_floor_s."""
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
    memo: TableMemo | None = dataclasses.field(default=None, compare=False, repr=False)
    """What the memory floors read of these tables, computed once: shared by every row row_costs builds from
    one table (memo_of checks that it still describes the tables)."""

    def stage_memory(self, stage: int, counts: tuple[int, ...]) -> int:
        """MB of the heaviest rank of `stage` holding `counts` blocks of each kind (the ledger's terms,
        each rounded up to a whole MB)."""
        static, held = self.edge_static[stage], self.edge_activation[stage]
        peak, moe = self.edge_peak[stage], self.edge_moe[stage]
        for k_static, k_act, k_peak, k_moe, n in zip(self.kind_static, self.kind_activation, self.kind_peak,
                                                     self.kind_moe, counts, strict=True):
            if n:
                static, held, peak, moe = static + n * k_static, held + n * k_act, max(peak, k_peak), moe or k_moe
        frac = self.inflight[stage]
        act = -(-frac.numerator * held // frac.denominator)
        return static + act + peak + (self.dispatch_mb if moe else 0) + self.workspace_mb

    def ranks_memory(self, counts: np.ndarray) -> np.ndarray:
        """stage_memory of every pipeline rank at once: rank r holding counts[r] blocks of each kind (MB), or of
        many cuts at once (counts: cuts × ranks × kinds, the result cuts × ranks). The in-flight shares'
        numerators and denominators come from _shares (those of the row's schedule, as row_costs sets them;
        read afresh where the tables carry others)."""
        static = np.array(self.edge_static, dtype=np.int64) + counts @ np.array(self.kind_static, dtype=np.int64)
        held = np.array(self.edge_activation, dtype=np.int64) + counts @ np.array(self.kind_activation, dtype=np.int64)
        shares = _shares_of(self)
        if shares.inflight == self.inflight:
            act = -(-held * shares.numerators // shares.denominators)
        else:
            act = -(-held * _numerators(self.inflight) // _denominators(self.inflight))
        present = counts > 0
        peak = np.maximum(np.array(self.edge_peak, dtype=np.int64),
                          np.where(present, np.array(self.kind_peak, dtype=np.int64), 0).max(axis=-1))
        moe = np.array(self.edge_moe, dtype=bool) | (present & np.array(self.kind_moe, dtype=bool)).any(axis=-1)
        return static + act + peak + np.where(moe, self.dispatch_mb, 0) + self.workspace_mb

    def stage_bytes(self, stage: int, counts: tuple[int, ...]) -> int:
        """Bytes of the heaviest rank of `stage` holding `counts` blocks of each kind, exactly as the
        ledger sums them (constraints/physics/memory.py assemble_stage): what explain prints."""
        static, held, peak = self.edge_bytes[stage]
        moe = self.edge_moe[stage]
        for (k_static, k_act, k_peak), k_moe, n in zip(self.kind_bytes, self.kind_moe, counts, strict=True):
            if n:
                static, held, peak, moe = static + n * k_static, held + n * k_act, max(peak, k_peak), moe or k_moe
        frac = self.inflight[stage]
        return (static + -(-frac.numerator * held // frac.denominator) + peak
                + (self.dispatch_bytes if moe else 0) + self.fixed_bytes)

    def ranks_bytes(self, counts: np.ndarray) -> np.ndarray:
        """stage_bytes of every pipeline rank at once (counts: ranks × kinds, or cuts × ranks × kinds; the result
        drops the kinds axis), exactly as the ledger sums them."""
        edge, kind = np.array(self.edge_bytes, dtype=np.int64), np.array(self.kind_bytes, dtype=np.int64)
        static, held = edge[:, 0] + counts @ kind[:, 0], edge[:, 1] + counts @ kind[:, 1]
        act = -(-held * _numerators(self.inflight) // _denominators(self.inflight))
        present = counts > 0
        peak = np.maximum(edge[:, 2], np.where(present, kind[:, 2], 0).max(axis=-1))
        moe = np.array(self.edge_moe, dtype=bool) | (present & np.array(self.kind_moe, dtype=bool)).any(axis=-1)
        return static + act + peak + np.where(moe, self.dispatch_bytes, 0) + self.fixed_bytes

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


def row_costs(problem: Problem, row: Row, time_model: StageTimeModel | None,
              moved_from: RowCosts | None = None) -> RowCosts:
    """Build the cost tables of one row from the memory ledger and the step-time model (None: memory
    only, all times zero, for the cheap first pass that finds the rows with a cut that fits); the row's
    framework options (dispatcher, CP communication type) price it. `moved_from`: memory tables of the same
    degrees, microbatch and recompute under a problem that differs from this one only in settings that move
    the parameter state and add FSDP unit buffers (a memory saving, savings.SETTINGS), not the saved
    activations: those are taken from them instead of the ledger (savings.fit_candidates' variants). The memory
    tables are built on `problem` itself: the ledger reads none of the options a row chooses (space.CHOICE_OPTIONS:
    the dispatcher, its backend and the CP communication type move exchanges, not bytes held), so the rows of one
    grid share them whatever they choose (memory_key)."""
    chosen = with_choices(problem, row)
    d = row.derived(chosen)
    microbatches = d.num_microbatches
    tables = replaced(_memory_tables(problem, row, d, moved_from), row=row, derived=d,
                      inflight=_shares(row.pp, row.vpp, microbatches.numerator, microbatches.denominator).inflight)
    if time_model is None:
        return tables
    mapping = row.mapping(chosen)
    time_model = time_model.for_problem(chosen)
    representatives = kind_representatives(chosen)
    return replaced(
        tables,
        kind_time_us=tuple(_us(t) for t in time_model.block_times_s(mapping, d, [representatives[k]
                                                                                 for k in block_kinds(chosen)])),
        edge_time_us=tuple(_us(t) for t in time_model.edge_times_s(mapping, d)),
        constant_time_us=_us(time_model.step_extra_s(mapping, d)))


MEMORY_TABLES_MEMO = 65536
"""Rows' memory tables kept per problem (the table starts afresh past this)."""

memory_key = operator.attrgetter(*(f.name for f in dataclasses.fields(Row)
                                   if f.name not in ("vpp", "rank_order", *CHOICE_FIELDS)))
"""A row's fields less its VPP, rank order and the options it chooses: what its memory tables read (row_costs)."""


def _memory_tables(problem: Problem, row: Row, d: Derived, moved_from: RowCosts | None) -> RowCosts:
    """The row's memory tables with no time model (`d`: the row's derived sizes; `moved_from`: row_costs'), built
    once per problem and row less its VPP, rank order and chosen options (memory_key): the ledger's per-kind and
    per-edge terms, the dispatch buffers and the workspace read none of them (only the in-flight shares read
    VPP). The tables kept carry the row, derived sizes and in-flight shares of the first row asked, and the memo
    of their memory fields (shared_memo); row_costs sets each row's own. The row's mapping is built only when
    the tables are."""
    def build() -> RowCosts:
        mapping = _mapping_of(problem, row)
        saved = _saved(problem, row, mapping) if moved_from is None else _saved_of(moved_from)
        tables = _tables(problem, row, mapping, d, saved)
        return replaced(tables, memo=shared_memo(memoised(problem, "table_memos", MemoPool), memory_fields(tables)))

    return memoised_by(problem, "memory_tables", memory_key(row), MEMORY_TABLES_MEMO, build)


def with_states_of(c: RowCosts, problem: Problem) -> RowCosts:
    """c's memory tables (row_costs with no time model) with each kind's and edge's weights, gradients and
    optimizer state and the workspace and FSDP unit buffers as `problem` has them (a memory saving's problem,
    savings.with_saving, which moves only those terms): that saving's tables, for a fraction of row_costs' cost.
    Not memoised: the caller keeps the floors it reads."""
    row, d = c.row, c.derived
    mapping = _mapping_of(problem, row)
    kind_static, _, edge_states = _param_states(problem, row, mapping, d)
    _, workspace, fsdp = _row_buffers(problem, row, mapping, d)
    static_of_rank = _per_rank(row.pp, {end: (static,) for end, (static, _) in edge_states.items()})[0]
    return replaced(
        c,
        kind_static=tuple(map(_mb, kind_static)),
        kind_bytes=tuple((static, *held[1:]) for static, held in zip(kind_static, c.kind_bytes, strict=True)),
        edge_static=tuple(map(_mb, static_of_rank)),
        edge_bytes=tuple((static, *held[1:]) for static, held in zip(static_of_rank, c.edge_bytes, strict=True)),
        workspace_mb=_mb(workspace) + _mb(fsdp), fixed_bytes=workspace + fsdp, memo=None)


class LedgerParts(NamedTuple):
    """What the weighted means floor (memory_floor_ratio, in bytes) of a row's memory tables reads besides their
    weights, gradients, optimizer state, workspace and FSDP unit buffers, summed from the ledger's parts
    (ledger_parts): the row and what builds its mapping, its derived sizes, its blocks of each kind, its
    activations' sums as _MeanTerms has them (edge_activation, held_up, held_down, held), what every rank holds
    besides less the workspace and buffers (least_held), those on `problem` (its workspace and FSDP unit buffers),
    and its ranks' in-flight shares."""

    row: Row
    mapping: MappingOf
    derived: Derived
    counts: list[int]
    edge_activation: tuple[int, ...]
    held: tuple[int, int, int]
    besides: int
    fixed: int
    shares: _Shares


def ledger_parts(problem: Problem, row: Row, totals: np.ndarray, open_edges: bool) -> LedgerParts:
    """The row's LedgerParts on `problem` (`totals`: blocks of each kind; `open_edges`: memory_floor_ratio's), from
    the ledger's parts each kept once per what it reads (_param_states, _saved, _row_buffers), with no tables
    built."""
    mapping, d = _mapping_of(problem, row), row.derived(problem)
    _, kind_moe, edge_states = _param_states(problem, row, mapping, d)
    dispatch, workspace, fsdp = _row_buffers(problem, row, mapping, d)
    saved = _saved(problem, row, mapping)
    edges = _per_rank(row.pp, {end: (*saved.edges[end], moe) for end, (_, moe) in edge_states.items()})
    kind_activation, kind_peak = zip(*saved.kinds, strict=True)
    counts = totals.tolist()
    held = _signed_sums(kind_activation, edges[0], counts)
    unstatic = _MemoryTerms((0,) * len(counts), kind_activation, kind_peak, (0,) * row.pp, *edges[:2], dispatch, 0)
    microbatches = d.num_microbatches
    return LedgerParts(row, mapping, d, counts, edges[0], held,
                       _least_besides(kind_moe, edges[2], counts, unstatic, open_edges), workspace + fsdp,
                       _shares(row.pp, row.vpp, microbatches.numerator, microbatches.denominator))


def ledger_means_ratio(parts: LedgerParts, states: Problem | None) -> tuple[int, int]:
    """memory_floor_ratio in bytes of the memory tables of `parts`' row (row_costs with no time model) with the
    weights, gradients, optimizer state, workspace and FSDP unit buffers of `states` (the row's own problem, or a
    memory saving's: with_states_of's tables) or, `states` None, with no weights, gradients or optimizer state (the
    savings' without_static), from the ledger's parts instead of from tables built for the row: the same value
    for a fraction of the cost, where a floor is asked once per group of rows whose tables nothing else reads
    (savings.memory_floor_any_vpp: DeepSeek-V3 on 2,048 GPUs asks it for 10,196 groups under each saving)."""
    row, mapping, d = parts.row, parts.mapping, parts.derived
    if states is None:
        edge_static, static_up, static_down, static, fixed = (0,) * row.pp, 0, 0, 0, parts.fixed
    else:
        edge_static, static_up, static_down, static = _static_sums(states, row, mapping, d, parts.counts)
        _, workspace, fsdp = _row_buffers(states, row, mapping, d)
        fixed = workspace + fsdp
    held_up, held_down, held = parts.held
    return _means_ratio(_MeanTerms(edge_static, parts.edge_activation, static_up, static_down, held_up, held_down,
                                   static, held, parts.besides + fixed), parts.shares)


def _static_sums(problem: Problem, row: Row, mapping: MappingOf, d: Derived, counts: list[int]
                 ) -> tuple[tuple[int, ...], int, int, int]:
    """The ranks' edge static bytes and the static sums of _MeanTerms (static_up, static_down, static) of the row's
    parameter state on `problem` (_param_states) with `counts` blocks of each kind, once per what they read."""
    def build() -> tuple[tuple[int, ...], int, int, int]:
        kind_static, _, edge_states = _param_states(problem, row, mapping, d)
        edge_static = _per_rank(row.pp, {end: (static,) for end, (static, _) in edge_states.items()})[0]
        return edge_static, *_signed_sums(kind_static, edge_static, counts)

    return memoised_by(problem, "static sums", (row.pp, row.tp, row.etp, row.ep, *counts), CONTRIBUTION_MEMO, build)


class _Saved(NamedTuple):
    """A row's saved activations and recompute working sets, in the ledger's bytes: per block kind, and per edge
    (first, last) as _edge_activations gives them."""

    kinds: tuple[tuple[int, int], ...]
    edges: dict[Ends, tuple[int, int]]


def _saved(problem: Problem, row: Row, mapping: MappingOf) -> _Saved:
    """_Saved from the ledger (_block_activations, _edge_activations: once per problem and what they read)."""
    return _Saved(tuple(zip(*_block_activations(problem, row, mapping), strict=True)),
                  _edge_activations(problem, row, mapping))


def _saved_of(c: RowCosts) -> _Saved:
    """_Saved as c's tables hold it (each edge's on its first rank: the first, the second and the last)."""
    last = c.row.pp - 1
    return _Saved(tuple(held[1:] for held in c.kind_bytes),
                  {end: c.edge_bytes[0 if end[0] else last if end[1] else 1][1:] for end in _ends(c.row.pp)})


def _tables(problem: Problem, row: Row, mapping: MappingOf, d: Derived, saved: _Saved) -> RowCosts:
    """The memory tables of a row (its times zero, no memo): each block kind's and each edge's parameter state
    (_param_states, once per problem and the mapping fields it reads) with its saved activations, as columns."""
    pp = row.pp
    kind_static, kind_moe, edge_states = _param_states(problem, row, mapping, d)
    by_end = {}
    for end, (static, moe) in edge_states.items():
        activation, peak = saved.edges[end]
        by_end[end] = (_mb(static), _mb(activation), _mb(peak), moe, (static, activation, peak))
    edges = _per_rank(pp, by_end)
    dispatch, workspace, fsdp = _row_buffers(problem, row, mapping, d)
    return RowCosts(
        row=row,
        derived=d,
        microbatches=int(d.num_microbatches),
        kind_static=tuple(map(_mb, kind_static)),
        kind_activation=tuple(_mb(activation) for activation, _ in saved.kinds),
        kind_peak=tuple(_mb(peak) for _, peak in saved.kinds),
        kind_moe=kind_moe,
        edge_static=edges[0],
        edge_activation=edges[1],
        edge_peak=edges[2],
        edge_moe=edges[3],
        inflight=stage_inflight(pp, row.vpp, d.num_microbatches),
        dispatch_mb=_mb(dispatch),
        workspace_mb=_mb(workspace) + _mb(fsdp),
        kind_time_us=(0,) * len(kind_moe),
        edge_time_us=(0,) * pp,
        constant_time_us=0,
        kind_bytes=tuple((static, *held) for static, held in zip(kind_static, saved.kinds, strict=True)),
        edge_bytes=edges[4],
        dispatch_bytes=dispatch,
        fixed_bytes=workspace + fsdp,
    )


def _per_rank(pp: int, by_end: dict[Ends, tuple]) -> tuple[tuple, ...]:
    """Columns of per-rank values from each edge's (first, last) tuple of columns: the first rank's, PP − 2
    middle ones' and the last rank's (one rank, PP 1: its own), each column built whole, not rank by rank."""
    if pp == 1:
        return tuple((value,) for value in by_end[True, True])
    first, last = by_end[True, False], by_end[False, True]
    middle = by_end.get((False, False), first)  # PP 2 has no middle rank: its PP − 2 = 0 copies read nothing
    return tuple((at_first,) + (at_middle,) * (pp - 2) + (at_last,)
                 for at_first, at_middle, at_last in zip(first, middle, last, strict=True))


def _row_buffers(problem: Problem, row: Row, mapping: MappingOf, d: Derived) -> tuple[int, int, int]:
    """(MoE dispatch buffers, workspace, FSDP unit buffers) bytes of a row (memory.dispatch_buffer_bytes,
    workspace_bytes, fsdp_buffer_bytes), once per problem and what they read: TP, ETP, CP, the microbatch,
    the sequence and the experts per rank."""
    key = (row.tp, row.etp, row.cp, row.mbs, d.experts_per_rank)

    def build() -> tuple[int, int, int]:
        model, training, m = problem.model, problem.training, mapping()
        return (dispatch_buffer_bytes(model, m, training), workspace_bytes(training),
                fsdp_buffer_bytes(model, m, d, training, problem_weight_format(problem, problem.spec.framework.options)))

    return memoised_by(problem, "row_buffers", key, CONTRIBUTION_MEMO, build)


def _numerators(inflight: tuple[Fraction, ...]) -> np.ndarray:
    """The in-flight shares' numerators as an array (RowCosts.ranks_memory, _shares)."""
    return np.fromiter((f.numerator for f in inflight), dtype=np.int64, count=len(inflight))


def _denominators(inflight: tuple[Fraction, ...]) -> np.ndarray:
    """The in-flight shares' denominators as an array (RowCosts.ranks_memory)."""
    return np.fromiter((f.denominator for f in inflight), dtype=np.int64, count=len(inflight))


@lru_cache(maxsize=4096)
def stage_inflight(pp: int, vpp: int, microbatches: Fraction | int) -> tuple[Fraction, ...]:
    """Each pipeline rank's in-flight microbatches (memory.inflight_microbatches), one tuple per schedule."""
    return tuple(inflight_microbatches(s, pp, vpp, microbatches) for s in range(pp))


CONTRIBUTION_MEMO = 65536
"""Parameter states and saved activations kept per problem (each table starts afresh past this)."""

MappingOf = Callable[[], Mapping]
"""A row's mapping, built when first called (_mapping_of): the ledger's parts are kept per problem by the row's fields
(the GPUs and the sequence are the problem's own) and read the mapping only when built."""


def _mapping_of(problem: Problem, row: Row) -> MappingOf:
    """row.mapping(problem), built on the first call and kept."""
    built: list[Mapping] = []

    def mapping() -> Mapping:
        if not built:
            built.append(row.mapping(problem))
        return built[0]

    return mapping


Ends = tuple[bool, bool]
"""A pipeline rank's edges: (first, last), whether it runs the embedding and the head."""


def _ends(pp: int) -> list[Ends]:
    """The distinct (first, last) edges of PP ranks: the first, a middle one and the last."""
    return sorted({(s == 0, s == pp - 1) for s in (0, pp - 1, min(1, pp - 1))})


def _param_states(problem: Problem, row: Row, mapping: MappingOf, d: Derived
                  ) -> tuple[tuple[int, ...], tuple[bool, ...], dict[Ends, tuple[int, bool]]]:
    """Each block kind's and each edge's weights, gradients and optimizer state (memory.block_param_state,
    edge_param_state), once per problem and what they read: TP, ETP, the experts per rank (E/EP), the
    data-parallel shards D_a·CP = N/(PP·TP) and D_e = N/(PP·ETP·EP) and which edges PP has; on one problem
    (N fixed) the GPUs, PP, TP, ETP and EP fix them all, not CP (its rows share them: D_a·CP is the same),
    the microbatch, recompute or VPP. As the tables read them: per kind its static bytes and whether it
    holds routed experts, per edge (first, last) the two."""
    key = (row.pp, row.tp, row.etp, row.ep)

    def build() -> tuple[tuple[int, ...], tuple[bool, ...], dict[Ends, tuple[int, bool]]]:
        model, training, options, m = problem.model, problem.training, problem.spec.framework.options, mapping()
        representatives = kind_representatives(problem)
        weights = problem_weight_format(problem, options)
        kinds = [block_param_state(model, m, d, training, representatives[k], options, weights)
                 for k in block_kinds(problem)]
        edges = {end: edge_param_state(model, m, d, training, *end, options, weights) for end in _ends(m.pp)}
        return (tuple(c.static for c in kinds), tuple(c.moe for c in kinds),
                {end: (c.static, c.moe) for end, c in edges.items()})

    return memoised_by(problem, "param_states", key, CONTRIBUTION_MEMO, build)


def _block_activations(problem: Problem, row: Row, mapping: MappingOf) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Each block kind's saved activations and recompute working set (memory.block_activations), once per
    problem and what they read: TP, ETP, CP, the microbatch, the sequence and recompute; as two columns of
    bytes."""
    key = (row.tp, row.etp, row.cp, row.mbs, row.recompute)

    def build() -> tuple[tuple[int, ...], tuple[int, ...]]:
        model, training, options, m = problem.model, problem.training, problem.spec.framework.options, mapping()
        representatives = kind_representatives(problem)
        kinds = [block_activations(model, m, training, representatives[k], options) for k in block_kinds(problem)]
        return tuple(c.activation for c in kinds), tuple(c.recompute_peak for c in kinds)

    return memoised_by(problem, "block_activations", key, CONTRIBUTION_MEMO, build)


def _edge_activations(problem: Problem, row: Row, mapping: MappingOf) -> dict[Ends, tuple[int, int]]:
    """Each edge's saved activations and recompute working set bytes (memory.edge_activations), once per
    problem and what they read: the block activations' fields and which edges PP has (_ends: PP 1, 2 or more;
    --cpu-offloading also asks whether PP is 1)."""
    key = (min(row.pp, 3), row.tp, row.etp, row.cp, row.mbs, row.recompute)

    def build() -> dict[Ends, tuple[int, int]]:
        model, training, options, m = problem.model, problem.training, problem.spec.framework.options, mapping()
        edges = {end: edge_activations(model, m, training, *end, options) for end in _ends(m.pp)}
        return {end: (c.activation, c.recompute_peak) for end, c in edges.items()}

    return memoised_by(problem, "edge_activations", key, CONTRIBUTION_MEMO, build)


def kind_representatives(problem: Problem) -> dict[tuple, Block]:
    """The first block of each kind (block_kinds' order), memoised per model."""
    def build() -> dict[tuple, Block]:
        found: dict[tuple, Block] = {}
        for b in problem.model.blocks:
            found.setdefault(block_kind(b), b)
        return found

    return memoised(problem.model, "kind_representatives", build)


T = TypeVar("T")


def replaced(c: RowCosts, **changes: object) -> RowCosts:
    """c with `changes` to its fields, as dataclasses.replace makes it, for a fraction of its cost: a RowCosts'
    fields are its instance dictionary and it checks nothing on creation, so the copy's dictionary is c's
    with the changes (screening builds several per row and variant)."""
    if not changes.keys() <= c.__dict__.keys():
        raise TypeError(f"RowCosts has no field {sorted(changes.keys() - c.__dict__.keys())[0]!r}")
    out = object.__new__(RowCosts)
    object.__setattr__(out, "__dict__", c.__dict__ | changes)
    return out


MEMORY_FIELD_NAMES = ("kind_static", "kind_activation", "kind_peak", "kind_moe", "edge_static", "edge_activation",
                      "edge_peak", "edge_moe", "dispatch_mb", "workspace_mb", "kind_bytes", "edge_bytes",
                      "dispatch_bytes", "fixed_bytes")
"""The RowCosts fields a row's memory reads (RowCosts.stage_memory, stage_bytes; their types there): what a
TableMemo describes."""

MemoryFields = namedtuple("MemoryFields", MEMORY_FIELD_NAMES)
"""A row's MEMORY_FIELD_NAMES by name."""

memory_fields = operator.attrgetter(*MEMORY_FIELD_NAMES)
"""A RowCosts' MemoryFields, as a plain tuple."""


class _MemoryTerms(NamedTuple):
    """A row's memory tables in one unit, MB (RowCosts.stage_memory) or the ledger's bytes (stage_bytes), by
    column: per kind and per edge the static memory, activation and recompute peak, the dispatch buffers and
    what every rank holds besides."""

    kind_static: tuple[int, ...]
    kind_activation: tuple[int, ...]
    kind_peak: tuple[int, ...]
    edge_static: tuple[int, ...]
    edge_activation: tuple[int, ...]
    edge_peak: tuple[int, ...]
    dispatch: int
    fixed: int


class TableMemo:
    """What the memory floors read of one row's tables (`fields`), each computed on first use and kept with
    them: whether their middle ranks share one edge, their twin with no static memory, and in `values` the sums
    the floors read per `totals` (_mean_terms, _line_terms) and the floors memoised_floor keeps. `shared`: the
    pool of memos it belongs to (shared_memo), where the twin's is kept too, held weakly; None: a memo of its
    own."""

    def __init__(self, fields: tuple, shared: MemoPool | None = None) -> None:
        self.fields = MemoryFields._make(fields)
        self.values: dict = {}
        self._pool = None if shared is None else weakref.ref(shared)

    def terms(self, in_bytes: bool) -> _MemoryTerms:
        """The tables in bytes or in MB (built on each call: only the sums kept in `values` read them, once
        per table and `totals`)."""
        f = self.fields
        if in_bytes:
            return _MemoryTerms(*zip(*f.kind_bytes, strict=True), *zip(*f.edge_bytes, strict=True),
                                f.dispatch_bytes, f.fixed_bytes)
        return _MemoryTerms(f.kind_static, f.kind_activation, f.kind_peak, f.edge_static, f.edge_activation,
                            f.edge_peak, f.dispatch_mb, f.workspace_mb)

    @cached_property
    def middle_alike(self) -> bool:
        """Whether the middle pipeline ranks (all but the first and the last) share one edge in the MB tables, as
        row_costs builds them (savings.default_cut_fits then prices only the ranks that may be the heaviest)."""
        f = self.fields
        return len(set(zip(f.edge_static[1:-1], f.edge_activation[1:-1], f.edge_peak[1:-1], f.edge_moe[1:-1],
                           strict=True))) <= 1

    @cached_property
    def bare(self) -> dict[str, object]:
        """The field changes that set weights, gradients and optimizer state to zero, in MB and in bytes, with
        the memo of the tables they make (savings.without_static): once per table, not per row."""
        f = self.fields
        zeroed = {terms: (0, *terms[1:]) for terms in {*f.kind_bytes, *f.edge_bytes}}  # one per distinct edge
        changes = {"kind_static": (0,) * len(f.kind_static), "edge_static": (0,) * len(f.edge_static),
                   "kind_bytes": tuple(map(zeroed.__getitem__, f.kind_bytes)),
                   "edge_bytes": tuple(map(zeroed.__getitem__, f.edge_bytes))}
        bare = f._replace(**changes)
        pool = None if self._pool is None else self._pool()
        return changes | {"memo": TableMemo(bare) if pool is None else shared_memo(pool, bare)}


SHARED_MEMOS = 65536
"""Table memos a problem keeps by their memory fields (the table starts afresh past this)."""


class MemoPool(dict):
    """A problem's table memos by their memory fields (shared_memo). Its memos refer to it weakly, so they are
    freed with the problem's memo tables, not left to the cycle collector."""


def shared_memo(shared: MemoPool, fields: tuple) -> TableMemo:
    """The one memo of tables whose memory fields are `fields` among `shared` (a problem's): rows whose tables
    differ in their key but not in what their memory reads (DeepSeek-V3's 10,773 keys of plain tables hold
    3,938 distinct tables) share their floors, which read only those fields and the keys memoised_floor adds."""
    return kept(shared, fields, SHARED_MEMOS, lambda: TableMemo(fields, shared))


def memo_of(c: RowCosts) -> TableMemo:
    """The memo of c's tables: the one they carry while it describes their memory fields (row_costs and
    without_static share one among the rows of a table), else a fresh one (tables built field by field)."""
    fields, memo = memory_fields(c), c.memo
    return memo if memo is not None and memo.fields == fields else TableMemo(fields)


_ABSENT = object()


def memoised_floor(c: RowCosts, key: tuple, build: Callable[[], T], keep: Callable[[T], bool] | None = None) -> T:
    """build(), once per row table (memo_of), in-flight shares (PP, VPP and microbatches: what stage_inflight
    reads) and `key` (whatever else it reads): the rows of one table that differ in rank order, or in
    nothing else the floors read, share them. `keep`: whether an answer is kept (None: every one)."""
    microbatches = c.derived.num_microbatches
    values = memo_of(c).values
    full = (*key, c.row.pp, c.row.vpp, microbatches.numerator, microbatches.denominator)
    found = values.get(full, _ABSENT)
    if found is _ABSENT:
        found = build()
        if keep is None or keep(found):
            values[full] = found
    return found


def memory_floor_mb(c: RowCosts, totals: np.ndarray, in_bytes: bool = False) -> Fraction:
    """A lower bound, in MB (or in the ledger's exact bytes), on the heaviest rank's memory
    (RowCosts.stage_memory, stage_bytes) under every cut of the row (`totals`: blocks of each kind in the
    model): _weighted_means_floor."""
    return Fraction(*_weighted_means_floor(c, totals.tolist(), in_bytes))


def memory_floor_ratio(c: RowCosts, totals: np.ndarray, in_bytes: bool = False,
                       open_edges: bool | None = None) -> tuple[int, int]:
    """memory_floor_mb as (numerator, denominator), the denominator positive, the two not reduced: a caller
    that only compares or rounds it skips building the Fraction. `open_edges`: whether the first and last rank
    may hold no block (None: as the row's VPP allows, empty_stages.open_stages; True for a floor over every VPP)."""
    return _weighted_means_floor(c, totals.tolist(), in_bytes, open_edges)


def _weighted_means_floor(c: RowCosts, counts: list[int], in_bytes: bool,
                          open_edges: bool | None = None) -> tuple[int, int]:
    """memory_floor_mb, as a numerator and a positive denominator (_means_ratio of the table's _mean_terms, the
    sums that read no in-flight share kept once per table)."""
    open_edges = open_stages(c.row.vpp) if open_edges is None else open_edges
    return _means_ratio(_mean_terms(memo_of(c), counts, in_bytes, open_edges), _shares_of(c))


def _means_ratio(terms: _MeanTerms, shares: _Shares) -> tuple[int, int]:
    """memory_floor_mb from its sums and the ranks' in-flight shares: the heaviest rank holds at least any
    weighted mean of the ranks; a rank holds at least its static memory, its activations times its in-flight
    share, the workspace and what it holds besides (least_held). Weighting rank r by 1/inflight_r makes
    every block's activations count alike wherever it sits, and even weights spread the static memory;
    either mean has its least value when every block sits on the rank where it weighs least. Whole-number
    arithmetic over common denominators: the exact fractions, without a Fraction per term."""
    inv, inv_den, share, share_den = shares.inv, shares.inv_den, shares.share, shares.share_den
    least_num, least_den, most_num, most_den = shares.least_most
    # harmonic / spread, each kind's static over the rank where it weighs least (the most or least in flight)
    h_den = shares.inv_sum * most_num * least_num
    h_num = ((sum(map(operator.mul, terms.edge_static, inv)) + terms.held * inv_den) * most_num * least_num
             + terms.static_up * most_den * inv_den * least_num
             + terms.static_down * least_den * inv_den * most_num)
    # even / ranks, each kind's activations at the least (or most) in-flight share
    e_den = share_den * least_den * most_den * len(inv)
    e_num = ((terms.static * share_den + sum(map(operator.mul, terms.edge_activation, share)))
             * least_den * most_den
             + (terms.held_up * least_num * most_den + terms.held_down * most_num * least_den) * share_den)
    num, den = (h_num, h_den) if h_num * e_den >= e_num * h_den else (e_num, e_den)
    return num + terms.besides * den, den


class _MeanTerms(NamedTuple):
    """What _weighted_means_floor reads of a table and the blocks of each kind, whatever the schedule: the
    edges' static memory and activations, the kinds' summed static memory and activations, those that
    grow and those that shrink a rank (static_up, static_down, held_up, held_down), every rank's static
    memory and activations summed (static, held), and what every rank holds besides (least_held plus the
    workspace)."""

    edge_static: tuple[int, ...]
    edge_activation: tuple[int, ...]
    static_up: int
    static_down: int
    held_up: int
    held_down: int
    static: int
    held: int
    besides: int


def _mean_terms(memo: TableMemo, counts: list[int], in_bytes: bool, open_edges: bool) -> _MeanTerms:
    """_MeanTerms of a table, once per table, unit, `counts` and whether the edge ranks may hold no block."""
    key = ("mean terms", in_bytes, open_edges, *counts)
    found = memo.values.get(key)
    if found is None:
        found = memo.values[key] = _sum_mean_terms(memo, counts, in_bytes, open_edges)
    return found


def _sum_mean_terms(memo: TableMemo, counts: list[int], in_bytes: bool, open_edges: bool) -> _MeanTerms:
    """_mean_terms, computed."""
    fields = memo.fields
    return _mean_terms_of(memo.terms(in_bytes), fields.kind_moe, fields.edge_moe, counts, open_edges)


def _mean_terms_of(terms: _MemoryTerms, kind_moe: tuple[bool, ...], edge_moe: tuple[bool, ...], counts: list[int],
                   open_edges: bool) -> _MeanTerms:
    """_MeanTerms of tables in one unit (`terms`, with which kinds and edges hold routed experts) and the blocks
    of each kind (`counts`)."""
    static_up, static_down, static = _signed_sums(terms.kind_static, terms.edge_static, counts)
    held_up, held_down, held = _signed_sums(terms.kind_activation, terms.edge_activation, counts)
    return _MeanTerms(terms.edge_static, terms.edge_activation, static_up, static_down, held_up, held_down, static,
                      held, _least_besides(kind_moe, edge_moe, counts, terms, open_edges) + terms.fixed)


def _signed_sums(per_kind: tuple[int, ...], per_edge: tuple[int, ...], counts: list[int]) -> tuple[int, int, int]:
    """Of one term (static memory or activations): the blocks' (`counts` of each kind) that grow a rank, those
    that shrink it, and every rank's, its edge's included."""
    up = down = 0
    for n, value in zip(counts, per_kind, strict=True):
        if value >= 0:
            up += n * value
        else:
            down += n * value
    return up, down, sum(per_edge) + up + down


def whole_block_memory_floor(c: RowCosts, totals: np.ndarray, unit: int, in_bytes: bool = True) -> int:
    """A lower bound, in whole `unit`s of bytes (or of MB, not in_bytes) rounded up, on the heaviest rank's
    bytes (stage_bytes; stage_memory's MB) under every cut the cut searches consider: the least largest
    rank over the whole-block lines (_whole_block_lines, schedule.least_heaviest_rank_of_kinds: over every kind
    and over the heaviest kinds alone). It sees what the weighted means (memory_floor_mb) miss when blocks are
    few per rank (a rank of 64 holding 2 of 94 blocks) or of unlike kinds (3 dense blocks among 61). 0 where a
    kind's memory is negative."""
    lines = _whole_block_lines(c, totals, in_bytes)
    if lines is None:
        return 0
    heaviest = least_heaviest_rank_of_kinds(*lines, least_rank_blocks(c.row.vpp, c.row.pp))
    return -(-int(heaviest * (1 - 1e-12)) // unit)


def most_blocks(c: RowCosts, totals: np.ndarray, usable: int) -> np.ndarray | None:
    """Per pipeline rank, the most whole blocks it can hold within `usable` MB (stage_memory, as every cut
    search keeps every rank): past it even its lightest blocks (_whole_block_lines) overflow. None where a
    kind's memory is negative."""
    lines = _whole_block_lines(c, totals, False)
    if lines is None:
        return None
    base, weights, kinds = lines
    lightest = lightest_blocks(weights, kinds, int(kinds.sum()))
    return (base[:, None] + lightest <= usable * (1 + 1e-12)).sum(axis=1) - 1


def rounding_slack_mb(c: RowCosts, totals: np.ndarray, usable: int) -> int | None:
    """MB by which a rank's memory in the tables (stage_memory: each term rounded up to a whole MB) exceeds its exact
    bytes (stage_bytes) at most, under every cut keeping each rank within `usable` MB: per rank, its edge's static
    rounding and its in-flight share of its edge's activation rounding, each of the most blocks it can hold
    (most_blocks) at the largest static rounding plus in-flight share of activation rounding of any kind, and a MB
    each for the in-flight activations' own rounding, the recompute peak, the dispatch buffers, the workspace and
    the FSDP unit buffers. None where most_blocks is, or the tables hold no exact bytes."""
    most = most_blocks(c, totals, usable)
    if most is None or not c.kind_bytes:
        return None
    shares = _shares_of(c).floats
    kinds = np.array(c.kind_bytes, dtype=np.int64).reshape(-1, 3)
    edges = np.array(c.edge_bytes, dtype=np.int64).reshape(-1, 3)
    static = np.array(c.kind_static, dtype=np.int64) * MB - kinds[:, 0]
    held = np.array(c.kind_activation, dtype=np.int64) * MB - kinds[:, 1]
    edge = (np.array(c.edge_static, dtype=np.int64) * MB - edges[:, 0]
            + shares * (np.array(c.edge_activation, dtype=np.int64) * MB - edges[:, 1]))
    per_block = (static[None, :] + shares[:, None] * held[None, :]).max(axis=1, initial=0)
    return math.ceil(float((edge + np.maximum(most, 0) * per_block).max()) / MB) + 5


def _whole_block_lines(c: RowCosts, totals: np.ndarray, in_bytes: bool) -> tuple[np.ndarray, np.ndarray,
                                                                                  np.ndarray] | None:
    """(A_r, w_rk, n_k): a rank r holding blocks weighs at least A_r plus w_rk for each block of kind k it
    holds (n_k of each kind in the model), in bytes or MB: a block adds its static memory and its
    activations times r's in-flight share, A_r is its edge's and what it holds besides (_held_besides), and
    rounding activations up cannot lift a whole number past a whole bound. None where a kind's memory is
    negative. The terms that read no in-flight share are computed once per table (_line_terms)."""
    terms = _line_terms(memo_of(c), totals.tolist(), in_bytes, open_stages(c.row.vpp))
    if terms is None:
        return None
    inflight, edges, kinds = _shares_of(c).floats, terms.edges, terms.kinds
    return (edges[0] + inflight * edges[1] + edges[2] + terms.fixed, kinds[:1] + inflight[:, None] * kinds[1:],
            terms.blocks)


class _LineTerms(NamedTuple):
    """What _whole_block_lines reads of a table and the blocks of each kind, whatever the schedule, in few
    arrays (a table keeps them): per rank (`edges`, floats) its edge's static memory and activations and
    what it holds besides (_held_besides, whole numbers, exact as floats), what every rank holds
    (`fixed`), and per kind present (`kinds`, floats) its static memory and activations, and its blocks."""

    edges: np.ndarray
    fixed: int
    kinds: np.ndarray
    blocks: np.ndarray


def _line_terms(memo: TableMemo, counts: list[int], in_bytes: bool, open_edges: bool) -> _LineTerms | None:
    """_LineTerms of a table, once per table, unit, `counts` and whether the edge ranks may hold no block
    (read-only); None where a kind's memory is negative."""
    key = ("line terms", in_bytes, open_edges, *counts)
    found = memo.values.get(key, _ABSENT)
    if found is _ABSENT:
        found = memo.values[key] = _read_line_terms(memo, counts, in_bytes, open_edges)
    return found


def _read_line_terms(memo: TableMemo, counts: list[int], in_bytes: bool, open_edges: bool) -> _LineTerms | None:
    """_line_terms, computed."""
    present = [k for k, n in enumerate(counts) if n]
    terms = memo.terms(in_bytes)
    static = np.array([terms.kind_static[k] for k in present], dtype=float)
    held = np.array([terms.kind_activation[k] for k in present], dtype=float)
    if (static < 0).any() or (held < 0).any():
        return None
    edges = np.array([terms.edge_static, terms.edge_activation,
                      _held_besides(memo.fields.kind_moe, memo.fields.edge_moe, counts, terms, open_edges)],
                     dtype=float)
    found = _LineTerms(edges, terms.fixed, np.array([static, held]), np.array([counts[k] for k in present],
                                                                               dtype=np.int64))
    for array in (found.edges, found.kinds, found.blocks):
        array.flags.writeable = False
    return found


def least_held(c: RowCosts, totals: np.ndarray, in_bytes: bool = False) -> int:
    """What every pipeline rank holds besides its blocks' static memory and activations, under every cut,
    in MB (or in the ledger's exact bytes): the recompute working set (at least its edge's, and at least
    the least of the model's kinds where the rank surely holds a block) and the dispatch buffers where the
    rank surely holds a MoE block (its edge does, or every kind is MoE and it holds a block). The heaviest
    rank's memory is at least a weighted mean of the ranks' other terms plus the least of these."""
    memo = memo_of(c)
    return _least_besides(memo.fields.kind_moe, memo.fields.edge_moe, totals.tolist(), memo.terms(in_bytes),
                          open_stages(c.row.vpp))


def _least_besides(kind_moe: tuple[bool, ...], edge_moe: tuple[bool, ...], counts: list[int], terms: _MemoryTerms,
                   open_edges: bool) -> int:
    """least_held: the least of _held_besides' terms, each distinct middle rank's once (the middle ranks mostly share
    their edge, and a row of PP 64 would otherwise price 64 alike)."""
    least_peak, every_moe = _besides_kinds(kind_moe, counts, terms)
    pp = len(terms.edge_peak)
    ends = [(terms.edge_peak[r], edge_moe[r], not (open_edges and edge_rank(r, pp))) for r in {0, pp - 1}]
    middle = [(peak, moe, True) for peak, moe in set(zip(terms.edge_peak[1:pp - 1], edge_moe[1:pp - 1], strict=True))]
    return min(_rank_besides(peak, moe, holds_block, least_peak, every_moe, terms.dispatch)
               for peak, moe, holds_block in ends + middle)


def _held_besides(kind_moe: tuple[bool, ...], edge_moe: tuple[bool, ...], counts: list[int], terms: _MemoryTerms,
                  open_edges: bool) -> list[int]:
    """least_held's terms rank by rank (_rank_besides). With `open_edges` (an interleaved row,
    empty_stages.open_stages) the first and last rank may hold no block at all."""
    least_peak, every_moe = _besides_kinds(kind_moe, counts, terms)
    pp = len(terms.edge_peak)
    return [_rank_besides(peak, moe, not (open_edges and edge_rank(r, pp)), least_peak, every_moe, terms.dispatch)
            for r, (peak, moe) in enumerate(zip(terms.edge_peak, edge_moe, strict=True))]


def _rank_besides(peak: int, moe: bool, holds_block: bool, least_peak: int, every_moe: bool, dispatch: int) -> int:
    """What one rank holds besides its blocks' static memory and activations: at least its edge's recompute working
    set (`peak`), and where it surely holds a block (`holds_block`) the least of the model's kinds' (`least_peak`)
    and the dispatch buffers if every kind is MoE; the dispatch buffers where its edge is MoE (`moe`). A rank that
    may hold no block has its edge's alone."""
    working = max(peak, least_peak) if holds_block else peak
    return working + (dispatch if moe or (every_moe and holds_block) else 0)


def _besides_kinds(kind_moe: tuple[bool, ...], counts: list[int], terms: _MemoryTerms) -> tuple[int, bool]:
    """What the kinds present (`counts`: blocks of each) add to every rank besides: the least recompute
    working set among them, and whether every one of them is MoE (then every rank holds the dispatch buffers)."""
    kinds = [k for k, n in enumerate(counts) if n]
    return min(terms.kind_peak[k] for k in kinds), all(kind_moe[k] for k in kinds)


class _Shares(NamedTuple):
    """The ranks' in-flight shares f_r (stage_inflight) as the floors read them: as floats (read-only), as
    whole numbers over one common denominator each (1/f_r · L for every r, their sum, L, f_r · M for every
    r, M), the least and the most f_r (numerator, denominator, numerator, denominator), and the shares
    themselves with their numerators and denominators as arrays (read-only; RowCosts.ranks_memory)."""

    floats: np.ndarray
    inv: tuple[int, ...]
    inv_sum: int
    inv_den: int
    share: tuple[int, ...]
    share_den: int
    least_most: tuple[int, int, int, int]
    inflight: tuple[Fraction, ...]
    numerators: np.ndarray
    denominators: np.ndarray


def _shares_of(c: RowCosts) -> _Shares:
    """The in-flight shares of c's row (its PP, VPP and microbatches)."""
    microbatches = c.derived.num_microbatches
    return _shares(c.row.pp, c.row.vpp, microbatches.numerator, microbatches.denominator)


@lru_cache(maxsize=4096)
def _shares(pp: int, vpp: int, numerator: int, denominator: int) -> _Shares:
    """_Shares of PP ranks running VPP chunks of numerator/denominator microbatches (keyed by whole numbers:
    hashing a Fraction costs more than the lookup)."""
    inflight = stage_inflight(pp, vpp, Fraction(numerator, denominator))
    inv_den = math.lcm(*(f.numerator for f in inflight))
    share_den = math.lcm(*(f.denominator for f in inflight))
    inv = tuple(f.denominator * (inv_den // f.numerator) for f in inflight)
    least, most = min(inflight), max(inflight)
    arrays = (np.array([float(f) for f in inflight]), _numerators(inflight), _denominators(inflight))
    for array in arrays:
        array.flags.writeable = False
    return _Shares(arrays[0], inv, sum(inv), inv_den,
                   tuple(f.numerator * (share_den // f.denominator) for f in inflight), share_den,
                   (least.numerator, least.denominator, most.numerator, most.denominator), inflight, *arrays[1:])


def interval_counts(prefix: tuple[tuple[int, ...], ...]) -> np.ndarray:
    """counts[i, j, k]: blocks of kind k among blocks i..j−1 (zero unless i < j)."""
    table = np.array(prefix, dtype=np.int64).T
    counts = table[None, :, :] - table[:, None, :]
    return np.where(counts > 0, counts, 0)


NO_STAGE = np.iinfo(np.int64).max
"""A stage's time and memory over blocks i..j−1 where i >= j: no stage holds no block."""


class IntervalSums(NamedTuple):
    """What a stage holding blocks i..j−1 adds to its edge, for every i and j (interval_sums)."""

    time: np.ndarray
    static: np.ndarray
    held: np.ndarray
    """Activations per microbatch, before the stage's in-flight share."""
    peak: np.ndarray
    moe: np.ndarray
    none: np.ndarray
    """0 where i < j, NO_STAGE elsewhere (no stage holds no block)."""


def interval_sums(c: RowCosts, counts: np.ndarray) -> IntervalSums:
    """The blocks' time, static memory, activations, recompute peak and routed experts over every interval
    (counts: cuts.interval_counts), the same for every stage of the row."""
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
    none = np.where(np.triu(np.ones(held.shape, dtype=bool), k=1), 0, NO_STAGE)
    return IntervalSums(time, static, held, peak, moe, none)


def edge_terms(c: RowCosts, s: int, sums: IntervalSums,
               by_edge: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """Stage s's time, its memory less the activations, and its activations before the in-flight share over
    every interval (`sums`), once per distinct edge (`by_edge`, keyed by what the terms read of it)."""
    edge = (c.edge_static[s], c.edge_activation[s], c.edge_peak[s], c.edge_moe[s], c.edge_time_us[s])
    if edge not in by_edge:
        fixed = (c.edge_static[s] + sums.static + np.maximum(sums.peak, c.edge_peak[s])
                 + np.where(sums.moe | c.edge_moe[s], c.dispatch_mb, 0) + c.workspace_mb)
        by_edge[edge] = (np.maximum(c.edge_time_us[s] + sums.time, sums.none), fixed, c.edge_activation[s] + sums.held)
    return by_edge[edge]


def in_flight_memory(fixed: np.ndarray, held: np.ndarray, share: Fraction, none: np.ndarray) -> np.ndarray:
    """A stage's memory from edge_terms' (or a window of them): the activations times the stage's in-flight
    share, rounded up, added to the rest (NO_STAGE where `none` is)."""
    act = held * share.numerator if share.denominator == 1 else -(-(held * share.numerator) // share.denominator)
    return np.maximum(fixed + act, none)


