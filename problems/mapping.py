"""A fully specified parallel mapping: the values a user pins with `--set` or the solver returns."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator

from parasol.bounds import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_LAYERS, MAX_MICRO_BATCH, MAX_SEQ_LEN
from parasol.problems.model.architecture import Strict

GpuCount = Annotated[int, Field(ge=1, le=MAX_GPUS)]
"""A GPU count or a parallel degree (TP, PP, CP, EP, ETP): 1 .. MAX_GPUS."""
LayerCount = Annotated[int, Field(ge=1, le=MAX_LAYERS)]
"""A count of blocks or virtual stages: 1 .. MAX_LAYERS."""
MicroBatch = Annotated[int, Field(ge=1, le=MAX_MICRO_BATCH)]
GlobalBatch = Annotated[int, Field(ge=1, le=MAX_GLOBAL_BATCH)]
SeqLen = Annotated[int, Field(ge=1, le=MAX_SEQ_LEN)]

DEGREES = ("tp", "pp", "cp", "ep", "etp", "vpp", "mbs")
"""The parallel degrees and the micro-batch size: what a search row fixes and every rule reads."""
MAPPING_KEYS = ("gpus", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "gbs", "seq_len", "recompute", "layout",
                "rank_order")


class Recompute(StrEnum):
    """Activation recomputation granularity (Megatron --recompute-granularity, plus none)."""

    none = "none"
    selective = "selective"
    full = "full"


class RankOrder(StrEnum):
    """Megatron's rank order (leftmost varies fastest): the default keeps PP outermost; with
    --use-tp-pp-dp-mapping PP moves inside DP (megatron-groups.md §1.2; initialize.py:395)."""

    pp_last = "tp-cp-ep-dp-pp"
    dp_last = "tp-cp-ep-pp-dp"


class Mapping(Strict):
    """One parallel configuration. `etp` None means Megatron's default ETP := TP; `layout` None means
    the default split of the blocks over the pipeline stages (see derived.default_layout); `rank_order`
    is the placement of the groups on the GPUs."""

    gpus: GpuCount
    tp: GpuCount = 1
    pp: GpuCount = 1
    cp: GpuCount = 1
    ep: GpuCount = 1
    etp: GpuCount | None = None
    vpp: LayerCount = 1
    mbs: MicroBatch = 1
    gbs: GlobalBatch
    seq_len: SeqLen
    recompute: Recompute = Recompute.none
    layout: tuple[Annotated[int, Field(le=MAX_LAYERS)], ...] | None = Field(
        default=None, max_length=MAX_LAYERS,
        description="blocks per pipeline stage (pp*vpp entries, virtual stages in Megatron order)"
    )
    rank_order: RankOrder = Field(default=RankOrder.pp_last,
                                  description="how ranks map to groups, hence which groups share a node")

    @field_validator("layout")
    @classmethod
    def _layout_nonnegative(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is not None and any(n < 0 for n in value):
            raise ValueError("stage layer counts must be >= 0")
        return value

    @property
    def expert_tp(self) -> int:
        """Expert tensor parallelism actually used (ETP defaults to TP, Megatron arguments.py:587-588)."""
        return self.tp if self.etp is None else self.etp

    def as_dict(self) -> dict:
        """The mapping keys of the BRIEF's JSON contract, with `layout` as a list."""
        data = self.model_dump(mode="json")
        data["etp"] = self.expert_tp
        return data
