"""Which virtual stages of a cut may hold no block: the family of stage cuts the search covers.

Megatron's pipeline layout lets any virtual stage hold no decoder block
(megatron/core/transformer/pipeline_parallel_layer_layout.py: validate_layer_layout counts the blocks, the
embedding and the loss, never a stage's size). Engineers use it on the ranks that carry more than blocks: the
first pipeline rank holds the embedding, the last the output layer, the loss and any MTP blocks, and an
interleaved pipeline lightens them by leaving some of their virtual stages empty (`E|(t|)*126,L`: Llama 3 405B,
PP 16 interleaved with one block fewer on the first and last stage, arXiv:2407.21783 section 3.3.2; a
DeepSeek-V4-Pro cut at PP 16 VPP 4 on 61 blocks needs three empty stages, two on the last rank). The search
covers that family on every interleaved row: each virtual stage of the first and last pipeline rank may hold
no block, every other stage holds at least one, so PP·VPP may reach the block count plus 2·VPP. 1F1B rows
keep a block on every stage (an empty rank there idles a whole pipeline stage).

Why only the two edge ranks: the step-time model (constraints/physics/schedule.py) prices a rank's share of
the fill and drain as its time over VPP, which an empty chunk makes optimistic; on the edge ranks an empty
chunk only removes work from a rank that carries extras, whereas empty chunks on every rank would let a row
of many near-empty chunks look almost bubble-free.
"""

from __future__ import annotations

import numpy as np

EDGE_RANKS = 2
"""Pipeline ranks whose virtual stages may hold no block in the covered family: the first and the last."""


def open_stages(vpp: int) -> bool:
    """Whether a row's first and last pipeline rank may leave virtual stages empty: interleaved rows."""
    return vpp > 1


def edge_rank(rank: int, pp: int) -> bool:
    """Whether pipeline rank `rank` of `pp` is the first or the last."""
    return rank in (0, pp - 1)


def most_stages(blocks: int, vpp: int) -> int:
    """The most virtual stages (PP·VPP) a row may cut `blocks` blocks into: one block per stage, and on an
    interleaved row the edge ranks' VPP stages each may be empty besides."""
    return blocks + (EDGE_RANKS * vpp if open_stages(vpp) else 0)


def least_piece(stage: int, pp: int, open_: bool) -> int:
    """The fewest blocks virtual stage `stage` of a PP-rank pipeline may hold: none on an edge rank of an open
    row, else one."""
    return 0 if open_ and edge_rank(stage % pp, pp) else 1


def stage_least(pp: int, vpp: int) -> tuple[int, ...]:
    """The fewest blocks each of a row's PP·VPP virtual stages holds in the covered family (least_piece, stage by
    stage in layout order)."""
    return tuple(least_piece(k, pp, open_stages(vpp)) for k in range(pp * vpp))


def least_rank_blocks(vpp: int, pp: int) -> int | np.ndarray:
    """The fewest blocks each pipeline rank holds in a covered cut: one per virtual stage (one number for every
    rank), none on the first and last rank of an interleaved row (then one per rank)."""
    if not open_stages(vpp):
        return vpp
    least = np.full(pp, vpp, dtype=np.int64)
    least[[0, -1]] = 0
    return least


def evenest_cut(blocks: int, pp: int, vpp: int) -> tuple[int, ...]:
    """The evenest cut of the family with fewer blocks than virtual stages: a block on every stage that needs one
    and one on each of the edge ranks' stages nearest the middle (so the outermost, which the embedding and the
    loss hold, are the first left empty)."""
    least = stage_least(pp, vpp)
    stages = len(least)
    spare = blocks - sum(least)
    inner = sorted((k for k in range(stages) if least[k] == 0), key=lambda k: (-min(k, stages - 1 - k), k))
    filled = set(inner[:spare])
    return tuple(least[k] + (k in filled) for k in range(stages))
