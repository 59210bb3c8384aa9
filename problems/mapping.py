"""A fully specified parallel mapping: the values a user pins with `--set` or the solver returns."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, PositiveInt, field_validator

from parasol.problems.model.architecture import Strict

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

    gpus: PositiveInt
    tp: PositiveInt = 1
    pp: PositiveInt = 1
    cp: PositiveInt = 1
    ep: PositiveInt = 1
    etp: PositiveInt | None = None
    vpp: PositiveInt = 1
    mbs: PositiveInt = 1
    gbs: PositiveInt
    seq_len: PositiveInt
    recompute: Recompute = Recompute.none
    layout: tuple[int, ...] | None = Field(
        default=None, description="blocks per pipeline stage (pp*vpp entries, virtual stages in Megatron order)"
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
