"""`parasol solve`: rows of degrees, their cost tables and cut staircases, the master CP-SAT program,
the Pareto search, and every returned mapping re-judged in Python with its full account."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from parasol.constraints.physics.flops import model_flops_per_token
from parasol.errors import InputError
from parasol.problems.loader import Problem
from parasol.problems.memo import memoised
from parasol.problems.model.params import block_params
from parasol.problems.schema import Objective
from parasol.solver.diagnose.explain import Explanation, explain
from parasol.solver.search.collector import searching_pace
from parasol.solver.search.costs import (
    MEMORY_UNIT_MB,
    TIME_UNIT_S,
    RowCosts,
    StageTimeModel,
    block_kinds,
    interval_counts,
    prefix_counts,
    usable_mb,
)
from parasol.solver.search.cuts import CutPoint, Staircase
from parasol.solver.search.domains import meeting_degree_rules, rule_domains
from parasol.solver.search.halves import search_on_cores
from parasol.solver.search.objectives import (
    DEFAULT_OBJECTIVES,
    RESOLUTIONS,
    SCALES,
    STEP_DIGITS,
    front_objectives,
    objective_value,
    program_objectives,
    row_units,
)
from parasol.solver.search.pareto import Point, SearchOutcome, pareto_search
from parasol.solver.search.polish import CutPolisher
from parasol.solver.search.program import compile_program
from parasol.solver.search.prune import pruned
from parasol.solver.search.row_search import RowSearch
from parasol.solver.search.savings import NONE, open_savings, row_problem
from parasol.solver.search.space import Row, row_of, rows_until, search_domains


@dataclass(frozen=True)
class SolvedMapping:
    """One mapping of the answer: its Pareto rank, the solver's objective values and its account."""

    pareto_rank: int
    optimal: bool
    step_time_objective_s: float
    peak_memory_objective_gb: float
    front_values: dict[str, float]
    """The two front objectives (in order) and their values in display units (s, GB, fraction, GPUs, tokens/s)."""
    bound: dict[str, float | None]
    """Best lower bound proved for the first objective the program minimised, over every mapping of the space
    within this one's front and its cap on the second (= its value when optimal); None when rows the search
    never screened leave it unbounded (open_bound)."""
    explanation: Explanation
    settings: dict[str, str] = field(default_factory=dict)
    """Framework options the solver chose for this mapping (MoE token dispatcher, CP communication type),
    by their `explain --set` names; explanation.problem carries them."""
    saving: str = NONE
    """The memory saving solve switched on for this mapping (solver/search/savings.py)."""

    def as_dict(self) -> dict:
        """The explain contract plus pareto_rank, the options the solver chose, its objective values and,
        when solve chose one, the memory saving (`memory_saving`: fsdp or optimizer-offload)."""
        data = self.explanation.as_dict()
        data["pareto_rank"] = self.pareto_rank
        data["settings"] = dict(self.settings)
        if self.saving != NONE:
            data["memory_saving"] = self.saving
        data["objective"] = {
            "front": dict(self.front_values),
            "step_time_s": self.step_time_objective_s,
            "peak_memory_gb": self.peak_memory_objective_gb,
            "resolution": dict(RESOLUTIONS),
            "proved_optimal": self.optimal,
            "bound": dict(self.bound),
            "gap": self.gap,
        }
        return data

    @property
    def row(self) -> Row:
        """The search row this mapping was cut from: its degrees, rank order, options and memory saving."""
        return row_of(self.explanation.mapping, self.settings, self.saving)

    @property
    def gap(self) -> float | None:
        """(value − bound) / value of the first objective minimised: 0 when proved optimal, None unbounded."""
        minimised, bound = next(iter(self.bound.items()))
        value = self.step_time_objective_s if minimised == "step_time" else self.front_values.get(minimised, bound)
        if self.optimal or value == 0:
            return 0.0
        return None if bound is None else round((value - bound) / value, 6)


@dataclass(frozen=True)
class SolveResult:
    """The answer: status, ranked mappings, and what the search cost."""

    status: str
    mappings: tuple[SolvedMapping, ...]
    rows: int
    rows_fitting: int
    """Rows found to have a cut that fits in memory; a row whose floor was beaten before its fit needed
    the cut search is not judged (row_search.RowSearch.screen), so a complete search may count fewer
    than fit."""
    master_solves: int
    seconds: float
    rows_screened: int = 0
    """Rows examined within the time limit: screened for memory, and priced when a cut fits."""
    ruled_out: tuple[tuple[str, str], ...] = ()
    """(degree or recompute, value) pairs no mapping meeting the posted rules takes (solver/search/domains.py):
    their rows are not listed."""
    rules_refuse_all: bool = False
    """Rows fold, but no combination of the search's values meets every rule the master posts."""
    rows_cut: int = 0
    """Rows settled and cut (their staircases built): the fitting rows no `top` rows cut before dominate."""
    rows_refused: int = 0
    """Rows that came up to be cut but break a rule the master posts (RowSearch._refused): not cut."""

    def as_dict(self) -> dict:
        """The BRIEF's `solve --json` contract: {"status", "mappings": [...]} plus search statistics."""
        return {
            "status": self.status,
            "mappings": [m.as_dict() for m in self.mappings],
            "search": {"rows": self.rows, "rows_with_a_fitting_cut": self.rows_fitting,
                       "rows_screened": self.rows_screened, "master_solves": self.master_solves,
                       "rows_cut": self.rows_cut, "rows_refused": self.rows_refused,
                       "ruled_out": [f"{name}={value}" for name, value in self.ruled_out],
                       "seconds": round(self.seconds, 3)},
        }


def open_floors(search: RowSearch, staircases: list[Staircase], unseen: tuple[Row, ...] | None,
                minimised: tuple[Objective, ...], deadline: float) -> list[tuple[int, int]] | None:
    """Floors (first, second objective units) of the rows the master program does not settle: rows screened
    but left waiting, cut rows whose staircase is unproved, and the rows never screened (`unseen`; None when
    rows were never even listed), by their compute floors (RowSearch.unseen_floors, until `deadline`). Every
    other row is in the program or beaten by `top` rows in it, whose steps the master's bound covers
    (prune.py's argument: fronts are listed only while fewer than `top` mappings are found, so some
    dominator of a beaten row is always left). None when floors are not in the objectives' units or some
    row is left unbounded: then nothing bounds the space."""
    unproved = [i for i, st in enumerate(staircases) if not st.proved]
    if minimised != DEFAULT_OBJECTIVES or not search.floors:
        return None if unproved or search.waiting or unseen is None or len(unseen) else []
    if unseen is None:
        return None
    never = search.unseen_floors(unseen, deadline)
    if never is None:
        return None
    return search.waiting_floors() + [search.floor_of(i) for i in unproved] + never


def front_caps(points: tuple[Point, ...]) -> list[int | None]:
    """The cap on the second objective under which the master found each point: one unit below the
    previous point of its front (pareto.one_front), none for the first."""
    caps: list[int | None] = []
    for k, pt in enumerate(points):
        earlier = points[k - 1] if k else None
        caps.append(earlier.values[1] - 1 if earlier and earlier.pareto_rank == pt.pareto_rank else None)
    return caps


def open_bound(proved: int, cap: int | None, floors: list[tuple[int, int]] | None) -> int | None:
    """A point's bound over the whole space: the master's proved bound, lowered to the floor of any row it
    does not settle within the point's cap (open_floors); None when nothing bounds the space."""
    if floors is None:
        return None
    within = [t for t, m in floors if cap is None or m <= cap]
    return min([proved, *within])


def bound_as_printed(objective: str, bound: float) -> float:
    """A proved bound on an objective's program units, as the printed values obey it: a value v is held as ⌈v / r⌉
    units of its resolution r, so units of at least B give only v > (B − 1)·r (GPUs are whole: B itself); a step
    time's is rounded down to the decimals it is printed with. `bound`: B·r, as SolvedMapping.bound holds it."""
    if objective == Objective.gpus.value:
        return bound
    below = bound - RESOLUTIONS[objective]
    if objective == Objective.step_time.value:
        return math.floor(round(below * 10**STEP_DIGITS, 6)) / 10**STEP_DIGITS
    return round(below, 9)


def why_not_optimal(result: SolveResult, problem: Problem, time_limit_s: float) -> str:
    """Why an answer is not `optimal`, in one sentence ('' when it is)."""
    if result.status == "optimal":
        return ""
    if result.status == "feasible":
        first = result.mappings[0]
        unit, bound = next(iter(first.bound.items()))
        cut_off = f"the search was cut off by the time limit ({time_limit_s:g} s): the best mappings found so far"
        unseen = result.rows - result.rows_screened
        if bound is None:
            return f"{cut_off}; {unseen:,} of {result.rows:,} rows were never screened and no bound holds"
        shown = bound_as_printed(unit, bound)
        value = f"{shown:.{STEP_DIGITS}f} s" if unit == Objective.step_time.value else f"{shown:g}"
        never = f"; {unseen:,} of {result.rows:,} rows were never screened, bounded by their compute" if unseen else ""
        return (f"{cut_off}; no mapping of the space is below {value} on {unit.replace('_', ' ')} "
                f"(the first found is {100 * (first.gap or 0.0):.1f}% above{never})")
    if result.status == "unknown":
        return (f"no mapping found within the time limit ({time_limit_s:g} s): {result.rows_screened:,} of "
                f"{result.rows:,} rows screened and {result.rows_cut:,} cut by then; raise --time-limit (a search "
                "that completes gives the same answer at any limit)")
    if result.rules_refuse_all:
        return (f"none of the {result.rows:,} degree rows meets every rule: widen `search` or change the options "
                "the rules read (`explain` a mapping to see which rule refuses it)")
    if result.rows == 0 and result.ruled_out:
        values = ", ".join(f"{name} {value}" for name, value in result.ruled_out)
        return (f"no degree row meets every rule: the rules rule out {values}, and the values left do not fold "
                f"onto {problem.gpus:,} GPUs with whole D_a, D_e and m (`explain` a mapping to see which rule "
                "refuses it)")
    if result.rows == 0:
        odd = problem.gpus
        while odd % 2 == 0:
            odd //= 2
        hint = (f" {problem.gpus:,} GPUs carry an odd factor {odd} that the degrees and D_a (a divisor of GBS/MBS) "
                "must take;" if odd > 1 else "")
        return (f"no combination of the allowed degrees folds onto {problem.gpus:,} GPUs with whole D_a, D_e and m "
                f"(N/PP = TP·CP·D_a = ETP·EP·D_e, m = GBS/(MBS·D_a)):{hint} widen `search`, or change the GPU "
                "count or the global batch")
    if result.rows_fitting == 0:
        return (f"none of the {result.rows:,} degree rows fits in memory with any stage cut "
                f"({problem.hardware.gpu.usable_hbm_gb:.1f} GB usable per GPU): allow recompute, more PP/EP/CP, "
                "or more GPUs")
    return f"{result.rows_fitting:,} degree rows fit in memory but none meets every rule (`explain` one to see which)"


RULES_SHARE = 0.1
"""Share of the time limit the rules may spend ruling out degree values before rows are listed."""
ORDER_SHARE = 0.25
"""Share of the time limit (from the start) by which the screening order must be set: past it the rows
not yet keyed follow in listing order, so a short limit on a large cluster (whose group placements the
order's exchange estimate pays for first) still leaves time to cut rows and return mappings."""
PRICING_SHARE = 0.8
"""Share of the time limit screening, settling and cutting rows may use (in rounds, row_search.search_rows)
before the master program is built."""
BOUND_SHARE = 0.05
"""Share of the time limit a cut-off search may spend, after screening, bounding the rows it never screened
(RowSearch.unseen_floors): past it the answer says no bound holds."""
EXPLAIN_SHARE = 0.1
"""Share of the time limit kept for explaining the mappings found: the master search stops before it.
The master and explaining take well under a second on every bundled problem, so the shares leave them
20% of the limit and give the rest to screening and cutting rows, where a cut-off search loses rows."""


class RowDegrees(NamedTuple):
    """The degrees of many rows as arrays, one entry per row, for estimates computed over all of them at once."""

    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    vpp: np.ndarray
    mbs: np.ndarray
    full: np.ndarray
    """Whether the row recomputes whole layers (recompute full)."""

    @classmethod
    def of(cls, rows: tuple[Row, ...]) -> RowDegrees:
        """The rows' degrees, in their order."""
        columns = np.array([(r.tp, r.pp, r.cp, r.ep, r.etp, r.vpp, r.mbs) for r in rows], dtype=np.int64).reshape(-1, 7)
        return cls(*columns.T, np.array([r.recompute == "full" for r in rows], dtype=bool))

    def microbatches(self, problem: Problem) -> np.ndarray:
        """Each row's microbatches per step, GBS·TP·PP·CP / (MBS·N) (a fraction where the folding is not whole)."""
        return problem.training.global_batch * self.tp * self.pp * self.cp / (self.mbs * problem.gpus)


def ideal_step_s(problem: Problem, rows: RowDegrees) -> np.ndarray:
    """A quick optimistic step time per row, used only to decide which rows to price first: model FLOPs of
    the step at the GEMM precision's peak, stretched by the row's pipeline fill and recompute."""
    training = problem.training
    m, p, v = rows.microbatches(problem), rows.pp, rows.vpp
    flops = memoised(problem, "step_model_flops", lambda: model_flops_per_token(problem.model, training.seq_len)
                     * training.global_batch * training.seq_len)
    peak = problem.hardware.gpu.peak_flops(training.precision.value)
    stretch = (v * m + p - 1) / (v * m) * np.where(rows.full, 4 / 3, 1.0)
    return flops / (problem.gpus * peak) * stretch


def exchange_step_s(problem: Problem, time_model: StageTimeModel, rows: tuple[Row, ...], degrees: RowDegrees,
                    totals: np.ndarray, deadline: float = math.inf) -> np.ndarray | None:
    """A quick estimate of the exchange seconds of each row's step, used only to order rows: the EP and CP
    seconds no rank hides (CalibratedStageTimes.exchange_floor_s) and the TP collectives' seconds
    (tp_exchange_s; 0 for a model without them) of the row's grids at MBS 1, once per grid and rank order,
    times the row's tokens per rank per step (MBS × microbatches, spread over the pipeline ranks;
    `degrees`: RowDegrees.of(rows)). None when `deadline` (a perf_counter time) passes before every grid
    is priced."""
    floor, tp = getattr(time_model, "exchange_floor_s", None), getattr(time_model, "tp_exchange_s", None)
    if floor is None or tp is None:
        return np.zeros(len(rows))
    per_group: dict[tuple, float] = {}
    seconds = np.empty(len(rows))
    for i, row in enumerate(rows):
        key = (row.tp, row.cp, row.ep, row.etp, row.pp, row.rank_order)
        if key not in per_group:
            if time.perf_counter() > deadline:
                return None
            grid = Row(row.pp, 1, row.tp, row.cp, row.ep, row.etp, 1, row.recompute, row.rank_order).mapping(problem)
            per_group[key] = floor(grid, totals) + tp(grid, totals)
        seconds[i] = per_group[key]
    return seconds * degrees.mbs * degrees.microbatches(problem) / degrees.pp


WEIGHT_AND_GRADIENT_BYTES = 6
"""BF16 weight and FP32 main gradient per parameter: what a rank holds of every parameter it trains,
however the optimizer state is sharded (used only to order rows)."""


def held_weights_gb(problem: Problem, rows: RowDegrees, sharded: bool = False) -> np.ndarray:
    """A quick estimate of the weights and gradients one rank holds (GB), per row: the blocks' TP-split and
    expert parameters over the row's grids, spread over its pipeline ranks, and over its data-parallel ranks
    too when FSDP shards them (`sharded`). Used only to order rows (priced_first)."""
    dense, expert = memoised(problem, "param_split", lambda: _param_split(problem))
    per_rank = (dense + expert) * rows.pp / problem.gpus if sharded else dense / rows.tp + expert / (rows.ep * rows.etp)
    return per_rank / rows.pp * WEIGHT_AND_GRADIENT_BYTES / 1e9


def _param_split(problem: Problem) -> tuple[int, int]:
    """(dense, routed-expert) parameters of the model's main blocks."""
    split = [block_params(problem.model, b) for b in problem.model.blocks]
    return sum(p.total - p.routed_experts for p in split), sum(p.routed_experts for p in split)


def priced_first(problem: Problem, rows: tuple[Row, ...], time_model: StageTimeModel, totals: np.ndarray,
                 deadline: float = math.inf) -> tuple[Row, ...]:
    """Rows in the order they are screened: most promising first, so a time limit that cuts the search
    short has priced the rows most likely on the front. Rows whose weights and gradients fit in HBM as
    they are (held_weights_gb; sharded where the problem sets FSDP) and rows that fit only when FSDP
    shards them (where the problem leaves FSDP open) take turns, each class by ideal compute plus an
    estimate of the exchanges (exchange_step_s; ties in row order): no quick estimate can rank the two,
    since FSDP's gathers may hide behind the compute or dominate the step. Rows that fit neither way come
    last. Past `deadline` (a perf_counter time) before every row's estimate is known, the rows keep their
    listing order, so the time limit bounds this pass too."""
    degrees = RowDegrees.of(rows)
    exchanges = exchange_step_s(problem, time_model, rows, degrees, totals, deadline)
    if exchanges is None or time.perf_counter() > deadline:
        return rows
    usable = problem.hardware.gpu.usable_hbm_gb
    sharded = problem.training.fsdp != "none"
    shards = not sharded and "fsdp" in open_savings(problem)
    fits = held_weights_gb(problem, degrees, sharded) <= usable
    fits_sharded = held_weights_gb(problem, degrees, sharded=True) <= usable if shards else np.zeros(len(rows), bool)
    kind = np.where(fits, 0, np.where(fits_sharded, 1, 2))
    value = ideal_step_s(problem, degrees) + exchanges
    order = np.lexsort((np.arange(len(rows)), value))
    classes = tuple([rows[i] for i in order[kind[order] == k].tolist()] for k in range(3))
    return _taking_turns(classes)


def _taking_turns(classes: tuple[list[Row], ...]) -> tuple[Row, ...]:
    """The first two classes' rows (each in order) in turns, then the last class."""
    first, second, last = classes
    turns = [r for pair in zip(first, second, strict=False) for r in pair]
    shorter = min(len(first), len(second))
    return tuple(turns + first[shorter:] + second[shorter:] + last)


def _point_value(objective: Objective, row: int, q: CutPoint, per_row: dict[Objective, tuple[int, ...]]) -> int:
    """A staircase step's value of one program objective, in program units."""
    if objective == Objective.step_time:
        return q.time_units
    if objective == Objective.peak_memory:
        return q.memory_units
    return per_row[objective][row]


def polished_master(problem: Problem, rows: tuple[Row, ...], costs: tuple[RowCosts, ...],
                    stairs: tuple[Staircase, ...], per_row: dict[Objective, tuple[int, ...]], polisher: CutPolisher,
                    top: int, minimised: tuple[Objective, ...], deadline: float,
                    on_front: Callable[[int, int], None] | None) -> tuple[SearchOutcome, int]:
    """The master's fronts over `stairs`, solved again with the steps it returns polished (solver/search/polish.py)
    until every step it returns is: (the last outcome, master solves in all). Once the polisher is incomplete
    (`deadline`, perf_counter, passed) the last outcome stands."""
    solves = 0
    while True:
        program = compile_program(problem, rows, costs, stairs, row_values=per_row)
        outcome = pareto_search(program, top, max(deadline - time.perf_counter(), 0.05), minimised, on_front)
        solves += outcome.master_solves
        again = polisher.polished(outcome.points, stairs, deadline)
        if again is None or not polisher.complete:
            return outcome, solves
        stairs = again


@dataclass(frozen=True)
class SearchProgress:
    """How far a search has got: rows screened of the rows listed, Pareto fronts and mappings found."""

    rows_screened: int
    rows_total: int
    fronts: int = 0
    mappings: int = 0


OnProgress = Callable[[SearchProgress], None]


def solve(problem: Problem, time_model: StageTimeModel, top: int = 10, time_limit_s: float = 60.0,
          prune: bool = True, progress: OnProgress | None = None, two_cores: bool = True) -> SolveResult:
    """The Pareto-ranked feasible mappings of `problem` (up to `top`, whole fronts). Degree values no
    rule-abiding mapping takes are ruled out first (solver/search/domains.py); the rows left are taken
    most promising first, in rounds within PRICING_SHARE of the time limit (solver/search/row_search.py):
    a row whose every cut overflows memory is set aside, the rest are settled and cut in the order of
    their floors unless `top` rows already cut dominate them, and go to the master program, less the
    steps `top` other rows dominate (solver/search/prune.py; `prune=False` keeps them, for tests). Rows the
    time limit leaves unscreened or uncut, or an interleaved cut search left unproved, make the answer
    `feasible` (or `unknown` when nothing was found), not `optimal` or `infeasible`. With `two_cores`, a large
    search runs in two halves on two cores where it can (solver/search/halves.py; the same answer)."""
    with searching_pace():
        return _solve(problem, time_model, top, time_limit_s, prune, progress, two_cores)


def _solve(problem: Problem, time_model: StageTimeModel, top: int, time_limit_s: float, prune: bool,
           progress: OnProgress | None, two_cores: bool) -> SolveResult:
    """solve, at the collector's searching pace."""
    if problem.training.pipeline_schedule != "megatron":
        raise InputError(
            f"solve searches Megatron's pipeline schedules; training.pipeline_schedule is "
            f"{problem.training.pipeline_schedule!r}.", field="training.pipeline_schedule",
            value=problem.training.pipeline_schedule, expected="megatron",
            fix="solve with pipeline_schedule: megatron, then judge a DualPipe mapping with `parasol explain "
                "--set pipeline_schedule=dualpipe` (its memory and bubble are priced there).")
    start = time.perf_counter()
    pricing_deadline = start + PRICING_SHARE * time_limit_s
    objectives = front_objectives(problem)
    minimised = program_objectives(objectives)
    ruled = rule_domains(problem, search_domains(problem), start + RULES_SHARE * time_limit_s)
    if ruled.refuse_all:
        rows, listed = rows_until(problem, pricing_deadline)
        return SolveResult("infeasible" if listed else "unknown", (), len(rows), 0, 0, time.perf_counter() - start,
                           rules_refuse_all=bool(rows))
    rows, listed = rows_until(problem, pricing_deadline, ruled.degrees)
    rows = meeting_degree_rules(problem, ruled.kept(rows))
    if not rows:
        return SolveResult("infeasible" if listed else "unknown", (), 0, 0, 0, time.perf_counter() - start,
                           ruled_out=ruled.dropped)
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    usable = usable_mb(problem)
    total_rows = len(rows)
    ordered = priced_first(problem, rows, time_model, counts[0, counts.shape[0] - 1],
                           start + ORDER_SHARE * time_limit_s)
    def fresh() -> RowSearch:
        return RowSearch(problem, time_model, counts, usable, top, prune and minimised == DEFAULT_OBJECTIVES)

    search = fresh()
    on_screened = None if progress is None else (lambda n, listed: progress(SearchProgress(n, listed)))
    unseen = search_on_cores(search, fresh if two_cores else None, ordered, pricing_deadline, on_screened)
    screened = len(ordered) - len(unseen)
    search.in_row_order()
    kept, costs, staircases = search.rows, search.costs, search.staircases
    all_priced = listed and not unseen and not search.waiting and all(st.proved for st in staircases)
    if not kept:
        return SolveResult("infeasible" if all_priced else "unknown", (), total_rows, search.fitting, 0,
                           time.perf_counter() - start, screened, ruled.dropped, rows_refused=search.refused)
    rows, stairs = tuple(kept), tuple(staircases)
    if not any(st.points for st in stairs):
        complete = all_priced
        return SolveResult("infeasible" if complete else "unknown", (), total_rows, search.fitting, 0,
                           time.perf_counter() - start, screened, ruled.dropped, rows_cut=len(kept),
                           rows_refused=search.refused)
    per_row = {o: tuple(row_units(problem, r, o) for r in rows) for o in minimised if not SCALES[o].per_cut}
    if prune:
        stairs = pruned(stairs, lambda i, q: tuple(_point_value(o, i, q, per_row) for o in minimised), top,
                        search.feasible_row)
    floors = open_floors(search, staircases, unseen if listed else None, minimised,
                         start + (PRICING_SHARE + BOUND_SHARE) * time_limit_s)
    on_front = None if progress is None else \
        (lambda fronts, found: progress(SearchProgress(screened, len(ordered), fronts, found)))
    polisher = CutPolisher(problem, rows, tuple(costs), search.model_of, counts, search.cut_rules)
    outcome, master_solves = polished_master(problem, rows, tuple(costs), stairs, per_row, polisher, top, minimised,
                                             start + (1 - EXPLAIN_SHARE) * time_limit_s, on_front)
    solved = []
    caps = front_caps(outcome.points)
    for pt, cap in zip(outcome.points, caps, strict=True):
        if solved and time.perf_counter() - start > time_limit_s:
            break
        row = rows[pt.row_index]
        account = explain(row_problem(problem, row), row.mapping(problem, pt.layout), repairs=0)
        metrics = account.metrics()
        front = {o.value: round(objective_value(o, metrics, v * SCALES[p].resolution), 9)
                 for o, p, v in zip(objectives, minimised, pt.values, strict=True)}
        bound = open_bound(pt.bound, cap, floors)
        proved = pt.optimal and all_priced and polisher.complete
        solved.append(SolvedMapping(pt.pareto_rank, proved, round(pt.time_units * TIME_UNIT_S, 9),
                                    pt.memory_units * MEMORY_UNIT_MB / 1000, front,
                                    {minimised[0].value: None if bound is None
                                     else round(bound * SCALES[minimised[0]].resolution, 9)},
                                    account, row.settings(), row.saving))
    complete = outcome.complete and all_priced and polisher.complete and len(solved) == len(outcome.points)
    if not solved:
        status = "infeasible" if complete else "unknown"
    else:
        status = "optimal" if complete and all(s.optimal for s in solved) else "feasible"
    return SolveResult(status, tuple(solved), total_rows, search.fitting, master_solves,
                       time.perf_counter() - start, screened, ruled.dropped, rows_cut=len(kept),
                       rows_refused=search.refused)
