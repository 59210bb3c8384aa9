"""Memory savings `solve` may switch on for a row that fits no other way: fully sharded data parallelism
and optimizer CPU offload, where the problem leaves them open.

A row whose every stage cut overflows HBM under the problem's own settings is tried again with each
saving the problem leaves open, lightest first, and kept with the first one under which some cut fits
(Row.saving names it). Rows that fit as they are keep the problem's settings, so a saving never competes
with a mapping that needs none, and the row count stays that of the degree grid.

- `fsdp`: Megatron-FSDP, `--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params`
  (Megatron-LM arguments.py:3190): weights and gradients sharded like the optimizer state, one unit
  gathered ahead (constraints/physics/memory.py); open when the problem does not set `training.fsdp`.
- `optimizer-offload`: `--optimizer-cpu-offload` (arguments.py:2918-2922) with its whole state on the host
  (--optimizer-offload-fraction 1.0, Megatron's default) and `--use-precision-aware-optimizer`, which it
  needs (arguments.py:1884-1887; Adam only, optimizer_config.py:434-436); open when the problem's
  options set neither.

Both need Adam (Megatron-FSDP refuses the emerging optimizers, arguments.py:1739-1740) and trained
weights. They are not combined: Megatron documents no FSDP run with a host optimizer.

Activation offload (--offload-modules) stays the problem's: which modules to offload is a choice of its
own that this search does not make. DualPipe is not a saving solve chooses: Megatron has no such schedule
(`explain --set pipeline_schedule=dualpipe` prices it).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.derived import default_layout
from parasol.problems.loader import Problem
from parasol.problems.mapping_input import apply_settings
from parasol.problems.memo import memoised, memoised_by
from parasol.problems.schema import Optimizer
from parasol.solver.search.costs import (
    RowCosts,
    StageTimeModel,
    ledger_means_ratio,
    ledger_parts,
    memo_of,
    memoised_floor,
    memory_floor_ratio,
    memory_key,
    replaced,
    row_costs,
    stage_inflight,
    whole_block_memory_floor,
)
from parasol.solver.search.cuts import cut_fit, rank_counts
from parasol.solver.search.reprice import memory_units
from parasol.solver.search.space import Row, with_choices

NONE = "none"
SETTINGS = {
    "fsdp": {"fsdp": "megatron-fsdp"},
    "optimizer-offload": {"optimizer_cpu_offload": "true", "use_precision_aware_optimizer": "true"},
}
"""Each saving as the `--set` settings it applies."""


def open_savings(problem: Problem) -> tuple[str, ...]:
    """The savings the problem leaves to solve, in the order tried: FSDP (its gathers overlap the compute)
    before the host optimizer (its step runs on the CPU)."""
    training, options = problem.training, problem.spec.framework.options
    if training.optimizer is not Optimizer.adam or training.frozen_base_weights:
        return ()
    fsdp = "fsdp" not in training.model_fields_set
    offload = not {"optimizer_cpu_offload", "use_precision_aware_optimizer"} & options.model_fields_set
    return tuple(name for name, is_open in (("fsdp", fsdp), ("optimizer-offload", offload)) if is_open)


def with_saving(problem: Problem, saving: str) -> Problem:
    """The problem with `saving` switched on (the problem itself for none), built once per problem."""
    if saving == NONE:
        return problem
    return memoised(problem, f"saving:{saving}", lambda: apply_settings(problem, SETTINGS[saving]))


def row_with(row: Row, **changes: object) -> Row:
    """The row with `changes`, as dataclasses.replace makes it, for a fraction of its cost: a Row's fields are
    its instance dictionary and it checks nothing on creation (fit_candidates makes one per row and saving,
    _any_vpp_means_units one per group)."""
    variant = object.__new__(Row)
    variant.__dict__.update(row.__dict__, **changes)
    return variant


def saving_variant(row: Row, saving: str) -> Row:
    """The row with `saving` (row_with)."""
    return row_with(row, saving=saving)


def row_problem(problem: Problem, row: Row) -> Problem:
    """The problem a row is priced and judged under: its saving applied, and the dispatcher and CP
    communication type it chose (space.with_choices)."""
    return with_choices(with_saving(problem, row.saving), row)


def without_static(costs: RowCosts) -> RowCosts:
    """The row's tables with weights, gradients and optimizer state at zero, in MB and in bytes: the savings
    only shrink those (FSDP's unit buffers sit in the workspace), so a row that overflows even so fits
    under none of them, and its memory floors bound every saving's. The zeroed tables and their memo are
    built once per table (costs.TableMemo.bare), so the rows of a table share their floors here too."""
    return replaced(costs, **memo_of(costs).bare)


def memory_floor_any_vpp(problem: Problem, row: Row, saving: str, counts: np.ndarray) -> int:
    """Peak-memory units no cut of the row under `saving` goes below at any VPP and rank order: the weighted means
    floor (reprice.memory_means_units) of its tables at VPP 1 (the saving's parameter state and buffers on the
    plain tables, costs.with_states_of), summed from the ledger's parts (costs.ledger_means_ratio). A rank's
    in-flight share is least at VPP 1 (memory.inflight_microbatches: PP − s against PP + (PP − 2s − 1)/v for
    v >= 2, both capped at the microbatches), a rank's memory grows with it, and the means floor bounds every
    spread of blocks over the ranks, not only the cuts of one VPP, the first and last rank holding no block
    included (an interleaved row's may not)."""
    return _any_vpp_means_units(problem, row, with_saving(problem, saving), counts)


def bare_memory_floor_any_vpp(problem: Problem, row: Row, counts: np.ndarray) -> int:
    """Peak-memory units no cut of the row under any saving goes below at any VPP and rank order: the weighted means
    floor of its VPP 1 tables with weights, gradients and optimizer state at zero (without_static; the savings
    only shrink those and add FSDP buffers), so at most memory_floor_any_vpp under every saving."""
    return _any_vpp_means_units(problem, row, None, counts)


def _any_vpp_means_units(problem: Problem, row: Row, states: Problem | None, counts: np.ndarray) -> int:
    """memory_means_units, the edge ranks free to hold no block, of the row's VPP 1 tables with the parameter
    state and buffers of `states` (costs.ledger_means_ratio), from the group's ledger parts, kept per group
    (costs.memory_key) and blocks of each kind: its floors under each saving and its bare floor read the same."""
    totals = counts[0, counts.shape[0] - 1]
    parts = memoised_by(problem, "any-vpp parts", (memory_key(row), *totals.tolist()), ANY_VPP_PARTS_MEMO,
                        lambda: ledger_parts(problem, row_with(row, vpp=1, saving=NONE), totals, True))
    num, den = ledger_means_ratio(parts, states)
    return memory_units(-(-num // den))


ANY_VPP_PARTS_MEMO = 65536
"""Groups' ledger parts kept per problem (_any_vpp_means_units; the table starts afresh past this)."""


def default_cut_fits(costs: RowCosts, counts: np.ndarray, usable: int) -> bool:
    """Whether the even default cut (derived.default_layout, one of the cuts every search considers) keeps
    every pipeline rank within `usable` MB: on tables whose middle ranks share one edge (as row_costs builds
    them) only the ranks that may be the heaviest are priced (_default_cut_ranks), else every rank."""
    pp, vpp, microbatches = costs.row.pp, costs.row.vpp, costs.derived.num_microbatches
    if memo_of(costs).middle_alike and costs.inflight == stage_inflight(pp, vpp, microbatches):
        held, ranks = _default_cut_ranks(counts, pp, vpp, microbatches)
        return all(costs.stage_memory(r, held[r]) <= usable for r in ranks)
    return bool((costs.ranks_memory(default_rank_counts(counts, pp, vpp)) <= usable).all())


DEFAULT_CUTS_MEMO = 1024
"""Default cuts' rank counts kept per `counts` table (the table starts afresh past this)."""


def _default_cut_ranks(counts: np.ndarray, pp: int, vpp: int,
                       microbatches: Fraction) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """The default cut's blocks of each kind on each rank (default_rank_counts, as tuples) and the ranks that may
    be its heaviest on tables whose middle ranks share one edge: the first, the last, and among the middle
    ranks holding the same blocks the ones with the least and the most in flight (costs.stage_inflight: their
    memory differs only in their activations times that share, which moves it one way). Once per `counts`,
    schedule and microbatches."""
    def build() -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        held = tuple(map(tuple, default_rank_counts(counts, pp, vpp).tolist()))
        share = stage_inflight(pp, vpp, microbatches).__getitem__
        alike: dict[tuple[int, ...], list[int]] = {}
        for r in range(1, pp - 1):
            alike.setdefault(held[r], []).append(r)
        ranks = {0, pp - 1}.union(*({min(group, key=share), max(group, key=share)} for group in alike.values()))
        return held, tuple(sorted(ranks))

    return memoised_by(counts, "default_cut_ranks", (pp, vpp, microbatches.numerator, microbatches.denominator),
                       DEFAULT_CUTS_MEMO, build)


def default_rank_counts(counts: np.ndarray, pp: int, vpp: int) -> np.ndarray:
    """Blocks of each kind on each pipeline rank under the default cut (`counts`: cuts.interval_counts), once
    per `counts` and schedule (read-only): every row of one PP and VPP asks for the same."""
    def build() -> np.ndarray:
        per_rank = np.array(rank_counts(default_layout(counts.shape[0] - 1, pp, vpp), pp, counts), dtype=np.int64)
        per_rank.flags.writeable = False
        return per_rank

    return memoised_by(counts, "default_rank_counts", (pp, vpp), DEFAULT_CUTS_MEMO, build)


def quick_fit(costs: RowCosts, counts: np.ndarray, usable: int) -> bool | None:
    """cuts.some_cut_fits where it is answered at once: False for a row whose memory floor
    (costs.memory_floor_mb, read as memory_floor_ratio, then costs.whole_block_memory_floor) already exceeds
    usable HBM (most rows that fit no cut), True for one whose even default cut fits (most rows that fit);
    None when only the cut search can tell. Once per row table, in-flight shares, `counts` and `usable`
    (costs.memoised_floor; the entry holds `counts`, so the identity it is kept by stays its own)."""
    return memoised_floor(costs, ("quick_fit", id(counts), usable),
                          lambda: (counts, _quick_fit(costs, counts, usable)))[1]


def _quick_fit(costs: RowCosts, counts: np.ndarray, usable: int) -> bool | None:
    """quick_fit, computed."""
    totals = counts[0, -1]
    num, den = memory_floor_ratio(costs, totals)
    if num > usable * den:
        return False
    if default_cut_fits(costs, counts, usable):
        return True
    return False if whole_block_memory_floor(costs, totals, 1, in_bytes=False) > usable else None


def cut_fits(costs: RowCosts, counts: np.ndarray, usable: int, deadline: float = math.inf) -> bool | None:
    """cuts.cut_fit (None: left open, by its budget or `deadline`), answered at once where quick_fit can, and
    its answers kept per row table (searched_fit)."""
    quick = quick_fit(costs, counts, usable)
    return searched_fit(costs, counts, usable, deadline) if quick is None else quick


def searched_fit(costs: RowCosts, counts: np.ndarray, usable: int, deadline: float = math.inf) -> bool | None:
    """cuts.cut_fit (None: left open), each answer once per row table, in-flight shares, times, `counts` and
    `usable` (costs.memoised_floor): the rows of one table (DeepSeek-V3's 1,529 questions hold 503 distinct
    ones) ask it once. An answer is a proof (a cut that fits, or that none does), the same whatever the budget
    or deadline; a question left open is not kept, so a later row asks it afresh."""
    key = ("cut fit", id(counts), usable, costs.inflight, costs.kind_time_us, costs.edge_time_us,
           costs.constant_time_us)
    found = memoised_floor(costs, key, lambda: (counts, cut_fit(costs, counts, usable, deadline)),
                           lambda entry: entry[1] is not None)[1]
    return found


@dataclasses.dataclass(frozen=True)
class FitCandidates:
    """The variants of a row that may fit, in the order tried (the row itself, then each open saving): each
    left out when quick_fit rules it out, and none after the first that surely fits. The row as it fits
    is the first candidate some cut of which fits (resolve_fit; none when none does)."""

    rows: tuple[Row, ...]
    settled: bool
    """Whether the answer is known: no candidate, or the first surely fits."""
    costs: tuple[RowCosts, ...]
    """Each candidate's memory tables (row_costs with no time model), kept for its floor and fit question."""


def fit_candidates(problem: Problem, row: Row, savings: tuple[str, ...], counts: np.ndarray,
                   usable: int, costs: RowCosts | None = None) -> FitCandidates:
    """A row's fit candidates, from the quick answers only: solve lets a row wait by the least floor of
    its candidates and asks the cut search (resolve_fit) only when the row is about to be cut, when most
    rows are already beaten. `costs`: the row's own memory tables when known. A saving's tables take the
    row's saved activations from them (costs.row_costs' moved_from: a saving moves only the parameter state
    and adds FSDP unit buffers)."""
    costs = costs or row_costs(problem, row, None)
    verdict = quick_fit(costs, counts, usable)
    if verdict:
        return FitCandidates((row,), True, (costs,))
    found = [(row, costs)] if verdict is None else []
    if savings and quick_fit(without_static(costs), counts, usable) is not False:
        for saving in savings:
            variant = saving_variant(row, saving)
            tables = row_costs(with_saving(problem, saving), variant, None, costs)
            verdict = quick_fit(tables, counts, usable)
            if verdict is not False:
                found.append((variant, tables))
            if verdict:
                break
    return FitCandidates(tuple(v for v, _ in found), not found or (len(found) == 1 and verdict is True),
                         tuple(c for _, c in found))


class Fit(NamedTuple):
    """resolve_fit's answer: the row as it fits (None: no candidate does) and whether that was proved."""

    row: Row | None
    proved: bool
    """False when the fit question of `row` was left open (its search's budget or deadline ran out)."""


def resolve_fit(candidates: FitCandidates, counts: np.ndarray, usable: int, deadline: float = math.inf) -> Fit:
    """The row as it fits: the first candidate some cut of which fits (cut_fits), or None. A question still
    open at `deadline` counts as fitting, unproved: the row's staircase, cut short too, then says whether it
    was proved."""
    for variant, costs in zip(candidates.rows, candidates.costs, strict=True):
        found = True if candidates.settled else cut_fits(costs, counts, usable, deadline)
        if found is not False:
            return Fit(variant, found is not None)
    return Fit(None, True)


def time_model_for(time_model: StageTimeModel, problem: Problem) -> StageTimeModel:
    """The step-time model of a saving's problem: the calibrated model's sibling on it, with the same
    coefficients (FSDP gathers and host transfers are priced from the problem's settings), sharing the
    calibrated model's memos (step_time.FAMILY_MEMOS, each keyed by what its part reads), so the parts a saving
    does not change (the compute and weights of all blocks, the TP exchange, the exchange floor, most of the
    rank work) are read, not rebuilt; another model (a test's) as it is."""
    if isinstance(time_model, CalibratedStageTimes):
        return time_model.for_problem(problem)
    return time_model
