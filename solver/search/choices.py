"""The framework options a row chooses besides its degrees: the MoE token dispatcher with its flex backend
(rows with EP > 1) and the CP communication type with a2a+p2p's hierarchical sizes (rows with CP > 1).

Neither changes the memory ledger, so the variants of one row differ only in time; a variant whose
every stage time table is no slower than every other variant's (after the rules on these options,
judged per variant) gives every cut a point no other variant beats, so the row keeps that one variant
and the front is the one over all variants (checked against the brute force, tests/test_solve_reference.py).
Most rows settle without pricing their variants: the dispatcher acts only through the EP exchange of a
MoE block and the CP type only through the CP exchange of an attention, equal in every block
(constraints/physics/exchanges.py; GQA's and MLA's CP exchange does not depend on the block), so a stage's EP
(CP) exchange is k times one block's in seconds, and its exposed time is non-decreasing in those seconds
(constraints/physics/pricing.py exposes a non-decreasing share of the EP exchange and max(x − window,
x − overlap·ring) of the CP exchange: StageTimeModel.exchange_keys). A variant whose keys are no larger
than every other variant's (and that moves no more network bytes when those are an objective) prices every
stage, so every cut as printed, no higher, and only it is priced (its per-kind tables, differences of
priced probes, may still read one kind dearer: on DeepSeek-V3's PP 1 rows a dense block adds to the window
that hides the MTP block's exchange, which is worth more beside allgather's larger exchange). Otherwise
every variant is priced but those whose keys are within an earlier variant's; where none is
fastest on every table the row is cut once per variant no other is no slower than (priced in full,
DeepSeek-V3's PP 1 rows under FSDP read allgather's dense blocks and flex's MoE blocks cheaper).
"""

from __future__ import annotations

from collections.abc import Callable

from parasol.constraints.evaluate import holds
from parasol.constraints.physics.comm import CommTerm
from parasol.constraints.physics.exchanges import cp_parts, dispatch_link, ep_comm, links_for
from parasol.constraints.physics.step_time import EpOption
from parasol.constraints.physics.workload import dispatch_received, routed, settings_for
from parasol.problems.loader import Problem
from parasol.problems.memo import memoised_by
from parasol.problems.schema import Objective
from parasol.solver.search.costs import RowCosts, StageTimeModel, row_costs
from parasol.solver.search.program import choice_rules
from parasol.solver.search.space import Row, choice_variants, with_choices

MEMORY_TABLES = ("kind_static", "kind_activation", "kind_peak", "kind_moe", "edge_static", "edge_activation",
                 "edge_peak", "edge_moe", "inflight", "dispatch_mb", "workspace_mb")
TIME_TABLES = ("kind_time_us", "edge_time_us")


def choice_rules_hold(problem: Problem, row: Row) -> bool:
    """Whether the row's options meet every rule that reads them (Python verdicts under its options)."""
    chosen = with_choices(problem, row)
    rules = choice_rules(chosen)
    if not rules:
        return True
    mapping = row.mapping(chosen, row.default_cut(chosen))
    return holds(chosen, mapping, rules)


EP_OPTIONS_MEMO = 65536
"""Grids whose EP options are kept per problem (the table starts afresh past this)."""


def ep_options(problem: Problem, row: Row) -> tuple[EpOption, ...] | None:
    """The dispatchers and flex backends the row may run its EP exchange under, for its floors
    (StageTimeModel.step_floor_s): the one it chose, else those of its option variants (choice_variants) that
    the option rules reading only the grid accept (Constraint.reads_grid_only; e.g. Hybrid-EP's layout asserts
    refuse groups split unevenly over NVL72 racks, which would otherwise bound the row by an exchange it never
    runs). None (every option) for a row with no EP exchange, or when those rules accept none: its rules then
    refuse the row whatever its floor. Asked once per grid: nothing else of a row changes the answer."""
    if row.ep == 1 or problem.model.moe is None:
        return None
    key = (row.tp, row.cp, row.ep, row.etp, row.pp, row.rank_order, row.dispatcher, row.flex_backend)
    return memoised_by(problem, "ep options", key, EP_OPTIONS_MEMO,
                       lambda: (_ep_option(problem, row),) if row.dispatcher else _ep_options(problem, row))


def _ep_option(problem: Problem, variant: Row) -> EpOption:
    """The dispatcher and flex backend a variant runs, as its problem's settings read them."""
    settings = settings_for(with_choices(problem, variant))
    return settings.dispatcher, settings.flex_backend


def _ep_options(problem: Problem, row: Row) -> tuple[EpOption, ...] | None:
    """ep_options of an unsettled row, computed: an option is kept when some variant running it meets the grid's
    option rules."""
    rules = tuple(c for c in choice_rules(problem) if c.reads_grid_only)
    kept: list[EpOption] = []
    options: dict[tuple[str, str], EpOption] = {}
    for variant in choice_variants(problem, row):
        chooses = (variant.dispatcher, variant.flex_backend)
        if chooses not in options:
            options[chooses] = _ep_option(problem, variant)
        option = options[chooses]
        if option in kept:
            continue
        chosen = with_choices(problem, variant)
        if not rules or holds(chosen, variant.mapping(chosen), rules):
            kept.append(option)
    return tuple(kept) or None


def no_slower(a: RowCosts, b: RowCosts) -> bool:
    """Whether `a` is at most `b` on every time table and equal on every memory table."""
    if any(getattr(a, name) != getattr(b, name) for name in MEMORY_TABLES):
        return False
    if a.constant_time_us > b.constant_time_us:
        return False
    return all(x <= y for name in TIME_TABLES for x, y in zip(getattr(a, name), getattr(b, name), strict=True))


EXCHANGES_MEMO = 65536
"""Variants' exchanges kept per problem (the table starts afresh past this)."""


def exchanges(problem: Problem, row: Row) -> tuple[CommTerm, CommTerm, CommTerm]:
    """(EP exchange of one MoE block, CP exchange of one attention, the blocking part of that CP exchange)
    of one microbatch's forward under the row's options, as the workload builds them: the only terms its
    dispatcher and CP type change. Built once per problem and what they read (_exchanges): the grid, rank
    order, microbatch and options, not recompute or VPP, so a row's recompute and VPP variants share them."""
    key = (row.pp, row.tp, row.cp, row.ep, row.etp, row.mbs, row.rank_order, row.dispatcher, row.flex_backend,
           row.cp_comm, row.cp_levels)
    return memoised_by(problem, "exchanges", key, EXCHANGES_MEMO, lambda: _exchanges(problem, row))


def _exchanges(problem: Problem, row: Row) -> tuple[CommTerm, CommTerm, CommTerm]:
    """exchanges, built: the hot-rank skew (workload.routed) reads TP, CP, EP, ETP and the microbatch, the
    links (exchanges.links_for) the grid, rank order and CP levels."""
    chosen = with_choices(problem, row)
    model, mapping = chosen.model, row.mapping(chosen)
    settings = routed(chosen, mapping, settings_for(chosen))
    links = links_for(chosen.hardware.topology, mapping, settings.cp_levels)
    tokens = mapping.mbs * mapping.seq_len / mapping.cp
    ep = ep_comm(model, tokens, mapping.tp, mapping.expert_tp,
                 dispatch_link(links, settings.dispatcher, settings.flex_backend), dispatch_received(settings),
                 settings.dispatcher)
    ring, blocking = cp_parts(model, model.blocks[0], tokens, mapping.tp, links.cp, settings.cp_comm, links.cp_levels)
    return ep, ring + blocking, blocking


def least_exchanges(problem: Problem, variants: tuple[Row, ...],
                    keys: Callable[[CommTerm, CommTerm, CommTerm], tuple[float, ...]]) -> tuple[Row, ...]:
    """The variants worth pricing: the first whose exchange `keys` (the time model's exchange_keys: EP seconds,
    CP seconds and what an endless window leaves of them; and the network bytes, when those are an
    objective) are no larger than every other variant's, alone, when there is one; else every variant no
    earlier variant's keys are within. A variant whose keys are within another's is no slower on any stage
    (pricing.py), so the earlier one is no slower on every table, and `settled` keeps what it would keep
    pricing them all: no later variant it drops is unbeaten, and no earlier one is beaten by it."""
    bytes_count = Objective.network_bytes in problem.spec.objectives
    values = []
    for v in variants:
        ep, cp, blocking = exchanges(problem, v)
        values.append((*keys(ep, cp, blocking), *((ep.network_bytes, cp.network_bytes) if bytes_count else ())))

    def within(a: tuple, b: tuple) -> bool:
        return all(x <= y for x, y in zip(a, b, strict=True))

    for v, mine in zip(variants, values, strict=True):
        if all(within(mine, other) for other in values):
            return (v,)
    return tuple(v for i, (v, mine) in enumerate(zip(variants, values, strict=True))
                 if not any(within(earlier, mine) for earlier in values[:i]))


def meeting_rules(problem: Problem, variants: tuple[Row, ...],
                  keys: Callable[[CommTerm, CommTerm, CommTerm], tuple[float, ...]] | None) -> tuple[Row, ...]:
    """The variants whose options meet every rule that reads them (choice_rules_hold), or the first variant when
    none does. With exchange `keys`, while least_exchanges picks one variant alone its rules are asked first:
    if it meets them it is the one settling the variants that meet the rules picks (its keys are within every
    variant's, so within every one that meets them, and an earlier one within all of those would have keys
    equal to its own and have been picked before it), returned alone; if not, it is set aside and the rest
    asked again. So a row the exchanges settle asks the rules of one or two variants, not of all (DeepSeek-V3 on
    2,048 GPUs lists up to 16 per row; its search asks 969 variants instead of 7,375)."""
    left = variants
    while keys is not None and len(left) > 1:
        least = least_exchanges(problem, left, keys)
        if len(least) > 1:
            break
        if choice_rules_hold(problem, least[0]):
            return least
        left = tuple(v for v in left if v is not least[0])
    return tuple(v for v in left if choice_rules_hold(problem, v)) or variants[:1]


def settled(problem: Problem, row: Row, time_model: StageTimeModel,
            compare: bool = True) -> tuple[tuple[Row, RowCosts], ...]:
    """The row's option variants worth cutting, each with its cost tables: the first variant no slower than
    every other, alone, where there is one; else every variant no other is no slower than (the first of
    equals), so the front over the kept variants is the front over all of them. A model that prices
    exchanges as constraints/physics/pricing.py does (it has `exchange_keys`) lets the exchanges settle
    the row when `compare`, else every variant is priced."""
    variants = choice_variants(problem, row)
    keys = getattr(time_model, "exchange_keys", None)
    compared = compare and keys is not None
    if len(variants) > 1:
        variants = meeting_rules(problem, variants, keys if compared else None)
    if len(variants) > 1 and compared:
        variants = least_exchanges(problem, variants, keys)
    priced = [(v, row_costs(problem, v, time_model)) for v in variants]
    for v, c in priced:
        if all(no_slower(c, other) for _, other in priced):
            return ((v, c),)

    def beaten(i: int) -> bool:
        mine = priced[i][1]
        return any(no_slower(other, mine) and (j < i or not no_slower(mine, other))
                   for j, (_, other) in enumerate(priced) if j != i)

    return tuple(vc for i, vc in enumerate(priced) if not beaten(i))
