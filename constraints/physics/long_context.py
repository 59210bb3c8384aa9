"""Long-context formulas (seed 003 §5): a real 128k sequence, its per-rank shares under CP, the KV
state, and exposed CP communication as a share of the step.

Seed 003 §5: S = 131,072 tokens is not "a slightly longer sequence"; a batch of short sequences with
the same token count does not stand for one; attention compute still grows with S² under flash
attention; one layer's BF16 KV cache of one sequence is 2·n_kv·d_head·S·2 B; CP divides the local
sequence (S/CP) but its communication must be measured and bounded, exposed CP ≤ α·step time.
"""

from __future__ import annotations

from parasol.constraints.physics.dtypes import BF16_BYTES


def local_sequence(seq_len: int, cp: int) -> float:
    """Tokens of one sequence each CP rank holds, S/CP (seed 003 §5)."""
    return seq_len / cp


def kv_bytes_per_layer(seq_len: float, kv_heads: int, head_dim: int, bytes_per_element: int = BF16_BYTES) -> float:
    """K and V of one sequence in one layer, 2·n_kv·d_head·S·b (seed 003 §5; 128k, 8 KV heads of 128:
    512 MiB)."""
    return 2 * kv_heads * head_dim * seq_len * bytes_per_element


def kv_bytes_per_rank_layer(seq_len: int, cp: int, tp: int, kv_heads: int, head_dim: int) -> float:
    """One rank's K and V of one layer for one microbatch sequence: S/CP tokens, KV heads split over TP
    (replicated when TP exceeds them)."""
    heads = max(kv_heads // tp, 1)
    return kv_bytes_per_layer(local_sequence(seq_len, cp), heads, head_dim)


def causal_attention_pairs(seq_len: int) -> float:
    """Query-key pairs of causal attention over one sequence, S·(S+1)/2: quadratic in S whatever the
    kernel (seed 003 §5: flash attention removes the score storage, not the S² work)."""
    return seq_len * (seq_len + 1) / 2


def is_real_long_sequence(seq_len: int, target_context: int | None, packed: bool) -> bool:
    """Whether the run trains on real sequences of the target context: S reaches the model's maximum
    context and the input is not a pack of shorter documents (seed 003 §5)."""
    return target_context is not None and seq_len >= target_context and not packed


def exposed_share(exposed_s: float, step_s: float) -> float:
    """Exposed seconds over the step (seed 003 §5: exposed CP / step ≤ α)."""
    return exposed_s / step_s if step_s > 0 else 0.0


def step_floor_for_share(exposed_s: float, max_share: float) -> float:
    """Smallest step time at which `exposed_s` is at most `max_share` of it: exposed / α."""
    return exposed_s / max_share
