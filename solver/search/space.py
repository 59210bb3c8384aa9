"""The search space: allowed values per degree, and the degree rows the CP-SAT program chooses from.

Degrees are few and structured (divisors of the world size), so the program works on table rows:
every combination of allowed values whose folding identity has whole solutions (D_a, D_e and m are
whole numbers, seed 000 §并行分组) becomes a row with precomputed costs. Every rule is still posted
on the row's degree variables, so a row that breaks a rule is excluded by CP-SAT, not here.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from operator import attrgetter

from parasol.constraints.physics.exchanges import grid_links, level_links
from parasol.constraints.rules.moe import deepep_group_ok
from parasol.hardware.topology import Level
from parasol.problems.derived import Derived, default_layout, derive_kept
from parasol.problems.empty_stages import most_stages
from parasol.problems.loader import Problem
from parasol.problems.mapping import DEGREES, Mapping, RankOrder, Recompute
from parasol.problems.model.architecture import GQAAttention, MLAAttention

POWERS_OF_TWO = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _pins(value: int | list[int] | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    return (value,) if isinstance(value, int) else tuple(sorted(set(value)))


MIN_TOKENS_PER_CP_RANK = 1024
"""Default CP stops where a rank would hold fewer tokens of a sequence than this."""
SHORT_CP = 8
"""Default CP takes every value to this one (with MIN_TOKENS_PER_CP_RANK tokens per rank); wider groups are
for long contexts (LONG_CONTEXT_TOKENS_PER_CP_RANK)."""
LONG_CONTEXT_TOKENS_PER_CP_RANK = 8192
"""Past SHORT_CP, default CP goes on while a rank keeps this many tokens of a sequence: Llama 3's
131,072-token stage ran CP 16 on 16,384 H100 (arXiv:2407.21783, Table 4), 8,192 tokens per rank."""
MAX_DEFAULT_VPP = 16
"""Default VPP stops here: past 16 virtual stages per rank the bubble it removes, (PP−1)/(VPP·m) of the
pipeline, is under a 16th of the 1F1B bubble while every virtual stage adds its sends."""
SHORT_SEQUENCE = 2048
"""Sequences of at most this many tokens also try MBS 8 (longer ones stop at MBS 4)."""


def default_tp(problem: Problem) -> tuple[int, ...]:
    """TP values tried by default: powers of two dividing the heads that fit a node or divide the NVLink
    domain, and where `framework.tp_across_nvlink` is a warning also the next power of two, a group over
    two domains (TP across nodes, e.g. TP 16 on 8-GPU nodes; wider groups put every layer's TP
    collectives on the NICs)."""
    heads, topology = problem.model.attention.num_heads, problem.hardware.topology
    inside = [t for t in POWERS_OF_TWO if heads % t == 0
              and (t <= topology.gpus_per_node or topology.gpus_per_nvlink_domain % t == 0)]
    across = 2 * inside[-1]
    if problem.spec.framework.tp_across_nvlink == "warning" and heads % across == 0 and across <= problem.gpus:
        inside.append(across)
    return tuple(inside)


DEFAULT_VPP = (1, 2, 3, 4, 6, 8, 12, MAX_DEFAULT_VPP)
"""VPP values tried by default: every value to 4, then those that split the usual per-rank block counts
(multiples of 6 and 8) evenly."""


def default_vpp(problem: Problem) -> tuple[int, ...]:
    """DEFAULT_VPP up to as many virtual stages as leave a block each on two pipeline ranks (rows_until
    drops the values a row's PP cannot hold; Megatron accepts any VPP with an explicit layout, and VPP > 1
    needs PP > 1, a rule)."""
    return tuple(v for v in DEFAULT_VPP if v <= max(problem.model.num_layers // 2, 1))


def default_mbs(problem: Problem) -> tuple[int, ...]:
    """MBS values tried by default: 1, 2 and 4, and 8 for sequences of at most SHORT_SEQUENCE tokens."""
    return (1, 2, 4, 8) if problem.training.seq_len <= SHORT_SEQUENCE else (1, 2, 4)


def default_domains(problem: Problem) -> dict[str, tuple[int, ...]]:
    """Values tried when the problem's `search` leaves a degree open: TP as default_tp says, PP every divisor
    of the GPU count up to the block count (uneven cuts let any PP run: 6,144 GPUs take PP 12, 1,000 PP 5),
    CP up to SHORT_CP with at least MIN_TOKENS_PER_CP_RANK tokens per rank and past it with at least
    LONG_CONTEXT_TOKENS_PER_CP_RANK (CP 16 at 131,072 tokens), S divisible by 2·CP, EP dividing the experts,
    VPP and MBS as default_vpp and default_mbs say. ETP takes the TP values (see expert_tp_choices); a search
    section widens or narrows any of them."""
    model, gpus, seq = problem.model, problem.gpus, problem.training.seq_len
    tp = default_tp(problem)
    pp = tuple(p for p in range(1, min(model.num_layers, gpus) + 1) if gpus % p == 0)
    cp = tuple(c for c in POWERS_OF_TWO if c == 1 or (seq % (2 * c) == 0 and seq // c >= (
        MIN_TOKENS_PER_CP_RANK if c <= SHORT_CP else LONG_CONTEXT_TOKENS_PER_CP_RANK)))
    experts = model.moe.num_experts if model.moe else 1
    ep = tuple(e for e in range(1, experts + 1) if experts % e == 0 and e <= gpus)
    return {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "etp": tp, "vpp": default_vpp(problem),
            "mbs": default_mbs(problem)}


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
    other links than the default order does; elsewhere it would repeat the default's row. Reads the row's
    degrees only (not its rank order)."""
    if len(orders) == 1:
        return orders
    r = row
    if not (r.pp > 1 and r.tp * r.cp == r.etp * r.ep and problem.gpus // (r.tp * r.cp * r.pp) > 1):
        return (RankOrder.pp_last,)
    topology = problem.hardware.topology
    grid = (topology, problem.gpus, r.tp, r.cp, r.pp, r.ep, r.etp)
    if grid_links(*grid, RankOrder.pp_last) == grid_links(*grid, RankOrder.dp_last):
        return (RankOrder.pp_last,)
    return orders


DISPATCHERS = ("allgather", "alltoall", "flex")
"""Megatron's MoE token dispatchers (--moe-token-dispatcher-type); flex runs the options' backend
(--moe-flex-dispatcher-backend: DeepEP by default, Hybrid-EP)."""
CP_COMM_TYPES = ("p2p", "a2a", "allgather", "a2a+p2p")
"""CP communication types `solve` tries by default (--cp-comm-type); a2a+p2p with the hierarchical sizes
cp_level_choices gives a row (the problem's own --hierarchical-context-parallel-sizes where it sets them)."""


def _explicit(problem: Problem, option: str) -> str | None:
    """The value of a framework option the problem sets itself (None when it leaves Megatron's default)."""
    options = problem.spec.framework.options
    return getattr(options, option) if option in options.model_fields_set else None


def _listed(value: str | list[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(dict.fromkeys(value))


def flex_allowed(problem: Problem) -> bool:
    """Whether the flex dispatcher is worth trying by default: a GPU cluster whose all-to-all sends what is
    routed (not fixed-size buffers) with FP8 tensor cores (Hopper or later; DeepEP's inter-node kernels
    and Hybrid-EP are built for those)."""
    return not problem.hardware.topology.fixed_size_all_to_all and "fp8" in problem.hardware.gpu.precisions


def dispatcher_choices(problem: Problem) -> tuple[str, ...]:
    """Token dispatchers a MoE row with EP > 1 takes: `search.dispatcher`, else the one the problem's
    options set, else allgather, alltoall and (where flex_allowed) flex. Empty for a dense model."""
    if problem.model.moe is None:
        return ()
    listed = _listed(problem.spec.search.dispatcher)
    if listed is not None:
        return listed
    pinned = _explicit(problem, "moe_token_dispatcher_type")
    if pinned is not None:
        return (pinned,)
    return DISPATCHERS if flex_allowed(problem) else DISPATCHERS[:2]


def cp_comm_choices(problem: Problem) -> tuple[str, ...]:
    """CP communication types a row with CP > 1 takes: `search.cp_comm_type`, else the one the problem's
    options set, else every type (CP_COMM_TYPES) for standard (GQA/MHA) and multi-latent attention;
    DeepSeek-V4's hybrid attention keeps the options' type (its compressed-KV exchange is the same under
    every type, constraints/physics/exchanges.py cp_parts)."""
    listed = _listed(problem.spec.search.cp_comm_type)
    if listed is not None:
        return listed
    pinned = _explicit(problem, "cp_comm_type")
    if pinned is not None or not isinstance(problem.model.attention, GQAAttention | MLAAttention):
        return (problem.spec.framework.options.cp_comm_type,)
    return CP_COMM_TYPES


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
    dispatcher: str = ""
    """The MoE token dispatcher the row runs ("": the problem's option)."""
    cp_comm: str = ""
    """The CP communication type the row runs ("": the problem's option)."""
    saving: str = "none"
    """A memory saving solve switched on for this row (solver/search/savings.py), 'none' for the problem's own."""
    flex_backend: str = ""
    """The flex dispatcher's backend the row runs ("": the problem's option)."""
    cp_levels: tuple[int, ...] = ()
    """The hierarchical CP sizes of an a2a+p2p row (--hierarchical-context-parallel-sizes; (): the problem's)."""

    def mapping(self, problem: Problem, layout: tuple[int, ...] | None = None) -> Mapping:
        """The full mapping this row stands for (layout None: the default split); one object per distinct
        mapping (_mapping): a search asks for the same ones many times, and validating one costs."""
        return _mapping(problem.gpus, problem.training.global_batch, problem.training.seq_len, self.tp, self.pp,
                        self.cp, self.ep, self.etp, self.vpp, self.mbs, self.recompute, layout, self.rank_order)

    def default_cut(self, problem: Problem) -> tuple[int, ...]:
        """The row's default split of the problem's blocks (derived.default_layout): the explicit cut its rules
        are judged on before a cut search chooses one."""
        return default_layout(problem.model.num_layers, self.pp, self.vpp)

    def derived(self, problem: Problem) -> Derived:
        """derive of the row's mapping (its default split), without building the mapping when its sizes are
        kept (derived.derive_kept)."""
        key = (problem.gpus, problem.training.global_batch, problem.training.seq_len, self.tp, self.pp, self.cp,
               self.ep, self.etp, self.vpp, self.mbs, None)
        return derive_kept(problem.model, key, lambda: self.mapping(problem))

    def settings(self) -> dict[str, str | tuple[int, ...]]:
        """The framework options the row chooses, by their `--set` names."""
        return {name: value for name, value in zip(CHOICE_OPTIONS, _choice_values(self), strict=True) if value}

    @property
    def chooses(self) -> bool:
        """Whether the row chooses any framework option (settings() is not empty), without building them."""
        return any(_choice_values(self))


CHOICE_OPTIONS = ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "cp_comm_type",
                  "hierarchical_context_parallel_sizes")
"""The framework options a row may choose, by their `--set` names (Row.dispatcher, flex_backend, cp_comm and
cp_levels hold them, in this order)."""

CHOICE_FIELDS = ("dispatcher", "flex_backend", "cp_comm", "cp_levels")
"""The Row fields that hold the options of CHOICE_OPTIONS, in its order."""

_choice_values = attrgetter(*CHOICE_FIELDS)


def row_of(mapping: Mapping, settings: dict[str, str | tuple[int, ...]], saving: str) -> Row:
    """The search row of a mapping with the options it chose (`settings`: by Row.settings' names) and its memory
    saving: the row a solved mapping was cut from."""
    options = dict(zip(CHOICE_FIELDS, ("", "", "", ()), strict=True))
    options.update({field: settings[name] for field, name in zip(CHOICE_FIELDS, CHOICE_OPTIONS, strict=True)
                    if name in settings})
    options["cp_levels"] = tuple(options["cp_levels"])
    return Row(mapping.pp, mapping.vpp, mapping.tp, mapping.cp, mapping.ep, mapping.expert_tp, mapping.mbs,
               mapping.recompute.value, mapping.rank_order.value, saving=saving, **options)


MAPPINGS_KEPT = 1 << 16
"""Distinct mappings Row.mapping keeps (least recently used dropped first)."""


@lru_cache(maxsize=MAPPINGS_KEPT)
def _mapping(gpus: int, gbs: int, seq_len: int, tp: int, pp: int, cp: int, ep: int, etp: int, vpp: int, mbs: int,
             recompute: str, layout: tuple[int, ...] | None, rank_order: str) -> Mapping:
    """The mapping of these values, validated once (mappings are immutable, so one object serves every row)."""
    return Mapping(gpus=gpus, gbs=gbs, seq_len=seq_len, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, mbs=mbs,
                   recompute=recompute, layout=layout, rank_order=rank_order)


ROW_ORDER = attrgetter(*(f.name for f in dataclasses.fields(Row)))
"""Rows' own order (their fields in turn) as a sort key: sorting by it is sorting the rows, without
comparing Row objects in Python."""

_ROW_PROBLEMS: dict[tuple[int, tuple], tuple[Problem, Problem]] = {}


def with_choices(problem: Problem, row: Row) -> Problem:
    """The problem with the options the row chooses (the problem itself when it chooses none); one
    object per problem and choice, so per-problem memos stay shared."""
    if not row.chooses:
        return problem
    settings = row.settings()
    options = problem.spec.framework.options
    if all(getattr(options, k) == v for k, v in settings.items()):
        return problem
    key = (id(problem), tuple(sorted(settings.items())))
    held = _ROW_PROBLEMS.get(key)
    if held is None or held[0] is not problem:
        if len(_ROW_PROBLEMS) > 256:
            _ROW_PROBLEMS.clear()
        framework = problem.spec.framework.model_copy(update={"options": options.model_copy(update=settings)})
        spec = problem.spec.model_copy(update={"framework": framework})
        held = _ROW_PROBLEMS[key] = (problem, dataclasses.replace(problem, spec=spec))
    return held[1]


def whole_folding(gpus: int, gbs: int, tp: int, pp: int, cp: int, ep: int, etp: int, mbs: int) -> bool:
    """D_a = N/(TP·PP·CP), D_e = N/(ETP·EP·PP) and m = GBS/(MBS·D_a) are whole (m >= 1)."""
    if gpus % (tp * pp * cp) or gpus % (etp * ep * pp):
        return False
    per_step = mbs * gpus // (tp * pp * cp)
    return gbs % per_step == 0


def expert_tp_choices(problem: Problem, tp: int, listed: tuple[int, ...]) -> tuple[int, ...]:
    """ETP values a row with this TP takes: a dense model has no expert grid, so ETP = TP only (whatever
    `search.etp` lists, and even where TP leaves the node); a MoE model takes the listed values, or when
    ETP is left open TP (Megatron's default, arguments.py:587-588) and 1 (whole experts per rank). Megatron
    accepts any ETP whose expert grid folds; `search.etp` lists others (each one adds as many rows again)."""
    if problem.model.moe is None:
        return (tp,)
    if problem.spec.search.etp is not None:
        return listed
    return tuple(sorted({1, tp}))


CLOCK_EVERY = 4096
"""Degree combinations enumerated between two looks at the clock."""


def enumerate_rows(problem: Problem, domains: dict[str, tuple[int, ...]] | None = None) -> tuple[Row, ...]:
    """Every row of the search space with a whole folding identity and no more virtual stages than its cuts
    can fill (empty_stages.most_stages: a block per stage, besides the first and last rank's stages on interleaved rows)."""
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
    recomputes = tuple(r.value for r in recompute_choices(problem))
    etps = {tp: expert_tp_choices(problem, tp, doms["etp"]) for tp in doms["tp"]}
    grid_orders: dict[tuple[int, ...], tuple[str, ...]] = {}
    rows = []
    others = [doms[n] for n in DEGREES if n != "etp"]
    for k, (tp, pp, cp, ep, vpp, mbs) in enumerate(product(*others)):
        if deadline is not None and k % CLOCK_EVERY == 0 and time.perf_counter() > deadline:
            return tuple(sorted(rows, key=ROW_ORDER)), False
        if (vpp > 1 and pp == 1) or pp * vpp > most_stages(blocks, vpp):
            continue
        for etp in etps[tp]:
            if whole_folding(gpus, gbs, tp, pp, cp, ep, etp, mbs):
                grid = (tp, pp, cp, ep, etp)
                if grid not in grid_orders:
                    base = Row(pp, vpp, tp, cp, ep, etp, mbs, Recompute.none.value)
                    grid_orders[grid] = tuple(o.value for o in distinct_orders(problem, orders, base))
                rows.extend(Row(pp, vpp, tp, cp, ep, etp, mbs, r, o) for r in recomputes for o in grid_orders[grid])
    return tuple(sorted(rows, key=ROW_ORDER)), True


def choice_variants(problem: Problem, row: Row) -> tuple[Row, ...]:
    """The row once per dispatcher (EP > 1) with each flex backend that matters (flex_backend_choices) and per
    CP communication type (CP > 1) with each a2a+p2p split worth trying (cp_level_choices); where a choice
    does not act the row takes its first value (the problem's option when the choice is not open)."""
    dispatchers = dispatcher_choices(problem)
    cp_comms = cp_comm_choices(problem)
    dispatchers = (dispatchers if row.ep > 1 else dispatchers[:1]) or ("",)
    cp_comms = (cp_comms if row.cp > 1 else cp_comms[:1]) or ("",)
    ep_options = [(d, b) for d in dispatchers for b in (flex_backend_choices(problem, row) if d == "flex" else ("",))]
    cp_options = [(c, sizes) for c in cp_comms
                  for sizes in (cp_level_choices(problem, row, len(cp_comms) == 1) if c == "a2a+p2p" else ((),))]
    return tuple(dataclasses.replace(row, dispatcher=d, flex_backend=b, cp_comm=c, cp_levels=sizes)
                 for d, b in ep_options for c, sizes in cp_options)


def flex_backend_choices(problem: Problem, row: Row) -> tuple[str, ...]:
    """Flex backends a row tries: the problem's (deepep unless it sets one), and hybridep as well when the
    problem leaves the backend open and the two differ for this row: DeepEP reaches fewer of the EP group's
    ranks over NVLink than the group has in its NVLink domain (comm.deepep_link: NVL72 racks), or DeepEP's
    kernels cannot take the ETP×EP group (deepep_group_ok). Elsewhere both move the same bytes on the same
    links, and one row is enough."""
    options = problem.spec.framework.options
    if {"moe_flex_dispatcher_backend", "moe_enable_deepep"} & options.model_fields_set:
        return ("",)
    links = grid_links(problem.hardware.topology, problem.gpus, row.tp, row.cp, row.pp, row.ep, row.etp,
                       RankOrder(row.rank_order))
    if links.ep_deepep == links.ep and deepep_group_ok(row.etp, row.ep):
        return ("",)
    return ("", "hybridep")


def cp_level_choices(problem: Problem, row: Row, only: bool) -> tuple[tuple[int, ...], ...]:
    """Hierarchical CP sizes an a2a+p2p row tries: the problem's own where it sets them (()), else every
    split CP = A·P with A, P > 1 whose level-1 (all-to-all) groups lie inside one NVLink domain: its
    all-to-all blocks the attention and its ring may hide behind it (exchanges.cp_parts), so a split can
    beat both the flat ring and the flat all-to-all, inside a domain too. `only`: a2a+p2p is the one type the
    row may run, so with no such split it takes every split with A, P > 1 (or (1, CP))."""
    if problem.spec.framework.options.hierarchical_context_parallel_sizes is not None:
        return ((),)
    cp, topology, order = row.cp, problem.hardware.topology, RankOrder(row.rank_order)
    splits = [(a, cp // a) for a in range(2, cp) if cp % a == 0]
    worth = [s for s in splits
             if level_links(topology, problem.gpus, row.tp, cp, row.pp, order, s)[0].level is Level.nvlink_domain]
    if worth or not only:
        return tuple(worth)
    return tuple(splits) or ((1, cp),)
