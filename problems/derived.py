"""Sizes that follow from a mapping: data-parallel degrees, microbatches, bubble, tokens, experts.

Each formula is one named function, cited to the seed or to Megatron-LM. A degree that does not
divide exactly is reported as a Fraction so that the rule that fails can say by how much.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from parasol.problems.empty_stages import evenest_cut
from parasol.problems.mapping import Mapping
from parasol.problems.memo import memoised_by
from parasol.problems.model.architecture import ModelArchitecture


def attention_data_parallel(gpus: int, pp: int, tp: int, cp: int) -> Fraction:
    """D_a = N / (PP·TP·CP): seed 000 §并行分组 (MoE Parallel Folding), Megatron arguments.py:442-448."""
    return Fraction(gpus, pp * tp * cp)


def expert_data_parallel(gpus: int, pp: int, etp: int, ep: int) -> Fraction:
    """D_e = N / (PP·ETP·EP): the same ranks of a stage folded as ETP×EP×D_e (parallel_state.py:870-884)."""
    return Fraction(gpus, pp * etp * ep)


def num_microbatches(gbs: int, mbs: int, dp_attn: Fraction) -> Fraction:
    """m = B / (b·D_a): seed 000 §PP 和 microbatch; CP and EP add no samples."""
    return Fraction(gbs) / (mbs * dp_attn)


def bubble_fraction(pp: int, m: float, vpp: int = 1) -> float:
    """Share of an ideal pipeline lost to fill and drain: (p−1)/(v·m+p−1); v=1 is seed 000's 1F1B
    formula (p−1)/(m+p−1); with v virtual stages per rank the bubble shrinks v-fold (Narayanan 2021 §2.2)."""
    if pp <= 1:
        return 0.0
    return (pp - 1) / (vpp * m + pp - 1)


def tokens_per_update(gbs: int, seq_len: int) -> int:
    """Packed token positions per optimizer step, B·S (seed 000: 4096·8192 = 33,554,432)."""
    return gbs * seq_len


def tokens_per_rank(mbs: int, seq_len: int, cp: int, tp: int) -> Fraction:
    """Tokens one rank holds in a microbatch: b·S/CP, further split by TP under sequence parallelism."""
    return Fraction(mbs * seq_len, cp * tp)


def tokens_per_ep_dispatch(ep: int, etp: int, mbs: int, seq_len: int, cp: int, tp: int) -> Fraction:
    """Unique tokens one EP dispatch covers: the EP·ETP ranks' local tokens. With TP = ETP = 1 this is
    seed 000's T_group = EP·b·S/CP (524,288 for EP64, S=8192, CP1; 131,072 for CP4)."""
    return ep * etp * tokens_per_rank(mbs, seq_len, cp, tp)


def mean_assignments_per_expert(top_k: int, tokens: Fraction, num_experts: int) -> Fraction:
    """E[T_expert] = k·T/E under balanced routing (seed 000 §CP; seed 003 §4)."""
    return top_k * tokens / num_experts


def experts_per_rank(num_experts: int, ep: int) -> Fraction:
    """Routed experts of one MoE layer held by one rank: E/EP (seed 000: 384/64 = 6)."""
    return Fraction(num_experts, ep)


@lru_cache(maxsize=4096)
def default_layout(num_blocks: int, pp: int, vpp: int) -> tuple[int, ...]:
    """Split blocks over the PP·VPP virtual stages as evenly as possible; the remainder goes to the middle
    stages first, since the first stage also holds the embedding and the last the head, loss and MTP (cached:
    every row of a search asks for one of a few). With fewer blocks than stages (an interleaved row), a block
    on every stage that needs one and the rest on the edge ranks' (empty_stages.evenest_cut)."""
    stages = pp * vpp
    if num_blocks < stages:
        return evenest_cut(num_blocks, pp, vpp)
    base, extra = divmod(num_blocks, stages)
    counts = [base] * stages
    for s in _middle_first(stages, extra):
        counts[s] += 1
    return tuple(counts)


def _middle_first(stages: int, count: int) -> list[int]:
    """The first `count` stages in the order (end stage last, nearest the middle first, lower index first),
    built outward from the middle so that a cut of a million stages costs only `count` steps."""
    order: list[int] = []
    lo, hi = (stages - 1) // 2, stages // 2
    while len(order) < count and lo >= 1:
        for s in ((lo,) if lo == hi else (lo, hi)):
            if s < stages - 1 and len(order) < count:
                order.append(s)
        lo, hi = lo - 1, hi + 1
    ends = [0] if stages == 1 else [0, stages - 1]
    return order + ends[:count - len(order)]


MAX_PIPELINE_SLOTS = 2
"""Virtual stages that may hold no block: one for the embedding, one for the loss (account_for_*)."""


def stage_of_virtual(virtual_index: int, pp: int) -> int:
    """Pipeline rank that runs virtual stage k (Megatron: pp_rank = k % PP, layout docs §2.3)."""
    return virtual_index % pp


@dataclass(frozen=True)
class Derived:
    """Every derived size of one mapping on one model (exact fractions where division can fail)."""

    dp_attn: Fraction
    dp_expert: Fraction
    num_microbatches: Fraction
    bubble_fraction: float
    tokens_per_update: int
    tokens_per_rank: Fraction
    tokens_per_ep_dispatch: Fraction | None
    assignments_per_expert: Fraction | None
    experts_per_rank: Fraction | None
    layout: tuple[int, ...]
    stage_layers: tuple[int, ...]

    def as_dict(self) -> dict:
        """JSON-ready values: whole numbers as int, others as float."""
        def num(x: Fraction | None) -> int | float | None:
            if x is None:
                return None
            return int(x) if x.denominator == 1 else float(x)

        return {
            "dp_attn": num(self.dp_attn),
            "dp_expert": num(self.dp_expert),
            "num_microbatches": num(self.num_microbatches),
            "bubble_fraction": round(self.bubble_fraction, 6),
            "tokens_per_update": self.tokens_per_update,
            "tokens_per_rank": num(self.tokens_per_rank),
            "tokens_per_ep_dispatch": num(self.tokens_per_ep_dispatch),
            "assignments_per_expert": num(self.assignments_per_expert),
            "experts_per_rank": num(self.experts_per_rank),
            "layout": list(self.layout),
            "stage_layers": list(self.stage_layers),
        }


def resolve_layout(model: ModelArchitecture, mapping: Mapping) -> tuple[int, ...]:
    """The mapping's layout, or the default split over PP·VPP virtual stages; empty when the virtual stages
    outnumber the blocks plus the embedding and loss slots (no default cut exists: rule
    virtual-stages-within-blocks)."""
    if mapping.layout is not None:
        return mapping.layout
    if mapping.pp * mapping.vpp > model.num_layers + MAX_PIPELINE_SLOTS:
        return ()
    return default_layout(model.num_layers, mapping.pp, mapping.vpp)


def stage_layer_totals(layout: tuple[int, ...], pp: int) -> tuple[int, ...]:
    """Blocks each pipeline rank holds, summing its virtual stages (k goes to rank k % PP, so the layout is
    VPP consecutive rows of PP stages, summed column by column)."""
    rows = [layout[start:start + pp] for start in range(0, len(layout), pp)]
    return tuple(map(sum, zip(*rows, strict=True)))


_layout_totals = lru_cache(maxsize=4096)(stage_layer_totals)
"""stage_layer_totals for derive's layouts (tuples), cached: a search derives many mappings of few layouts."""


def interleaved_even_layout(rank_totals: Sequence[int], vpp: int) -> tuple[int, ...]:
    """The virtual-stage layout in which every pipeline rank splits its blocks evenly over its VPP
    virtual stages (Megatron's cut when only per-rank counts are given; totals divisible by VPP)."""
    pp = len(rank_totals)
    return tuple(rank_totals[stage_of_virtual(k, pp)] // vpp for k in range(pp * vpp))


DERIVE_MEMO = 65536
"""Derived sizes kept per model (the table starts afresh past this): rows differing only in recompute or rank
order, and every pass over one row, share one."""


def derive(model: ModelArchitecture, mapping: Mapping) -> Derived:
    """Every derived size of `mapping` for `model`, computed once per model and the mapping fields they
    read (not its recompute or rank order)."""
    m = mapping
    return derive_kept(model, (m.gpus, m.gbs, m.seq_len, m.tp, m.pp, m.cp, m.ep, m.expert_tp, m.vpp, m.mbs, m.layout),
                       lambda: m)


def derive_kept(model: ModelArchitecture, key: tuple, mapping: Callable[[], Mapping]) -> Derived:
    """derive of the mapping `mapping()` builds, whose (GPUs, GBS, sequence, TP, PP, CP, EP, ETP, VPP, MBS,
    layout) are `key`: the mapping is built only when its sizes are not kept yet (a search asks for the sizes
    of tens of thousands of rows, and building a mapping costs more than looking them up)."""
    return memoised_by(model, "derive", key, DERIVE_MEMO, lambda: _derive(model, mapping()))


def _derive(model: ModelArchitecture, m: Mapping) -> Derived:
    """Compute every derived size of mapping `m` for `model`: those that read neither VPP nor the layout once
    per the fields they read (_sizes; a search's rows differ in VPP most), the pipeline's here."""
    dp_a, dp_e, mb, per_update, per_rank_tokens, dispatch, assign, per_rank = _sizes(model, m)
    layout = resolve_layout(model, m)
    return Derived(
        dp_attn=dp_a,
        dp_expert=dp_e,
        num_microbatches=mb,
        bubble_fraction=bubble_fraction(m.pp, float(mb), m.vpp),
        tokens_per_update=per_update,
        tokens_per_rank=per_rank_tokens,
        tokens_per_ep_dispatch=dispatch,
        assignments_per_expert=assign,
        experts_per_rank=per_rank,
        layout=layout,
        stage_layers=_layout_totals(layout, m.pp) if len(layout) % m.pp == 0 else layout,
    )


def _sizes(model: ModelArchitecture, m: Mapping) -> tuple:
    """(D_a, D_e, microbatches, tokens per update, tokens per rank, tokens per EP dispatch, assignments per
    expert, experts per rank) of `m`: what _derive reads besides VPP and the layout, once per model and the
    mapping fields these read."""
    key = (m.gpus, m.gbs, m.seq_len, m.tp, m.pp, m.cp, m.ep, m.expert_tp, m.mbs)

    def build() -> tuple:
        dp_a = attention_data_parallel(m.gpus, m.pp, m.tp, m.cp)
        moe = model.moe
        dispatch = assign = per_rank = None
        if moe is not None:
            dispatch = tokens_per_ep_dispatch(m.ep, m.expert_tp, m.mbs, m.seq_len, m.cp, m.tp)
            assign = mean_assignments_per_expert(moe.top_k, dispatch, moe.num_experts)
            per_rank = experts_per_rank(moe.num_experts, m.ep)
        return (dp_a, expert_data_parallel(m.gpus, m.pp, m.expert_tp, m.ep), num_microbatches(m.gbs, m.mbs, dp_a),
                tokens_per_update(m.gbs, m.seq_len), tokens_per_rank(m.mbs, m.seq_len, m.cp, m.tp), dispatch, assign,
                per_rank)

    return memoised_by(model, "derived_sizes", key, DERIVE_MEMO, build)
