"""Model architecture as typed blocks: attention kind, dense MLP or MoE, norms, MTP and mHC.

A model is a sequence of blocks (one per main decoder layer) plus MTP blocks, embedding and head.
Each block says exactly what it holds, so "first 3 dense, then MoE" or V4's per-layer compression
ratios are represented as they are, and parameter counts, memory and FLOPs are computed per block.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from functools import cache, cached_property
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from parasol.errors import type_atoms, validation_input_error

MAX_NUMBER = 2**53
"""Largest magnitude any number in a schema object may have: no real size is larger, and beyond it
floating point loses whole numbers (so 1e30 GPUs or a 10**30-token sequence is an input error)."""


def _number_atoms(annotation: Any) -> frozenset[Any]:
    """The plain types a field or its list items may take (to tell numeric fields from the rest)."""
    atoms: set[Any] = set()
    for atom in type_atoms(annotation):
        atoms.add(atom)
        if get_origin(atom) in (list, tuple):
            for item in get_args(atom):
                atoms.update(type_atoms(item))
    return frozenset(atoms)


@cache
def _numeric_fields(cls: type[BaseModel]) -> dict[str, tuple[frozenset[Any], bool]]:
    """Fields of a schema class that hold numbers (or lists of numbers): the types they admit, and
    whether the field has its own upper bound (then that bound, not MAX_NUMBER, is reported)."""
    fields = {name: (_number_atoms(info.annotation), any(getattr(m, "le", None) is not None
                                                         or getattr(m, "lt", None) is not None for m in info.metadata))
              for name, info in cls.model_fields.items()}
    return {name: spec for name, spec in fields.items() if spec[0] & {int, float}}


def _number_error(value: Any, atoms: frozenset[Any], bounded: bool) -> PydanticCustomError | None:
    """True/false where only numbers belong (pydantic would read it as 1 or 0), or an absurd size."""
    if isinstance(value, bool):
        return None if bool in atoms else PydanticCustomError("bool_not_number", "true/false is not a number")
    if not bounded and isinstance(value, int | float) and math.isfinite(value) and abs(value) > MAX_NUMBER:
        return PydanticCustomError("number_too_large", "Input should be at most {limit} (no real size is larger)",
                                   {"limit": f"{MAX_NUMBER:,}"})
    return None


def _number_errors(cls: type[BaseModel], data: Mapping[str, Any]) -> list[InitErrorDetails]:
    """Every numeric field (or numeric list item) of `data` that holds true/false or an absurd size."""
    found: list[InitErrorDetails] = []
    for name, (atoms, bounded) in _numeric_fields(cls).items():
        value = data.get(name)
        items = [((name,), value)]
        if isinstance(value, list | tuple):
            items += [((name, i), item) for i, item in enumerate(value)]
        for loc, item in items:
            error = _number_error(item, atoms, bounded)
            if error is not None:
                found.append(InitErrorDetails(type=error, loc=loc, input=item))
    return found


class Strict(BaseModel):
    """Base for every schema object: unknown keys are errors, values are immutable, numbers are
    finite, not true/false, and at most MAX_NUMBER in magnitude."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _plain_numbers(cls, data: Any) -> Any:
        """Numeric fields (and the items of numeric lists) take real numbers only."""
        if isinstance(data, Mapping):
            errors = _number_errors(cls, data)
            if errors:
                raise ValidationError.from_exception_data(cls.__name__, errors)
        return data


class Activation(StrEnum):
    """MLP activation: gated ones (SwiGLU) have three matrices, the others two."""

    swiglu = "swiglu"
    geglu = "geglu"
    gelu = "gelu"
    relu = "relu"
    squared_relu = "squared_relu"

    @property
    def gated(self) -> bool:
        return self in (Activation.swiglu, Activation.geglu)

    @property
    def matrices(self) -> int:
        """Weight matrices of one MLP of this activation (up, [gate,] down)."""
        return 3 if self.gated else 2


class Norm(StrEnum):
    """Normalisation layer: RMSNorm has a weight, LayerNorm a weight and a bias."""

    rmsnorm = "rmsnorm"
    layernorm = "layernorm"

    @property
    def params_per_channel(self) -> int:
        return 1 if self is Norm.rmsnorm else 2


class GQAAttention(Strict):
    """Multi-head / grouped-query attention (MHA is num_kv_heads == num_heads)."""

    kind: Literal["gqa"] = "gqa"
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    qk_norm: bool = False
    bias: bool = False


class MLAAttention(Strict):
    """DeepSeek multi-head latent attention (V2/V3): low-rank query and joint KV compression."""

    kind: Literal["mla"] = "mla"
    num_heads: PositiveInt
    q_lora_rank: int | None = Field(default=None, ge=1)
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt

    @property
    def num_kv_heads(self) -> int:
        return self.num_heads

    @property
    def head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class DSV4Attention(Strict):
    """DeepSeek-V4 hybrid attention: sliding window plus compressed (CSA, ratio 4, with an indexer)
    or heavily compressed (HCA, ratio 128) KV; the ratio is per block, see Block.compress_ratio."""

    kind: Literal["dsv4_hybrid"] = "dsv4_hybrid"
    num_heads: PositiveInt
    head_dim: PositiveInt
    num_kv_heads: PositiveInt = 1
    q_lora_rank: PositiveInt
    o_groups: PositiveInt
    o_lora_rank: PositiveInt
    qk_rope_head_dim: PositiveInt
    sliding_window: PositiveInt = 128
    index_n_heads: PositiveInt
    index_head_dim: PositiveInt
    index_topk: PositiveInt
    compress_ratios: tuple[int, ...] = Field(
        description="one ratio per main block then per MTP block: 0 window only, 4 CSA, 128 HCA"
    )

    @model_validator(mode="after")
    def _ratios_known(self) -> DSV4Attention:
        bad = sorted({r for r in self.compress_ratios if r not in (0, 4, 128)})
        if bad:
            raise ValueError(f"compress_ratios may only hold 0, 4 or 128, found {bad}")
        if (self.num_heads * self.head_dim) % self.o_groups:
            raise ValueError("num_heads * head_dim must be a multiple of o_groups")
        return self


CSA_RATIO = 4
"""Compress ratio of V4's compressed sparse attention (CSA, with the indexer); 128 is HCA."""
CSA_COMPRESSED_WINDOW = 8
"""d_comp of CSA blocks: compressed rows a CP boundary exchange needs (cp_utils.py:191-202)."""


def compression_window(ratio: int) -> int:
    """d_comp of one compress ratio: 8 rows for CSA (ratio 4), the ratio itself above 1, else 0
    (cp_utils.py:191-202)."""
    if ratio == CSA_RATIO:
        return CSA_COMPRESSED_WINDOW
    return ratio if ratio > 1 else 0


def window_rows(attention: DSV4Attention) -> int:
    """D_window = max(csa_window_size, d_comp over every block's ratio) (cp_utils.py:191-202)."""
    return max(attention.sliding_window, *(compression_window(r) for r in attention.compress_ratios))


Attention = Annotated[GQAAttention | MLAAttention | DSV4Attention, Field(discriminator="kind")]


class DenseMLP(Strict):
    """A dense feed-forward block."""

    intermediate_size: PositiveInt
    activation: Activation = Activation.swiglu
    bias: bool = False


class MoE(Strict):
    """Routed experts (top-k of num_experts) plus optional always-on shared experts."""

    num_experts: PositiveInt
    top_k: PositiveInt
    expert_intermediate_size: PositiveInt
    num_shared_experts: int = Field(default=0, ge=0)
    shared_intermediate_size: int | None = Field(
        default=None, ge=1, description="total width of the shared experts; default num_shared x expert size"
    )
    activation: Activation = Activation.swiglu
    router_bias: bool = Field(default=False, description="per-expert score-correction bias (DeepSeek noaux_tc)")
    num_hash_layers: int = Field(
        default=0, ge=0, description="first MoE layers routed by a token-id hash table instead of a learned gate"
    )

    @field_validator("top_k")
    @classmethod
    def _topk_fits(cls, top_k: int, info: ValidationInfo) -> int:
        """A token is routed to top_k distinct experts, so there must be at least that many."""
        experts = info.data.get("num_experts")
        if experts is not None and top_k > experts:
            raise ValueError(f"top_k ({top_k}) cannot exceed num_experts ({experts})")
        return top_k

    @property
    def shared_width(self) -> int:
        """Intermediate width of all shared experts together."""
        if self.shared_intermediate_size is not None:
            return self.shared_intermediate_size
        return self.num_shared_experts * self.expert_intermediate_size


class BlockKind(StrEnum):
    dense = "dense"
    moe = "moe"


class Block(BaseModel):
    """One decoder block as placed in the pipeline: its position, MLP kind and V4 compression ratio."""

    model_config = ConfigDict(frozen=True)

    index: int
    mlp: BlockKind
    mtp: bool = False
    compress_ratio: int | None = None
    hash_routed: bool = False


class PublishedCounts(Strict):
    """The vendor's own rounded parameter figures and which convention they follow."""

    total: float | None = None
    active: float | None = None
    total_includes_mtp: bool = False
    active_convention: Literal["with_embedding_and_head", "head_only", "no_embedding"] = "with_embedding_and_head"
    source: str = ""


class ModelArchitecture(Strict):
    """A decoder-only LLM: embedding, blocks, final norm, output head and optional MTP blocks."""

    name: str
    hidden_size: PositiveInt
    vocab_size: PositiveInt
    num_layers: PositiveInt
    attention: Attention
    dense_mlp: DenseMLP | None = None
    moe: MoE | None = None
    first_dense_layers: int = Field(default=0, ge=0, description="leading blocks with a dense MLP in an MoE model")
    norm: Norm = Norm.rmsnorm
    tied_embeddings: bool = False
    learned_position_embeddings: int = Field(default=0, ge=0, description="rows of a learned position table")
    mtp_layers: int = Field(default=0, ge=0, description="multi-token-prediction blocks after the last block")
    hc_mult: PositiveInt = Field(default=1, description="mHC residual streams (V4: 4); 1 is a plain residual")
    max_context: int | None = Field(default=None, ge=1)
    published: PublishedCounts = PublishedCounts()
    notes: str = ""

    @field_validator("first_dense_layers")
    @classmethod
    def _dense_lead_in_fits(cls, first_dense_layers: int, info: ValidationInfo) -> int:
        """The dense lead-in is part of the block sequence, so it cannot be longer than it."""
        layers = info.data.get("num_layers")
        if layers is not None and first_dense_layers > layers:
            raise ValueError(f"first_dense_layers ({first_dense_layers}) exceeds num_layers ({layers})")
        return first_dense_layers

    @model_validator(mode="after")
    def _consistent(self) -> ModelArchitecture:
        if self.moe is None and self.dense_mlp is None:
            raise ValueError("a model needs dense_mlp, moe, or both")
        if self.moe is None and self.first_dense_layers:
            raise ValueError("first_dense_layers only applies to MoE models (set moe)")
        if self.moe is not None and self.first_dense_layers and self.dense_mlp is None:
            raise ValueError("first_dense_layers > 0 needs dense_mlp for those blocks")
        if isinstance(self.attention, DSV4Attention):
            need = self.num_layers + self.mtp_layers
            if len(self.attention.compress_ratios) < need:
                raise ValueError(
                    f"attention.compress_ratios has {len(self.attention.compress_ratios)} entries; "
                    f"needs one per block and MTP block ({need})"
                )
        if isinstance(self.attention, GQAAttention | DSV4Attention) and self.attention.num_heads < 1:
            raise ValueError("attention.num_heads must be positive")
        return self

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def _block(self, index: int, mtp: bool) -> Block:
        dense = self.moe is None or (not mtp and index < self.first_dense_layers)
        ratio = None
        if isinstance(self.attention, DSV4Attention):
            ratio = self.attention.compress_ratios[index]
        moe_index = index - self.first_dense_layers
        hashed = bool(self.moe and not dense and not mtp and moe_index < self.moe.num_hash_layers)
        return Block(
            index=index, mlp=BlockKind.dense if dense else BlockKind.moe, mtp=mtp,
            compress_ratio=ratio, hash_routed=hashed,
        )

    @cached_property
    def blocks(self) -> tuple[Block, ...]:
        """The main decoder blocks in order."""
        return tuple(self._block(i, mtp=False) for i in range(self.num_layers))

    @cached_property
    def mtp_blocks(self) -> tuple[Block, ...]:
        """MTP blocks (placed after the last main block, on the last pipeline stage)."""
        return tuple(self._block(self.num_layers + j, mtp=True) for j in range(self.mtp_layers))

    @property
    def num_moe_layers(self) -> int:
        return sum(b.mlp is BlockKind.moe for b in self.blocks)


def architecture_from_dict(data: dict, *, where: str = "model") -> ModelArchitecture:
    """Validate a plain mapping as an architecture, raising InputError that names the field
    (`where` is the dotted place of the mapping, e.g. `model`)."""
    try:
        return ModelArchitecture.model_validate(data)
    except ValidationError as exc:
        error = validation_input_error(exc, ModelArchitecture, data, prefix=tuple(where.split(".")))
        error.fix = f"{error.fix} Complete examples are in problems/catalog/."
        error.args = (error.render(),)
        raise error from None
