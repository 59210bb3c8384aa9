"""MoE routing arithmetic: assignments, expert capacity, skewed expert loads, per-rank loads, capacity
padding and drops, fixed-size all-to-all bytes, and the EP compute/communication ratio.

Sources: seed 003 §4 (k·T assignments, k·T/E per expert, C = ⌈CF·k·T/E⌉, used share ≈ 1/CF, the
min/mean/p95/max load metrics, fixed-size whole-group all-to-all padding "amplified by at least CF")
and §6 (MegaScale-MoE's ratio 3·f·B_link/(b·F)); seed 000 §CP (k·T/E = 8,192 / 2,048). Megatron-LM
main@d98e8a64: capacity megatron/core/transformer/moe/moe_utils.py:248-266 (get_capacity), expert
placement megatron/core/transformer/moe/moe_layer.py:186-196 (local_expert_indices = ep_rank·E/EP + i),
drop-and-pad per source rank megatron/core/transformer/moe/token_dispatcher.py:517-540.

Pure functions over plain numbers; bad shapes raise ValueError with the offending value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, NamedTuple

SkewKind = Literal["uniform", "zipf", "histogram"]
P95 = Fraction(95, 100)
"""Percentile of LoadStats.p95, taken by nearest rank."""


def _require(ok: bool, message: str) -> None:
    """Raise ValueError(message) unless ok: every shape check of this module goes through here."""
    if not ok:
        raise ValueError(message)


def _check_routing(tokens: int, top_k: int, experts: int) -> None:
    """Tokens >= 0, 1 <= top_k <= experts: top-k picks k distinct experts out of E."""
    _require(tokens >= 0, f"tokens must be >= 0, got {tokens}")
    _require(experts >= 1, f"experts must be >= 1, got {experts}")
    _require(1 <= top_k <= experts, f"top_k must be in [1, experts={experts}], got {top_k}")


def assignments(tokens: int, top_k: int) -> int:
    """Token-expert assignments k·T of T routed tokens (seed 003 §4: 16 per token at top-16)."""
    _require(tokens >= 0 and top_k >= 1, f"need tokens >= 0 and top_k >= 1, got {tokens}, {top_k}")
    return top_k * tokens


def mean_assignments_per_expert(tokens: int, top_k: int, experts: int) -> Fraction:
    """Balanced load per expert k·T/E, exact (seed 003 §4: T/24 at k16/E384; seed 000: 8,192)."""
    _check_routing(tokens, top_k, experts)
    return Fraction(top_k * tokens, experts)


def expert_capacity(tokens: int, top_k: int, experts: int, capacity_factor: float) -> int:
    """C = ⌈CF·k·T/E⌉ slots per expert, in Megatron's own float order (moe_utils.py:248-266)."""
    _check_routing(tokens, top_k, experts)
    _require(math.isfinite(capacity_factor) and capacity_factor > 0,
             f"capacity_factor must be a finite number > 0, got {capacity_factor}")
    return math.ceil((tokens * top_k / experts) * capacity_factor)


@dataclass(frozen=True)
class SkewModel:
    """How assignments spread over experts: "uniform"; "zipf" with `exponent` s >= 0 over expert rank
    (expert 0 the most popular); "histogram" with measured `weights`, stored normalised to shares."""

    kind: SkewKind = "uniform"
    exponent: float | None = None
    weights: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        """Reject shapes that do not describe a distribution; normalise histogram weights to shares."""
        _require(self.kind in ("uniform", "zipf", "histogram"),
                 f"skew kind must be 'uniform', 'zipf' or 'histogram', got {self.kind!r}")
        _require(self.kind == "zipf" or self.exponent is None,
                 f"exponent is only for kind 'zipf', got exponent={self.exponent!r} with kind {self.kind!r}")
        _require(self.kind == "histogram" or not self.weights,
                 f"weights are only for kind 'histogram', got {self.weights!r} with kind {self.kind!r}")
        if self.kind == "zipf":
            exponent = _number(self.exponent, "zipf exponent")
            _require(exponent >= 0, f"zipf exponent must be >= 0, got {exponent}")
            object.__setattr__(self, "exponent", exponent)
        if self.kind == "histogram":
            _require(isinstance(self.weights, tuple | list) and len(self.weights) > 0,
                     f"histogram needs a list of one weight per expert, got {self.weights!r}")
            weights = tuple(_number(w, f"histogram weights[{i}]") for i, w in enumerate(self.weights))
            for i, w in enumerate(weights):
                _require(w >= 0, f"histogram weights must be >= 0, got weights[{i}] = {w}")
            total = math.fsum(weights)
            _require(total > 0, "histogram weights must not all be 0")
            object.__setattr__(self, "weights", tuple(w / total for w in weights))


def _number(value: object, what: str) -> float:
    """`value` as a finite float, or ValueError naming `what` (bools and strings are not numbers)."""
    _require(isinstance(value, int | float | Fraction) and not isinstance(value, bool),
             f"{what} must be a number, got {value!r}")
    number = float(value)
    _require(math.isfinite(number), f"{what} must be finite, got {value!r}")
    return number


def _zipf_log_shares(experts: int, exponent: float) -> list[float]:
    """Log of the unnormalised Zipf share 1/(rank+1)^s of expert ranks 0..E−1 (logs: no underflow)."""
    return [-exponent * math.log(rank + 1) for rank in range(experts)]


def _capped(total: float, log_shares: list[float], cap: float) -> list[float]:
    """Split `total` in proportion to exp(log_shares) with no part above `cap`: capped parts' excess goes
    to the others in proportion to their shares, repeated until none exceeds (water-filling; needs
    len·cap >= total). Shares are taken relative to the largest free one, so the split never divides by 0."""
    capped: set[int] = set()
    while True:
        free = [i for i in range(len(log_shares)) if i not in capped]
        rest = total - cap * len(capped)
        top = max((log_shares[i] for i in free), default=0.0)
        relative = {i: math.exp(log_shares[i] - top) for i in free}
        weight = math.fsum(relative.values())
        loads = [cap if i in capped else rest * relative[i] / weight for i in range(len(log_shares))]
        over = {i for i in free if loads[i] > cap}
        if not over:
            return loads
        capped |= over


def expert_loads(tokens: int, top_k: int, experts: int, skew: SkewModel) -> tuple[float, ...]:
    """Expected assignments per expert, summing to k·T.

    uniform: k·T/E each. zipf(s): expert i gets a share ∝ 1/(i+1)^s (expert 0 the most popular; s = 0
    is uniform). Top-k routing picks k distinct experts per token (no replacement), so one expert gets
    at most one assignment per token: at most T assignments, a share of at most 1/k. Zipf shares above
    that cap are clipped to T and the excess is redistributed to the other experts in proportion to
    their shares, until none exceeds T. histogram: the measured shares times k·T; it must have E
    entries, and a share above 1/k is rejected as impossible under top-k routing.
    """
    _check_routing(tokens, top_k, experts)
    total = float(assignments(tokens, top_k))
    if skew.kind == "uniform":
        return tuple(total / experts for _ in range(experts))
    if skew.kind == "zipf":
        return tuple(_capped(total, _zipf_log_shares(experts, skew.exponent), float(tokens)))
    _require(len(skew.weights) == experts,
             f"histogram has {len(skew.weights)} weights but the model has {experts} experts")
    hot = max(range(experts), key=lambda i: skew.weights[i])
    _require(skew.weights[hot] <= (1 + 1e-9) / top_k,
             f"histogram share of expert {hot} is {skew.weights[hot]:.4f} > 1/k = {1 / top_k:.4f}: "
             f"top-{top_k} routing sends an expert at most one assignment per token")
    return tuple(total * share for share in skew.weights)


@dataclass(frozen=True)
class LoadStats:
    """Seed 003 §4's routing metrics over experts (or ranks): min, mean, p95 (nearest rank: the
    ⌈0.95·n⌉-th smallest), max, the hottest index (lowest index on ties) and imbalance = max/mean."""

    min: float
    mean: float
    p95: float
    max: float
    hot_expert: int
    imbalance: float


def load_stats(loads: tuple[float, ...]) -> LoadStats:
    """Min, mean, nearest-rank p95, max, hottest index and max/mean of a load vector."""
    _require(len(loads) > 0, "loads must not be empty")
    _require(all(load >= 0 for load in loads), f"loads must be >= 0, got min {min(loads)}")
    mean = math.fsum(loads) / len(loads)
    _require(mean > 0, "loads must have a positive total")
    ordered = sorted(loads)
    hot = max(range(len(loads)), key=lambda i: (loads[i], -i))
    return LoadStats(min=ordered[0], mean=mean, p95=ordered[math.ceil(P95 * len(loads)) - 1],
                     max=ordered[-1], hot_expert=hot, imbalance=ordered[-1] / mean)


def rank_loads(loads: tuple[float, ...], ep: int) -> tuple[float, ...]:
    """Assignments each EP rank receives: rank r holds experts [r·E/EP, (r+1)·E/EP), contiguously,
    as Megatron places them (moe_layer.py:186-196: local_expert_indices = ep_rank·E/EP + i)."""
    experts = len(loads)
    _require(ep >= 1 and experts % ep == 0,
             f"EP must be >= 1 and divide the {experts} experts (Megatron asserts it), got EP {ep}")
    local = experts // ep
    return tuple(math.fsum(loads[r * local:(r + 1) * local]) for r in range(ep))


class HotRank(NamedTuple):
    """The EP rank that receives the most assignments, its load, and its load over the mean rank's."""

    rank: int
    load: float
    imbalance: float


def hot_rank(loads: tuple[float, ...], ep: int) -> HotRank:
    """The hottest EP rank under Megatron's contiguous placement (lowest rank on ties)."""
    stats = load_stats(rank_loads(loads, ep))
    return HotRank(stats.hot_expert, stats.max, stats.imbalance)


@dataclass(frozen=True)
class CapacityOutcome:
    """What fixed capacity C does to a load vector (seed 003 §4): E·C slots, the slots real assignments
    use, the assignments beyond C that are dropped, and the slots left as padding."""

    slots: int
    assignments: float
    used_slots: float
    used_share: float
    dropped: float
    drop_rate: float
    padded_slots: float


def capacity_outcome(loads: tuple[float, ...], capacity: int) -> CapacityOutcome:
    """Slots E·C, used Σmin(load, C), dropped Σmax(load − C, 0), padding E·C − used."""
    _require(len(loads) > 0, "loads must not be empty")
    _require(capacity >= 1, f"capacity must be >= 1 slot per expert, got {capacity}")
    slots = len(loads) * capacity
    total = math.fsum(loads)
    used = math.fsum(min(load, capacity) for load in loads)
    dropped = math.fsum(max(load - capacity, 0.0) for load in loads)
    return CapacityOutcome(slots=slots, assignments=total, used_slots=used, used_share=used / slots,
                           dropped=dropped, drop_rate=dropped / total if total else 0.0,
                           padded_slots=slots - used)


@dataclass(frozen=True)
class FixedSizeAllToAll:
    """One EP rank's dispatch under a fixed-size whole-group all-to-all; combine sends the same again.
    Byte counts cover all EP chunks, the rank's own included (as the ideal payload counts assignments
    to local experts); `off_rank_bytes` is the part that leaves the rank."""

    ep: int
    local_experts: int
    capacity_per_source: int
    slots_per_peer: int
    per_peer_bytes: float
    ideal_bytes: float
    padded_bytes: float
    padding_bytes: float
    off_rank_bytes: float
    amplification: float
    dispatch_combine_bytes: float
    ideal_dispatch_combine_bytes: float


def fixed_size_all_to_all(tokens_per_rank: int, top_k: int, experts: int, ep: int, capacity_factor: float,
                          hidden: int, bytes_per_element: float, per_peer_rounding: int = 1) -> FixedSizeAllToAll:
    """Bytes one EP rank sends per dispatch when the collective only moves fixed-size buffers.

    Per-source capacity: each source rank sizes its buffer from its own T_rank tokens, C_src =
    ⌈CF·k·T_rank/E⌉ slots per expert, as Megatron's drop-and-pad dispatcher does from the local routing
    map (token_dispatcher.py:517-540); a fixed buffer cannot depend on the other sources' routing. The
    alternative not taken: a group capacity ⌈CF·k·EP·T_rank/E⌉ per expert split over the EP sources
    (⌈C_group/EP⌉ each), which differs only in rounding. Every peer gets local·C_src slots (local =
    E/EP experts), rounded up to a multiple of `per_peer_rounding`; each slot is one h-wide row of b
    bytes. Amplification = padded/ideal >= CF, equal when routing is balanced, the rounding is 1 and
    CF·k·T_rank/E is whole. Ideal = k·T_rank·h·b (seed 003 §4).
    """
    _require(ep >= 1 and experts % ep == 0, f"EP must be >= 1 and divide the {experts} experts, got EP {ep}")
    _require(tokens_per_rank >= 1, f"tokens_per_rank must be >= 1, got {tokens_per_rank}")
    _require(hidden >= 1 and bytes_per_element > 0,
             f"hidden and bytes_per_element must be > 0, got {hidden}, {bytes_per_element}")
    _require(per_peer_rounding >= 1, f"per_peer_rounding must be >= 1 slot, got {per_peer_rounding}")
    local = experts // ep
    capacity = expert_capacity(tokens_per_rank, top_k, experts, capacity_factor)
    slots = -(-local * capacity // per_peer_rounding) * per_peer_rounding
    row = hidden * bytes_per_element
    ideal = assignments(tokens_per_rank, top_k) * row
    padded = ep * slots * row
    return FixedSizeAllToAll(
        ep=ep, local_experts=local, capacity_per_source=capacity, slots_per_peer=slots,
        per_peer_bytes=slots * row, ideal_bytes=ideal, padded_bytes=padded, padding_bytes=padded - ideal,
        off_rank_bytes=(ep - 1) * slots * row, amplification=padded / ideal,
        dispatch_combine_bytes=2 * padded, ideal_dispatch_combine_bytes=2 * ideal)


def swiglu_expert_flops(hidden: int, expert_intermediate: int) -> int:
    """Forward FLOPs of one assignment through a SwiGLU expert: three h×f matmuls, 6·h·f (seed 003 §6)."""
    return 6 * hidden * expert_intermediate


def dispatch_combine_bytes(hidden: int, bytes_per_element: float) -> float:
    """Forward bytes of one assignment over EP: one dispatch and one combine row, 2·h·b (seed 003 §6)."""
    return 2 * hidden * bytes_per_element


def ep_compute_comm_ratio(expert_intermediate: int, link_bytes_per_s: float, bytes_per_element: float,
                          flops_per_s: float) -> float:
    """Forward expert compute time over EP all-to-all time, 3·f·B_link/(b·F) (MegaScale-MoE, seed 003
    §6): per assignment 6·h·f FLOPs at F against 2·h·b bytes at B_link, so h cancels and E, k and the
    batch do not enter. Pass effective (measured) link bandwidth and compute throughput at the same
    precision, not vendor peaks: > 1 means expert compute can hide the all-to-all, < 1 means it cannot."""
    _require(expert_intermediate >= 1, f"expert_intermediate must be >= 1, got {expert_intermediate}")
    _require(link_bytes_per_s > 0 and bytes_per_element > 0 and flops_per_s > 0,
             f"link bandwidth, bytes per element and FLOP/s must be > 0, got {link_bytes_per_s}, "
             f"{bytes_per_element}, {flops_per_s}")
    return 3 * expert_intermediate * link_bytes_per_s / (bytes_per_element * flops_per_s)
