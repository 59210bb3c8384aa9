"""Which virtual stages of a cut may hold no block: the family of stage cuts the search covers.

Megatron's pipeline layout lets any virtual stage hold no decoder block
(megatron/core/transformer/pipeline_parallel_layer_layout.py: validate_layer_layout counts the blocks, the
embedding and the loss, never a stage's size). Engineers use it at the two ends of an interleaved pipeline:
the first virtual stage holding only the embedding and the last only the output layer and loss
(`E|(t|)*126,L`: Llama 3 405B, PP 16 with interleaving and one block fewer on the first and last stage,
arXiv:2407.21783 section 3.3.2), which lightens the ranks that carry those extras and lets PP·VPP reach the
block count plus two. The search covers that family wherever its exact cut searches can: interleaved rows
of a block sequence of one kind (dense models, MoE models whose every block is alike), where a rank's time
and memory depend only on its block count and any counts have a layout (interleaved.py's relaxation). Rows
whose sequence has several kinds (DeepSeek's dense lead-in, V4's attention kinds, hybrid patterns) and 1F1B
rows keep a block on every stage: their exact programs count pieces of at least one block.
"""

from __future__ import annotations

import numpy as np

EDGE_SLOTS = 2
"""Virtual stages that may hold no block in the covered family: the first (embedding) and the last (loss)."""


def open_edges(kinds: int, vpp: int) -> bool:
    """Whether a row's first and last virtual stage may hold no block: interleaved rows over a block
    sequence of `kinds` kinds, when it has one."""
    return vpp > 1 and kinds == 1


def most_stages(blocks: int, kinds: int, vpp: int) -> int:
    """The most virtual stages (PP·VPP) a row may cut `blocks` blocks of `kinds` kinds into."""
    return blocks + (EDGE_SLOTS if open_edges(kinds, vpp) else 0)


def least_piece(stage: int, stages: int, open_: bool) -> int:
    """The fewest blocks virtual stage `stage` of `stages` may hold: none at an open edge, else one."""
    return 0 if open_ and stage in (0, stages - 1) else 1


def least_rank_blocks(vpp: int, kinds: int, pp: int) -> int | np.ndarray:
    """The fewest blocks each pipeline rank holds in a covered cut of a sequence of `kinds` kinds: one per virtual
    stage (one number for every rank), one fewer on the first and last rank where their edge stage may be empty
    (then one per rank)."""
    if not open_edges(kinds, vpp):
        return vpp
    least = np.full(pp, vpp, dtype=np.int64)
    least[[0, -1]] = vpp - 1
    return least
