"""What each parallel group exchanges, on the links its real ranks cross: TP all-gather/reduce-scatter (or
all-reduce), CP KV exchange, EP dispatch and combine by Megatron dispatcher, PP sends, and the data-parallel
gradient reduction and parameter gather. Volumes become CommTerms that constraints/physics/comm.py prices."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from math import prod

from parasol.constraints.physics.comm import (
    NO_COMM,
    CommTerm,
    GroupLink,
    all_gather,
    all_to_all,
    cp_level_links,
    deduplicated_dispatch,
    deepep_link,
    group_link,
    point_to_point,
    reduce_scatter,
    ring_all_reduce,
)
from parasol.constraints.physics.dtypes import BF16_BYTES
from parasol.problems.mapping import Mapping, RankOrder
from parasol.problems.model.architecture import (
    CSA_RATIO,
    Block,
    BlockKind,
    DSV4Attention,
    GQAAttention,
    Mixer,
    MLAAttention,
    ModelArchitecture,
    compression_window,
)


@dataclass(frozen=True)
class Links:
    """The links of every group kind under one mapping."""

    tp: GroupLink
    cp: GroupLink
    ep: GroupLink
    pp: GroupLink
    dp_cp: GroupLink
    dp_expert: GroupLink
    ep_deepep: GroupLink
    """The EP group as DeepEP's normal kernels reach it (comm.deepep_link)."""
    cp_levels: tuple[GroupLink, ...] = ()
    """The groups of each level of --hierarchical-context-parallel-sizes (comm.cp_level_links); empty without."""


def links_for(topology, mapping: Mapping, cp_levels: tuple[int, ...] = ()) -> Links:  # noqa: ANN001 - ClusterTopology
    """Place every group of the mapping on the cluster (worst group of each kind), with the hierarchical CP
    levels when `cp_levels` (sizes multiplying to CP) are given. Placement depends only on the grid sizes and
    the rank order, so rows differing in recompute, VPP, MBS or cut share one placement (cached: placing
    groups dominated large searches)."""
    links = grid_links(topology, mapping.gpus, mapping.tp, mapping.cp, mapping.pp, mapping.ep, mapping.expert_tp,
                       RankOrder(mapping.rank_order))
    if len(cp_levels) < 2 or prod(cp_levels) != mapping.cp:
        return links
    return replace(links, cp_levels=level_links(topology, mapping.gpus, mapping.tp, mapping.cp, mapping.pp,
                                                RankOrder(mapping.rank_order), tuple(cp_levels)))


@lru_cache(maxsize=1024)
def level_links(topology, gpus: int, tp: int, cp: int, pp: int, order: RankOrder,  # noqa: ANN001
                cp_levels: tuple[int, ...]) -> tuple[GroupLink, ...]:
    """comm.cp_level_links on the dense grid sizes alone (cached like grid_links)."""
    grid = Mapping(gpus=gpus, tp=tp, cp=cp, pp=pp, ep=1, etp=tp, rank_order=order, gbs=1, seq_len=1)
    return cp_level_links(topology, grid, cp_levels)


def dispatch_link(links: Links, dispatcher: str, backend: str) -> GroupLink:
    """The link the EP exchange runs on: the EP group as DeepEP reaches it under the flex dispatcher with
    the deepep backend, else the EP group's own placement (Hybrid-EP uses the group's whole NVLink domain:
    DeepEP hybrid-ep@94a9f8f deep_ep/hybrid_ep_buffer.py:61-83, local ranks = the ranks it reaches over
    NVLink; NCCL all-to-all goes over NVLink wherever it can)."""
    return links.ep_deepep if dispatcher == "flex" and backend == "deepep" else links.ep


@lru_cache(maxsize=4096)
def grid_links(topology, gpus: int, tp: int, cp: int, pp: int, ep: int, etp: int,  # noqa: ANN001
               order: RankOrder) -> Links:
    """links_for on the grid sizes alone (no mapping to build: the search space lists rows by degrees)."""
    grid = Mapping(gpus=gpus, tp=tp, cp=cp, pp=pp, ep=ep, etp=etp, rank_order=order, gbs=1, seq_len=1)
    placed = [group_link(topology, grid, kind) for kind in ("tp", "cp", "ep", "pp", "dp_cp", "dp_expert")]
    return Links(*placed, ep_deepep=deepep_link(topology, placed[2], etp))


def tp_regions(model: ModelArchitecture, block: Block) -> int:
    """TP regions of a block: its mixer, and its dense MLP or shared experts; a parallel attention+MLP
    block sums both outputs before one reduction (one region)."""
    mlp = block.mlp is BlockKind.dense or (block.mlp is BlockKind.moe and bool(model.moe and model.moe.shared_width))
    regions = int(block.mixer is not Mixer.none) + int(mlp)
    if model.parallel_attention_mlp and regions == 2:
        return 1
    return regions


def tp_comm(model: ModelArchitecture, block: Block | None, tokens: float, tp_link: GroupLink, sp: bool) -> CommTerm:
    """TP collectives of one block's forward (or, for block None, the output head's input gather).

    With sequence parallelism each TP region is entered with an all-gather and left with a
    reduce-scatter of the b·S/CP × h activation; without it, one all-reduce per region. A dense
    block has two regions (attention, MLP); an MoE block has attention plus the shared experts."""
    if tp_link.size <= 1:
        return NO_COMM
    nbytes = tokens * model.hidden_size * BF16_BYTES
    if block is None:
        return all_gather(nbytes, tp_link) if sp else NO_COMM
    regions = tp_regions(model, block)
    if sp:
        return (all_gather(nbytes, tp_link) + reduce_scatter(nbytes, tp_link)).scaled(regions)
    return ring_all_reduce(nbytes, tp_link).scaled(regions)


def cp_comm(model: ModelArchitecture, block: Block, tokens: float, tp: int, cp_link: GroupLink,
            comm_type: str = "p2p", levels: tuple[GroupLink, ...] = ()) -> CommTerm:
    """CP exchange of one block's forward attention, by Megatron's --cp-comm-type: its ring part plus its
    blocking part (cp_parts)."""
    ring, blocking = cp_parts(model, block, tokens, tp, cp_link, comm_type, levels)
    return ring + blocking


def cp_parts(model: ModelArchitecture, block: Block, tokens: float, tp: int, cp_link: GroupLink,
             comm_type: str = "p2p", levels: tuple[GroupLink, ...] = ()) -> tuple[CommTerm, CommTerm]:
    """(ring part, blocking part) of the CP exchange of one block's forward attention, by Megatron's
    --cp-comm-type (Transformer Engine's context-parallel attention). Only a ring's steps run beside the
    attention of the chunk already held; TE's all-to-all waits for Q, K and V before the attention starts
    (flash_attn_a2a_communicate overlaps it with the chunk reordering only) and its KV all-gather completes
    before the first step (AttnFuncWithCPAndKVAllGather: gather_along_first_dim, then cp_stream waits on
    it), so those are blocking (context_parallel.py@d0067d0 :387-535, :3212-3238).

    GQA/MLA: p2p (ring attention): CP−1 steps, each passing the local K and V chunk (MLA: per-head keys
    and values after the up-projection); allgather: the K and V of the whole sequence gathered at once;
    a2a (DeepSpeed-Ulysses, arXiv 2309.14509 §3.1): Q, K and V all-to-all from sequence to head shards
    before the attention and its output back (cp_a2a_bytes; MLA's per-head queries and keys are
    qk_nope + qk_rope wide, its values and output v_head_dim, which TE's all-to-all attention takes as they
    are, :4216-4217); a2a+p2p with its two `levels`: hierarchical_cp_parts.

    DeepSeek-V4 hybrid attention, whatever the type (Megatron-LM dev@d48bd6be, its THD CP path): every
    block first receives from the previous CP rank the D_window = max(window, d_comp) hidden rows (BF16,
    hidden_size wide) left of its own and waits for them (cp_utils.py:124-202, exchange_cp_boundary_hidden):
    blocking. A CSA block (ratio 4) launches the all-gathers of its compressed index keys and KV
    asynchronously and waits only after its indexer projections and top-k (csa.py:2643-2751): priced as a
    ring's part (what hides behind the attention's compute, pricing.py). An HCA block gathers its
    compressed KV synchronously (csa.py:2752-2755): blocking."""
    cp = cp_link.size
    if cp <= 1:
        return NO_COMM, NO_COMM
    att = model.attention
    if isinstance(att, GQAAttention | MLAAttention):
        if isinstance(att, GQAAttention):
            width = 2 * max(att.num_kv_heads / tp, 1) * att.head_dim
        else:
            width = att.num_heads / tp * (att.qk_nope_head_dim + att.qk_rope_head_dim + att.v_head_dim)
        if comm_type == "allgather":
            return NO_COMM, all_gather(cp * tokens * width * BF16_BYTES, cp_link)
        if comm_type == "a2a":
            return NO_COMM, all_to_all(cp_a2a_bytes(att, tokens, tp), cp_link)
        if comm_type == "a2a+p2p" and len(levels) == 2:
            return hierarchical_cp_parts(att, tokens, tp, width, levels[0], levels[1])
        return point_to_point(tokens * width * BF16_BYTES, cp_link).scaled(cp - 1), NO_COMM
    assert isinstance(att, DSV4Attention)
    ratio = block.compress_ratio or 0
    rows = max(att.sliding_window, compression_window(ratio))
    halo = point_to_point(rows * model.hidden_size * BF16_BYTES, cp_link)
    if not ratio:
        return NO_COMM, halo
    if ratio == CSA_RATIO:
        return all_gather(cp * tokens / ratio * (att.head_dim + att.index_head_dim) * BF16_BYTES, cp_link), halo
    return NO_COMM, halo + all_gather(cp * tokens / ratio * att.head_dim * BF16_BYTES, cp_link)


def hierarchical_cp_parts(att: GQAAttention | MLAAttention, tokens: float, tp: int, width: float, a2a_link: GroupLink,
                          p2p_link: GroupLink) -> tuple[CommTerm, CommTerm]:
    """The a2a+p2p CP exchange (Transformer Engine's AttnFuncWithCPAndKVP2P with cp_group = [a2a, p2p]):
    Q, K and V all-to-all inside the level-1 group of size A, from `tokens` of every head to A·tokens of
    heads/A (and the output back), as a2a does (cp_a2a_bytes, on that group's links); then a ring over the
    level-2 group of size P = CP/A: P−1 steps, each passing the K and V of A·tokens for KV heads/A, the same
    bytes as one p2p step of the flat ring (TE transformer_engine/pytorch/attention/dot_product_attention/
    context_parallel.py@d0067d0 :1407-1419 send_dst/recv_src at stride A, 1486-1500 the a2a before the ring,
    2032-2040 the output's a2a after it). Returned as (ring, all-to-all): only the ring hides behind attention."""
    a2a = all_to_all(cp_a2a_bytes(att, tokens, tp), a2a_link)
    return point_to_point(tokens * width * BF16_BYTES, p2p_link).scaled(p2p_link.size - 1), a2a


def cp_a2a_bytes(att: GQAAttention | MLAAttention, tokens: float, tp: int) -> float:
    """Bytes a rank sends in the all-to-alls of one Ulysses attention forward: its `tokens` of Q (heads/TP),
    K and V (KV heads/TP each) and of the attention output (heads/TP), BF16 (arXiv 2309.14509 §3.1:
    4·N·h/P per rank for multi-head attention, N tokens, hidden h, P ranks). MLA's queries and keys are
    qk_nope + qk_rope wide per head, its values and output v_head_dim (one key and value per query head)."""
    heads = att.num_heads / tp
    if isinstance(att, MLAAttention):
        return tokens * heads * 2 * (att.head_dim + att.v_head_dim) * BF16_BYTES
    kv_heads = max(att.num_kv_heads / tp, 1)
    return tokens * (2 * heads + 2 * kv_heads) * att.head_dim * BF16_BYTES


def _linear_mixer_widths(model: ModelArchitecture, block: Block) -> tuple[int, int]:
    """(channels into the mixer's scan, channels out of it) of a Mamba-2 or gated DeltaNet block."""
    if block.mixer is Mixer.mamba:
        assert model.mamba is not None
        return model.mamba.conv_channels + model.mamba.num_heads, model.mamba.d_inner
    assert model.linear_attention is not None
    gdn = model.linear_attention
    return gdn.conv_channels + 2 * gdn.num_value_heads, gdn.value_width


def ep_comm(model: ModelArchitecture, tokens: float, tp: int, etp: int, ep_link: GroupLink, skew: float,
            dispatcher: str) -> CommTerm:
    """EP dispatch plus combine of one MoE block's forward, by Megatron token dispatcher, for the rank's
    T = b·S/(CP·TP) tokens (ETP copies each) of h BF16 values (the latent width under LatentMoE, which
    projects before the dispatch, moe_layer.py:488-491), the busiest rank receiving `skew`×:

    - alltoall: two all-to-alls of k·T·h values per rank;
    - flex (DeepEP, Hybrid-EP): two deduplicating hierarchical dispatches (constraints/physics/comm.py);
    - allgather: every rank gathers the whole EP group's T·h tokens and reduce-scatters the outputs."""
    moe = model.moe
    if moe is None or ep_link.size <= 1:
        return NO_COMM
    token_bytes = tokens / tp * etp * moe.expert_width(model.hidden_size) * BF16_BYTES * skew
    if dispatcher == "flex":
        return deduplicated_dispatch(token_bytes, moe.top_k, ep_link).scaled(2)
    if dispatcher == "allgather":
        gathered = token_bytes * ep_link.size
        return all_gather(gathered, ep_link) + reduce_scatter(gathered, ep_link)
    return all_to_all(moe.top_k * token_bytes, ep_link).scaled(2)


def pp_comm(model: ModelArchitecture, tokens: float, tp: int, sp: bool, pp_link: GroupLink) -> CommTerm:
    """One stage boundary per microbatch: the activation forward and its gradient backward (hc_mult streams)."""
    if pp_link.size <= 1:
        return NO_COMM
    sp_split = tp if sp and tp > 1 else 1
    nbytes = tokens / sp_split * model.hidden_size * model.hc_mult * BF16_BYTES
    return point_to_point(nbytes, pp_link).scaled(2)


def dp_comm(params: float, grad_bytes: float, link: GroupLink, distributed: bool,
            gathered_bytes: float) -> tuple[CommTerm, CommTerm]:
    """(gradient reduction, parameter gather) of `params` local parameters over a DP group per step:
    reduce-scatter + all-gather of their `gathered_bytes` (BF16, or FP8 for FP8 parameters) with the
    distributed optimizer, else one all-reduce."""
    if link.size <= 1 or params <= 0:
        return NO_COMM, NO_COMM
    if distributed:
        return reduce_scatter(params * grad_bytes, link), all_gather(gathered_bytes, link)
    return ring_all_reduce(params * grad_bytes, link), NO_COMM
