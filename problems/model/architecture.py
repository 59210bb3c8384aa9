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
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from parasol.bounds import MAX_EXPERTS, MAX_LAYERS, MAX_SEQ_LEN, MAX_VOCAB, MAX_WIDTH
from parasol.errors import type_atoms, validation_input_error

MAX_NUMBER = 2**53
"""Largest magnitude any number in a schema object may have: no real size is larger, and beyond it
floating point loses whole numbers (so 1e30 GPUs or a 10**30-token sequence is an input error)."""
MAX_HC_STREAMS = 64
"""Most mHC residual streams (V4 uses 4)."""

Width = Annotated[int, Field(ge=1, le=MAX_WIDTH)]
"""A hidden, FFN, head or rank size, or a head count: 1 .. MAX_WIDTH."""
Experts = Annotated[int, Field(ge=1, le=MAX_EXPERTS)]
"""A count of experts: 1 .. MAX_EXPERTS."""
Layers = Annotated[int, Field(ge=1, le=MAX_LAYERS)]
"""A count of blocks: 1 .. MAX_LAYERS."""
Vocab = Annotated[int, Field(ge=1, le=MAX_VOCAB)]
"""A vocabulary size: 1 .. MAX_VOCAB."""


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


def _plain_whole(value: Any, bounded: bool) -> bool:
    """A whole number (not true/false) _number_error has nothing to say about: checked first, as most are."""
    return type(value) is int and (bounded or abs(value) <= MAX_NUMBER)


def _number_errors(cls: type[BaseModel], data: Mapping[str, Any]) -> list[InitErrorDetails]:
    """Every numeric field (or numeric list item) of `data` that holds true/false or an absurd size."""
    found: list[InitErrorDetails] = []
    for name, (atoms, bounded) in _numeric_fields(cls).items():
        value = data.get(name)
        if value is None or _plain_whole(value, bounded) or (
                isinstance(value, list | tuple) and all(_plain_whole(item, bounded) for item in value)):
            continue
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
    """Multi-head / grouped-query attention (MHA is num_kv_heads == num_heads), optionally local.

    Sliding-window (local) attention follows Megatron's two settings (transformer_config.py:247-254):
    `sliding_window` keys per query (the query included; Mistral 7B 4096, Gemma 2 4096), and
    `window_skip_freq`, which layers stay global: an int N makes every N-th layer (1-based) full attention,
    (N−1) local then 1 global (utils.py:531-545 is_layer_window_attention); a list gives 1 (local) or 0
    (global) per layer; unset with a window, every layer is local."""

    kind: Literal["gqa"] = "gqa"
    num_heads: Width
    num_kv_heads: Width
    head_dim: Width
    qk_norm: bool = False
    bias: bool = Field(default=False, description="biases on the Q, K, V and output projections (Megatron's "
                                                  "add_bias_linear)")
    qkv_bias: bool = Field(default=False, description="biases on the Q, K and V projections alone (Qwen2; Megatron "
                                                      "--add-qkv-bias, transformer_config.py add_qkv_bias)")
    sliding_window: int | None = Field(default=None, ge=1, le=MAX_WIDTH, description="keys a local-attention query sees")
    window_skip_freq: int | tuple[int, ...] | None = Field(
        default=None, description="global layers among local ones: every N-th, or 1 local / 0 global per layer")
    output_gate: bool = Field(
        default=False, description="a sigmoid gate on the attention output, projected with the queries "
                                   "(Qwen3-Next; Megatron --attention-output-gate, transformer_config.py:278)")

    @model_validator(mode="after")
    def _groups_divide_heads(self) -> GQAAttention:
        freq = self.window_skip_freq
        if freq is not None and self.sliding_window is None:
            raise ValueError("window_skip_freq needs sliding_window (the local layers' window)")
        if isinstance(freq, int) and not 1 <= freq <= MAX_LAYERS:
            raise ValueError(f"window_skip_freq ({freq}) must be from 1 to {MAX_LAYERS}")
        if isinstance(freq, tuple) and (len(freq) > MAX_LAYERS or any(v not in (0, 1) for v in freq)):
            raise ValueError("window_skip_freq as a list holds 1 (local) or 0 (global) per layer")
        return self

    def window_of(self, index: int) -> int | None:
        """The window of 0-based layer `index`, None when it attends globally (utils.py:531-545)."""
        freq = self.window_skip_freq
        if self.sliding_window is None:
            return None
        if freq is None:
            return self.sliding_window
        if isinstance(freq, int):
            return None if (index + 1) % freq == 0 else self.sliding_window
        return self.sliding_window if index < len(freq) and freq[index] else None


class DSAIndexer(Strict):
    """DeepSeek sparse attention's lightning indexer (DeepSeek-V3.2; Megatron-LM's --experimental-attention-variant
    dsa, dsa.py:1090-1203): every query scores the tokens before it with `n_heads` heads of `head_dim` and attends
    only its `topk` best."""

    n_heads: Width
    head_dim: Width
    topk: Width


class MLAAttention(Strict):
    """DeepSeek multi-head latent attention (V2/V3): low-rank query and joint KV compression; with an `indexer`, DSA
    (V3.2)."""

    kind: Literal["mla"] = "mla"
    num_heads: Width
    q_lora_rank: int | None = Field(default=None, ge=1, le=MAX_WIDTH)
    kv_lora_rank: Width
    qk_nope_head_dim: Width
    qk_rope_head_dim: Width
    v_head_dim: Width
    indexer: DSAIndexer | None = Field(default=None, description="DSA's lightning indexer (DeepSeek-V3.2); none: "
                                                                  "dense MLA")

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
    num_heads: Width
    head_dim: Width
    num_kv_heads: Width = 1
    q_lora_rank: Width
    o_groups: Width
    o_lora_rank: Width
    qk_rope_head_dim: Width
    sliding_window: Width = 128
    index_n_heads: Width
    index_head_dim: Width
    index_topk: Width
    compress_ratios: tuple[int, ...] = Field(
        max_length=2 * MAX_LAYERS, description="one ratio per main block then per MTP block: 0 window only, 4 CSA, 128 HCA"
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


class MambaMixer(Strict):
    """Mamba-2 (SSD) mixer of a hybrid model (Dao & Gu 2024; Megatron mamba_mixer.py:139-460): in_proj to
    z, x (d_inner each), B, C (groups × state each) and dt (one per head), a depthwise causal conv over
    x, B, C, the chunked state-space scan, a gated RMSNorm over d_inner, out_proj back to hidden."""

    num_heads: Width
    head_dim: Width = 64
    state_size: Width = 128
    num_groups: Width = 8
    conv_kernel: Width = 4

    @model_validator(mode="after")
    def _groups_divide_heads(self) -> MambaMixer:
        if self.num_heads % self.num_groups:
            raise ValueError(f"mamba num_heads ({self.num_heads}) must be a multiple of num_groups "
                             f"({self.num_groups}) (mamba_mixer.py:274)")
        return self

    @property
    def d_inner(self) -> int:
        """Inner width: heads × head dim (mamba_mixer.py:246-248)."""
        return self.num_heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the causal conv: x, B and C (mamba_mixer.py:321)."""
        return self.d_inner + 2 * self.num_groups * self.state_size


class GatedDeltaNet(Strict):
    """Gated DeltaNet linear attention (Yang et al. 2024; Qwen3-Next; Megatron ssm/gated_delta_net/common.py:
    181-290): in_proj to q, k (key heads × key dim), v, z (value heads × value dim) and beta, alpha (one per
    value head), a depthwise conv over q, k, v, the delta-rule recurrence on a key×value state per value
    head, a gated RMSNorm per value head, out_proj back to hidden."""

    num_key_heads: Width
    num_value_heads: Width
    key_head_dim: Width = 128
    value_head_dim: Width = 128
    conv_kernel: Width = 4
    conv_bias: bool = False

    @property
    def key_width(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_width(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the causal conv: q, k and v (common.py:227)."""
        return 2 * self.key_width + self.value_width


class DenseMLP(Strict):
    """A dense feed-forward block."""

    intermediate_size: Width
    activation: Activation = Activation.swiglu
    bias: bool = False


class MoE(Strict):
    """Routed experts (top-k of num_experts) plus optional always-on shared experts."""

    num_experts: Experts
    top_k: Experts
    expert_intermediate_size: Width
    num_shared_experts: int = Field(default=0, ge=0, le=MAX_EXPERTS)
    shared_intermediate_size: int | None = Field(
        default=None, ge=1, le=MAX_WIDTH, description="total width of the shared experts; default num_shared x expert size"
    )
    activation: Activation = Activation.swiglu
    router_bias: bool = Field(default=False, description="per-expert score-correction bias (DeepSeek noaux_tc)")
    num_hash_layers: int = Field(
        default=0, ge=0, le=MAX_LAYERS, description="first MoE layers routed by a token-id hash table instead of a learned gate"
    )
    shared_expert_gate: bool = Field(
        default=False, description="a sigmoid gate h→1 scales the shared expert's output (Megatron "
                                   "--moe-shared-expert-gate, shared_experts.py:136-145,203-206; Qwen3-Next)")
    latent_size: int | None = Field(
        default=None, ge=1, le=MAX_WIDTH, description="LatentMoE: routed experts run on this width between a down and an up "
                                        "projection (Megatron --moe-latent-size, moe_layer.py:265-303)")

    @field_validator("top_k")
    @classmethod
    def _topk_fits(cls, top_k: int, info: ValidationInfo) -> int:
        """A token is routed to top_k distinct experts, so there must be at least that many."""
        experts = info.data.get("num_experts")
        if experts is not None and top_k > experts:
            raise ValueError(f"top_k ({top_k}) cannot exceed num_experts ({experts})")
        return top_k

    def expert_width(self, hidden: int) -> int:
        """Width the routed experts read and write: the latent size under LatentMoE, else the hidden size."""
        return self.latent_size or hidden

    @property
    def shared_width(self) -> int:
        """Intermediate width of all shared experts together."""
        if self.shared_intermediate_size is not None:
            return self.shared_intermediate_size
        return self.num_shared_experts * self.expert_intermediate_size


class BlockKind(StrEnum):
    dense = "dense"
    moe = "moe"
    none = "none"
    """No MLP: a hybrid model's mixer-only layer (Megatron hybrid pattern M, G or *)."""


class Mixer(StrEnum):
    """What mixes tokens in a block: softmax attention, a Mamba-2 SSM, gated DeltaNet, or nothing (an
    MLP-only layer of a hybrid model)."""

    attention = "attention"
    mamba = "mamba"
    gdn = "gdn"
    none = "none"


PATTERN_SYMBOLS: dict[str, tuple[Mixer, BlockKind]] = {
    "M": (Mixer.mamba, BlockKind.none),
    "G": (Mixer.gdn, BlockKind.none),
    "*": (Mixer.attention, BlockKind.none),
    "-": (Mixer.none, BlockKind.dense),
    "E": (Mixer.none, BlockKind.moe),
}
"""Megatron hybrid-pattern symbols, one layer each (hybrid_layer_allocation.py:14-25: M Mamba, G gated
DeltaNet, * attention, - MLP, E MoE)."""


class Block(BaseModel):
    """One decoder block as placed in the pipeline: its position, mixer, MLP kind, attention window and V4
    compression ratio."""

    model_config = ConfigDict(frozen=True)

    index: int
    mlp: BlockKind
    mtp: bool = False
    compress_ratio: int | None = None
    hash_routed: bool = False
    mixer: Mixer = Mixer.attention
    window: int | None = None
    """Keys a query of this block's attention sees under sliding-window attention; None is global."""

    @property
    def sublayers(self) -> int:
        """Pre-normed sublayers: the mixer and the MLP each (a hybrid layer has one)."""
        return int(self.mixer is not Mixer.none) + int(self.mlp is not BlockKind.none)


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
    hidden_size: Width
    vocab_size: Vocab
    num_layers: Layers
    attention: Attention
    dense_mlp: DenseMLP | None = None
    moe: MoE | None = None
    first_dense_layers: int = Field(default=0, ge=0, le=MAX_LAYERS, description="leading blocks with a dense MLP in an MoE model")
    norm: Norm = Norm.rmsnorm
    tied_embeddings: bool = False
    learned_position_embeddings: int = Field(default=0, ge=0, le=MAX_SEQ_LEN, description="rows of a learned position table")
    mtp_layers: int = Field(default=0, ge=0, le=MAX_LAYERS, description="multi-token-prediction blocks after the last block")
    mtp_repeated: bool = Field(
        default=False, description="one MTP block's weights run at every depth (Megatron --mtp-use-repeated-layer, "
                                   "transformer_config.py:82; gpt_layer_specs.py:779-782 builds one layer spec)")
    hc_mult: int = Field(default=1, ge=1, le=MAX_HC_STREAMS, description="mHC residual streams (V4: 4); 1 is a plain residual")
    layer_pattern: str | None = Field(
        default=None, description="hybrid model, one layer per symbol (Megatron --hybrid-layer-pattern): M Mamba-2, "
                                  "G gated DeltaNet, * attention, - dense MLP, E MoE; num_layers is its length")
    mamba: MambaMixer | None = None
    linear_attention: GatedDeltaNet | None = None
    linear_attention_freq: int | tuple[int, ...] | None = Field(
        default=None, description="which attention+MLP blocks use linear_attention: every block but each N-th "
                                  "(1-based), or 1 (linear) / 0 (softmax) per block (Megatron "
                                  "--linear-attention-freq, experimental_attention_variant_module_specs.py:459-476)")
    parallel_attention_mlp: bool = Field(
        default=False, description="attention and MLP read the same normed input and their outputs are summed "
                                   "(GPT-J, PaLM, Command R): one norm and one TP reduction per block")
    max_context: int | None = Field(default=None, ge=1, le=MAX_NUMBER)
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
        self._check_mixers()
        return self

    def _check_mixers(self) -> None:
        """A hybrid pattern or linear-attention schedule must match the layers and name defined mixers."""
        if self.layer_pattern is not None:
            self._check_pattern(self.layer_pattern)
        freq = self.linear_attention_freq
        if freq is not None:
            if self.linear_attention is None:
                raise ValueError("linear_attention_freq needs linear_attention (the gated DeltaNet's shape)")
            if self.layer_pattern is not None:
                raise ValueError("give linear layers either in layer_pattern (G) or by linear_attention_freq")
            if isinstance(freq, int) and not 1 <= freq <= MAX_LAYERS:
                raise ValueError(f"linear_attention_freq ({freq}) must be from 1 to {MAX_LAYERS}")
            if isinstance(freq, tuple) and (len(freq) != self.num_layers or any(v not in (0, 1) for v in freq)):
                raise ValueError(f"linear_attention_freq as a list needs one 0/1 per layer ({self.num_layers})")
        if self.parallel_attention_mlp and self.layer_pattern is not None:
            raise ValueError("parallel_attention_mlp applies to attention+MLP blocks, not to a layer_pattern")

    def _check_pattern(self, pattern: str) -> None:
        """Symbols known, one per layer, and each symbol's section present."""
        bad = sorted(set(pattern) - set(PATTERN_SYMBOLS))
        if bad:
            raise ValueError(f"layer_pattern has unknown symbols {bad}; use " + ", ".join(PATTERN_SYMBOLS))
        if len(pattern) != self.num_layers:
            raise ValueError(f"layer_pattern has {len(pattern)} layers; num_layers is {self.num_layers}")
        needs = {"M": ("mamba", self.mamba), "G": ("linear_attention", self.linear_attention),
                 "-": ("dense_mlp", self.dense_mlp), "E": ("moe", self.moe)}
        for symbol, (section, value) in needs.items():
            if symbol in pattern and value is None:
                raise ValueError(f"layer_pattern uses {symbol!r}, which needs the {section} section")
        if self.first_dense_layers:
            raise ValueError("first_dense_layers does not apply with layer_pattern (its - and E say it)")
        if isinstance(self.attention, DSV4Attention):
            raise ValueError("layer_pattern models use gqa or mla attention")

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def _mixer(self, index: int) -> Mixer:
        """Gated DeltaNet or softmax attention for block `index` under linear_attention_freq."""
        freq = self.linear_attention_freq
        if freq is None:
            return Mixer.attention
        if isinstance(freq, int):
            return Mixer.attention if (index + 1) % freq == 0 else Mixer.gdn
        return Mixer.gdn if freq[index] else Mixer.attention

    def _window(self, index: int, mixer: Mixer) -> int | None:
        """The sliding window of block `index`'s softmax attention, None when global."""
        if mixer is not Mixer.attention or not isinstance(self.attention, GQAAttention):
            return None
        return self.attention.window_of(index)

    def _pattern_block(self, index: int) -> Block:
        """Block `index` of a hybrid layer pattern: one mixer or one MLP."""
        assert self.layer_pattern is not None
        mixer, mlp = PATTERN_SYMBOLS[self.layer_pattern[index]]
        return Block(index=index, mlp=mlp, mixer=mixer, window=self._window(index, mixer))

    def _block(self, index: int, mtp: bool) -> Block:
        if self.layer_pattern is not None and not mtp:
            return self._pattern_block(index)
        mixer = Mixer.attention if mtp else self._mixer(index)
        dense = self.moe is None or (not mtp and index < self.first_dense_layers)
        ratio = None
        if isinstance(self.attention, DSV4Attention):
            ratio = self.attention.compress_ratios[index]
        moe_index = index - self.first_dense_layers
        hashed = bool(self.moe and not dense and not mtp and moe_index < self.moe.num_hash_layers)
        return Block(
            index=index, mlp=BlockKind.dense if dense else BlockKind.moe, mtp=mtp,
            compress_ratio=ratio, hash_routed=hashed, mixer=mixer, window=self._window(index, mixer),
        )

    @cached_property
    def blocks(self) -> tuple[Block, ...]:
        """The main decoder blocks in order."""
        return tuple(self._block(i, mtp=False) for i in range(self.num_layers))

    @cached_property
    def mtp_blocks(self) -> tuple[Block, ...]:
        """MTP blocks (placed after the last main block, on the last pipeline stage)."""
        return tuple(self._block(self.num_layers + j, mtp=True) for j in range(self.mtp_layers))

    def mtp_shares_weights(self, block: Block) -> bool:
        """Whether this MTP block runs the first MTP block's weights (a repeated layer past depth 1)."""
        return self.mtp_repeated and block.mtp and block.index > self.num_layers

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
