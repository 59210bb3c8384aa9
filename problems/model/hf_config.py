"""Build a ModelArchitecture from a HuggingFace `config.json`.

Supported `model_type`s and the keys read (HF names on the left of each mapping):

- `deepseek_v2`, `deepseek_v3`: MLA (`q_lora_rank` may be null, `kv_lora_rank`, `qk_nope_head_dim`,
  `qk_rope_head_dim`, `v_head_dim`), `first_k_dense_replace` dense blocks of `intermediate_size`, then
  MoE (`n_routed_experts`, `num_experts_per_tok`, `moe_intermediate_size`, `n_shared_experts`;
  `topk_method: noaux_tc` means a score-correction bias), `num_nextn_predict_layers` MTP blocks.
- `deepseek_v32` (DeepSeek-V3.2): as `deepseek_v3`, with DSA's indexer (`index_n_heads`, `index_head_dim`,
  `index_topk`).
- `deepseek_v4`: hybrid CSA/HCA attention (`head_dim`, `num_key_value_heads`, `q_lora_rank`,
  `o_groups`, `o_lora_rank`, `qk_rope_head_dim`, `sliding_window`, `index_n_heads`,
  `index_head_dim`, `index_topk`, `compress_ratios` with one entry per block and MTP block), MoE with
  `num_hash_layers`, mHC `hc_mult`.
- `glm4_moe` (GLM-4.5, GLM-4.6): GQA (`head_dim`, biases on Q, K and V alone by `attention_bias`, q/k RMSNorm by
  `use_qk_norm`), `first_k_dense_replace` dense blocks, DeepSeek-style MoE with a score-correction bias
  (`n_routed_experts`, `n_shared_experts`, `moe_intermediate_size`), `num_nextn_predict_layers` MTP blocks.
- `qwen3_moe`: GQA with per-head q/k RMSNorm (`head_dim`, `num_key_value_heads`), every block MoE
  (`num_experts`, `num_experts_per_tok`, `moe_intermediate_size`), no shared expert.
- `qwen2_moe` (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's attention, every block MoE (`num_experts`,
  `num_experts_per_tok`, `moe_intermediate_size`) with one gated shared expert of
  `shared_expert_intermediate_size`.
- `mixtral`: GQA, every block MoE (`num_local_experts`, `num_experts_per_tok`, `intermediate_size`).
- `gpt_oss`: as `mixtral` with `attention_bias`, a biased router and `layer_types` (sliding / full); attention
  sinks and expert biases are not represented.
- `llama`: GQA, dense `intermediate_size`, optional `attention_bias` / `mlp_bias`.
- `qwen2` (Qwen2, Qwen2.5): as `llama`, with biases on the Q, K and V projections alone.
- `qwen3`: as `llama`, with per-head q/k RMSNorm (`head_dim`).
- `mistral`: as `llama`, every layer local with `sliding_window` keys (null: global).
- `nemotron_h` (Nemotron-H, Nemotron 3): `hybrid_override_pattern` (one layer per symbol: M Mamba-2,
  * attention, - MLP, E MoE), Mamba-2 (`mamba_num_heads`, `mamba_head_dim`, `ssm_state_size`, `n_groups`,
  `conv_kernel`), GQA (`head_dim` or `attention_head_dim`), MLP `intermediate_size` with `mlp_hidden_act`
  (relu2 → squared ReLU), MoE (`n_routed_experts`, `num_experts_per_tok`, `moe_intermediate_size`,
  `moe_shared_expert_intermediate_size`, `moe_latent_size`).
- `qwen3_next`: gated DeltaNet (`linear_num_key_heads`, `linear_num_value_heads`, `linear_key_head_dim`,
  `linear_value_head_dim`, `linear_conv_kernel_dim`) in the blocks `layer_types` marks linear_attention
  (or all but every `full_attention_interval`-th), GQA with q/k norm and an output gate, MoE
  (`num_experts`, `num_experts_per_tok`, `moe_intermediate_size`, `shared_expert_intermediate_size`).

Sliding windows: `sliding_window` with `layer_types` (sliding_attention / full_attention per layer) in the
GQA models above makes those layers local (window_skip_freq as a 1/0 list, or N when every N-th layer is
global). `use_sliding_window: false` (the Qwen configs, which carry a `sliding_window` size either way) means
no layer is local; `true` without `layer_types` makes the layers from `max_window_layers` on local, as the
Qwen classes do.

Common keys: `hidden_size`, `vocab_size`, `num_hidden_layers`, `num_attention_heads`,
`max_position_embeddings`, `tie_word_embeddings` (default false, as in these models' HF classes),
`hidden_act` (silu → SwiGLU, gelu → GeGLU).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parasol.bounds import MAX_NESTING
from parasol.errors import InputError
from parasol.files import read_input_text
from parasol.problems.model.architecture import ModelArchitecture, architecture_from_dict

Config = dict[str, Any]
MAX_NUMBER_DIGITS = 30
"""Longest whole number read from a config.json (any real size has far fewer digits)."""

GATED_ACTIVATIONS = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu"}
PLAIN_ACTIVATIONS = {"relu2": "squared_relu", "relu": "relu", "gelu": "gelu"}
"""`mlp_hidden_act` of Nemotron-H configs: non-gated MLPs."""


def _bounded_int(text: str) -> int:
    """A JSON whole number, refused beyond MAX_NUMBER_DIGITS digits before Python converts it."""
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a whole number of {len(text):,} digits")
    return int(text)


def nesting_depth(text: str) -> int:
    """Deepest bracket nesting of a JSON text (brackets inside strings counted too: an upper bound)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


HF_KEYS = {
    "num_layers": "num_hidden_layers", "attention.num_heads": "num_attention_heads",
    "attention.num_kv_heads": "num_key_value_heads", "dense_mlp.intermediate_size": "intermediate_size",
    "moe.top_k": "num_experts_per_tok", "moe.num_shared_experts": "n_shared_experts",
    "first_dense_layers": "first_k_dense_replace", "mtp_layers": "num_nextn_predict_layers",
    "max_context": "max_position_embeddings", "hc_mult": "hc_mult", "moe.num_hash_layers": "num_hash_layers",
}
"""The config.json key behind an architecture field where the names differ (errors name the user's key)."""


class _Reader:
    """Reads keys of one config.json, raising InputError that names the file and the key."""

    def __init__(self, config: Config, path: Path) -> None:
        self.config = config
        self.path = path

    def req(self, key: str) -> Any:
        """A key the architecture cannot do without."""
        if key not in self.config:
            raise InputError(
                f"HuggingFace config lacks the key `{key}` needed for model_type "
                f"{self.config.get('model_type')!r}.", field=key, file=str(self.path),
                fix=f"add `{key}` from the model's original config.json, or describe the model inline "
                    "or by catalog name instead of hf_config.",
            )
        return self.config[key]

    def whole(self, key: str) -> int:
        """A required key that other sizes are computed from: a positive whole number."""
        value = self.req(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"HuggingFace config key `{key}` must be a positive whole number.", field=key,
                             value=value, expected="a whole number of at least 1", file=str(self.path),
                             fix="use the model's config.json unchanged.")
        return value

    def get(self, key: str, default: Any) -> Any:
        """An optional key; null counts as absent."""
        value = self.config.get(key)
        return default if value is None else value

    def unsupported(self, key: str, expected: str) -> InputError:
        """A key whose value describes a layout parasol does not model."""
        return InputError(
            "HuggingFace config describes a layout parasol cannot represent.", field=key,
            value=self.config.get(key), expected=expected, file=str(self.path),
            fix="describe the model inline in the problem file (see problems/catalog/ for examples).",
        )

    def activation(self) -> str:
        """The gated MLP activation named by `hidden_act`."""
        act = self.get("hidden_act", "silu")
        if not isinstance(act, str) or act not in GATED_ACTIVATIONS:
            raise self.unsupported("hidden_act", "one of " + ", ".join(GATED_ACTIVATIONS))
        return GATED_ACTIVATIONS[act]

    def common(self) -> Config:
        """Fields every supported model type shares."""
        return {
            "hidden_size": self.req("hidden_size"),
            "vocab_size": self.req("vocab_size"),
            "num_layers": self.req("num_hidden_layers"),
            "tied_embeddings": self.get("tie_word_embeddings", False),
            "max_context": self.get("max_position_embeddings", None),
        }

    def gqa(self, qk_norm: bool = False, qkv_bias: bool | None = None) -> Config:
        """Grouped-query attention; head_dim (or Nemotron-H's attention_head_dim) defaults to hidden / heads
        as in the HF classes; local layers from `sliding_window` and `layer_types`. Biases on all four
        projections by `attention_bias`, unless `qkv_bias` says whether Q, K and V alone carry them (Qwen2, GLM)."""
        heads = self.whole("num_attention_heads")
        head_dim = self.get("head_dim", self.get("attention_head_dim", None))
        return {
            "kind": "gqa",
            "num_heads": heads,
            "num_kv_heads": self.get("num_key_value_heads", heads),
            "head_dim": head_dim if head_dim is not None else self.whole("hidden_size") // heads,
            "qk_norm": qk_norm,
            "bias": self.get("attention_bias", False) if qkv_bias is None else False,
            "qkv_bias": bool(qkv_bias),
            **self.window(),
        }

    def window(self) -> Config:
        """`sliding_window` keys on the layers `layer_types` marks sliding_attention (all without it; with
        `use_sliding_window`, the Qwen configs' switch, those from `max_window_layers` on); none when
        `use_sliding_window` is false."""
        window = self.get("sliding_window", None)
        switch = self.get("use_sliding_window", None)
        if window is None or switch is False:
            return {}
        types = self.get("layer_types", None)
        if types is None and switch:
            layers, first = self.whole("num_hidden_layers"), self.get("max_window_layers", 0)
            types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
        if types is None:
            return {"sliding_window": window}
        known = {"sliding_attention": 1, "full_attention": 0}
        if any(t not in known for t in types if t != "linear_attention"):
            raise self.unsupported("layer_types", "sliding_attention, full_attention or linear_attention")
        local = [known.get(t, 0) for t in types]
        return {"sliding_window": window, "window_skip_freq": _every_nth_global(local) or local}

    def plain_activation(self, key: str) -> str:
        """A non-gated MLP activation (`mlp_hidden_act`)."""
        act = self.get(key, "relu2")
        if act not in PLAIN_ACTIVATIONS:
            raise self.unsupported(key, "one of " + ", ".join(PLAIN_ACTIVATIONS))
        return PLAIN_ACTIVATIONS[act]

    def every_block_moe(self) -> None:
        """Refuse a Qwen MoE config whose blocks are not all MoE (decoder_sparse_step, mlp_only_layers): parasol
        reads its layers as one kind."""
        if self.get("decoder_sparse_step", 1) != 1:
            raise self.unsupported("decoder_sparse_step", "1 (every block MoE)")
        if self.get("mlp_only_layers", []):
            raise self.unsupported("mlp_only_layers", "an empty list (every block MoE)")

    def gated_shared_moe(self) -> Config:
        """The Qwen MoE blocks (Qwen2-MoE, Qwen3-Next): `num_experts` routed experts of `moe_intermediate_size`, top
        `num_experts_per_tok`, and one shared expert of `shared_expert_intermediate_size` under a sigmoid gate when
        the config gives one."""
        shared = self.get("shared_expert_intermediate_size", None)
        return {"num_experts": self.req("num_experts"), "top_k": self.req("num_experts_per_tok"),
                "expert_intermediate_size": self.req("moe_intermediate_size"),
                "num_shared_experts": 1 if shared else 0, "shared_intermediate_size": shared,
                "shared_expert_gate": bool(shared), "activation": self.activation()}

    def deepseek_moe(self) -> Config:
        """DeepSeek routed plus shared experts; noaux_tc routing carries a per-expert bias."""
        if self.get("moe_layer_freq", 1) != 1:
            raise self.unsupported("moe_layer_freq", "1 (every block after the dense lead-in is MoE)")
        return {
            "num_experts": self.req("n_routed_experts"),
            "top_k": self.req("num_experts_per_tok"),
            "expert_intermediate_size": self.req("moe_intermediate_size"),
            "num_shared_experts": self.get("n_shared_experts", 0),
            "activation": self.activation(),
            "router_bias": self.get("topk_method", "") == "noaux_tc",
        }


def _every_nth_global(local: list[int]) -> int | None:
    """N when the 1/0 (local/global) list is Megatron's int form, every N-th layer (1-based) global
    (utils.py is_layer_window_attention: N − 1 local then 1 global), N >= 2; else None."""
    n = next((i + 1 for i, x in enumerate(local) if not x), None)
    if n is None or n < 2 or any(x != int((i + 1) % n != 0) for i, x in enumerate(local)):
        return None
    return n


def _deepseek_mla(r: _Reader) -> Config:
    """DeepSeek-V2 / V3: MLA, dense lead-in blocks, MoE, MTP."""
    return {
        **r.common(),
        "attention": {
            "kind": "mla",
            "num_heads": r.req("num_attention_heads"),
            "q_lora_rank": r.get("q_lora_rank", None),
            "kv_lora_rank": r.req("kv_lora_rank"),
            "qk_nope_head_dim": r.req("qk_nope_head_dim"),
            "qk_rope_head_dim": r.req("qk_rope_head_dim"),
            "v_head_dim": r.req("v_head_dim"),
        },
        "dense_mlp": {"intermediate_size": r.req("intermediate_size"), "activation": r.activation()},
        "moe": r.deepseek_moe(),
        "first_dense_layers": r.get("first_k_dense_replace", 0),
        "mtp_layers": r.get("num_nextn_predict_layers", 0),
    }


def _deepseek_v32(r: _Reader) -> Config:
    """DeepSeek-V3.2: DeepSeek-V3 with DSA's lightning indexer in every attention."""
    config = _deepseek_mla(r)
    config["attention"]["indexer"] = {"n_heads": r.req("index_n_heads"), "head_dim": r.req("index_head_dim"),
                                      "topk": r.req("index_topk")}
    return config


def _glm4_moe(r: _Reader) -> Config:
    """GLM-4.5 / 4.6: GQA with biases on Q, K and V alone and optional q/k RMSNorm (`use_qk_norm`), dense lead-in
    blocks, then DeepSeek-style MoE (routed experts with a score-correction bias, shared experts) and MTP blocks
    (transformers modeling_glm4_moe.py Glm4MoeAttention, Glm4MoeTopkRouter)."""
    return {
        **r.common(),
        "attention": r.gqa(qk_norm=bool(r.get("use_qk_norm", False)),
                           qkv_bias=bool(r.get("attention_bias", False))),
        "dense_mlp": {"intermediate_size": r.req("intermediate_size"), "activation": r.activation()},
        "moe": {**r.deepseek_moe(), "router_bias": True},
        "first_dense_layers": r.get("first_k_dense_replace", 0),
        "mtp_layers": r.get("num_nextn_predict_layers", 0),
    }


def _deepseek_v4(r: _Reader) -> Config:
    """DeepSeek-V4: hybrid CSA/HCA attention, MoE with hash-routed lead-in layers, mHC, MTP."""
    return {
        **r.common(),
        "attention": {
            "kind": "dsv4_hybrid",
            "num_heads": r.req("num_attention_heads"),
            "head_dim": r.req("head_dim"),
            "num_kv_heads": r.get("num_key_value_heads", 1),
            "q_lora_rank": r.req("q_lora_rank"),
            "o_groups": r.req("o_groups"),
            "o_lora_rank": r.req("o_lora_rank"),
            "qk_rope_head_dim": r.req("qk_rope_head_dim"),
            "sliding_window": r.get("sliding_window", 128),
            "index_n_heads": r.req("index_n_heads"),
            "index_head_dim": r.req("index_head_dim"),
            "index_topk": r.req("index_topk"),
            "compress_ratios": r.req("compress_ratios"),
        },
        "moe": {**r.deepseek_moe(), "num_hash_layers": r.get("num_hash_layers", 0)},
        "mtp_layers": r.get("num_nextn_predict_layers", 0),
        "hc_mult": r.get("hc_mult", 1),
    }


def _qwen3_moe(r: _Reader) -> Config:
    """Qwen3-MoE: GQA with q/k norm, every block MoE, no shared expert."""
    r.every_block_moe()
    return {
        **r.common(),
        "attention": r.gqa(qk_norm=True),
        "moe": {
            "num_experts": r.req("num_experts"),
            "top_k": r.req("num_experts_per_tok"),
            "expert_intermediate_size": r.req("moe_intermediate_size"),
            "activation": r.activation(),
        },
    }


def _qwen2_moe(r: _Reader) -> Config:
    """Qwen1.5-MoE / Qwen2-MoE: Qwen2's attention (biases on Q, K and V alone), every block MoE with one shared
    expert of `shared_expert_intermediate_size` under a sigmoid gate (transformers modeling_qwen2_moe.py
    Qwen2MoeSparseMoeBlock.shared_expert_gate)."""
    r.every_block_moe()
    return {
        **r.common(),
        "attention": r.gqa(qkv_bias=True),
        "moe": r.gated_shared_moe(),
    }


def _mixtral(r: _Reader) -> Config:
    """Mixtral: GQA, every block MoE of intermediate_size experts."""
    return {
        **r.common(),
        "attention": r.gqa(),
        "moe": {
            "num_experts": r.req("num_local_experts"),
            "top_k": r.req("num_experts_per_tok"),
            "expert_intermediate_size": r.req("intermediate_size"),
            "activation": r.activation(),
        },
    }


def _gpt_oss(r: _Reader) -> Config:
    """gpt-oss: GQA with biases, local and global layers by `layer_types`, every block MoE of `intermediate_size`
    experts under a router with a bias (transformers modeling_gpt_oss.py GptOssTopKRouter). Not represented, as in
    the catalog entry: the per-head attention sinks and the experts' own biases."""
    data = _mixtral(r)
    data["moe"]["router_bias"] = True
    return data


def _llama(r: _Reader) -> Config:
    """Llama: GQA and a dense SwiGLU MLP."""
    return {
        **r.common(),
        "attention": r.gqa(),
        "dense_mlp": {
            "intermediate_size": r.req("intermediate_size"),
            "activation": r.activation(),
            "bias": r.get("mlp_bias", False),
        },
    }


def _qwen2(r: _Reader) -> Config:
    """Qwen2 / Qwen2.5: Llama's layout with biases on the Q, K and V projections and none on the output
    (transformers modeling_qwen2.py Qwen2Attention; Megatron --add-qkv-bias)."""
    return {**_llama(r), "attention": r.gqa(qkv_bias=True)}


def _qwen3(r: _Reader) -> Config:
    """Qwen3 (dense): Llama's layout with per-head q/k RMSNorm (transformers modeling_qwen3.py)."""
    return {**_llama(r), "attention": r.gqa(qk_norm=True)}


def _mistral(r: _Reader) -> Config:
    """Mistral: Llama's layout with a sliding window on every layer."""
    return _llama(r)


def _nemotron_h(r: _Reader) -> Config:
    """Nemotron-H / Nemotron 3: a hybrid layer pattern of Mamba-2, attention, MLP and MoE layers."""
    pattern = r.req("hybrid_override_pattern")
    data: Config = {
        **r.common(),
        "num_layers": len(pattern),
        "layer_pattern": pattern,
        "attention": r.gqa(),
        "mamba": {"num_heads": r.req("mamba_num_heads"), "head_dim": r.get("mamba_head_dim", 64),
                  "state_size": r.get("ssm_state_size", 128), "num_groups": r.get("n_groups", 8),
                  "conv_kernel": r.get("conv_kernel", 4)},
    }
    activation = r.plain_activation("mlp_hidden_act")
    if "-" in pattern:
        data["dense_mlp"] = {"intermediate_size": r.req("intermediate_size"), "activation": activation,
                             "bias": r.get("mlp_bias", False)}
    if "E" in pattern:
        shared = r.get("moe_shared_expert_intermediate_size", None)
        data["moe"] = {"num_experts": r.req("n_routed_experts"), "top_k": r.req("num_experts_per_tok"),
                       "expert_intermediate_size": r.req("moe_intermediate_size"),
                       "num_shared_experts": 1 if shared else 0, "shared_intermediate_size": shared,
                       "activation": activation, "router_bias": True,
                       "latent_size": r.get("moe_latent_size", None)}
    if r.get("num_hidden_layers", len(pattern)) != len(pattern):
        raise r.unsupported("num_hidden_layers", f"the length of hybrid_override_pattern ({len(pattern)})")
    return data


def _qwen3_next(r: _Reader) -> Config:
    """Qwen3-Next: gated DeltaNet and gated softmax attention blocks, every block MoE with a shared expert
    under a sigmoid gate (transformers modeling_qwen3_next.py Qwen3NextSparseMoeBlock.shared_expert_gate)."""
    types = r.get("layer_types", None)
    if types is not None:
        freq: Any = [1 if t == "linear_attention" else 0 for t in types]
    else:
        freq = r.req("full_attention_interval")
    return {
        **r.common(),
        "attention": {**r.gqa(qk_norm=True), "output_gate": True},
        "linear_attention": {"num_key_heads": r.req("linear_num_key_heads"),
                             "num_value_heads": r.req("linear_num_value_heads"),
                             "key_head_dim": r.get("linear_key_head_dim", 128),
                             "value_head_dim": r.get("linear_value_head_dim", 128),
                             "conv_kernel": r.get("linear_conv_kernel_dim", 4)},
        "linear_attention_freq": freq,
        "moe": r.gated_shared_moe(),
    }


BUILDERS: dict[str, Callable[[_Reader], Config]] = {
    "deepseek_v2": _deepseek_mla,
    "deepseek_v3": _deepseek_mla,
    "deepseek_v32": _deepseek_v32,
    "deepseek_v4": _deepseek_v4,
    "glm4_moe": _glm4_moe,
    "qwen3_moe": _qwen3_moe,
    "qwen2_moe": _qwen2_moe,
    "mixtral": _mixtral,
    "gpt_oss": _gpt_oss,
    "llama": _llama,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "mistral": _mistral,
    "nemotron_h": _nemotron_h,
    "qwen3_next": _qwen3_next,
}


def _read_json(path: Path) -> Config:
    """Parse the file as a JSON object, reporting a missing file or bad JSON with its location; numbers
    with thousands of digits and nesting deeper than MAX_NESTING are refused before they are built."""
    text = read_input_text(path, "HuggingFace config", "model.hf_config")
    if nesting_depth(text) > MAX_NESTING:
        raise InputError(f"HuggingFace config nests lists or objects more than {MAX_NESTING} deep.", file=str(path),
                         fix="use the model's config.json unchanged.")
    try:
        data = json.loads(text, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        raise InputError(f"HuggingFace config is not valid JSON: {exc.msg}.", file=str(path), line=exc.lineno,
                         fix="use the model's config.json unchanged.") from None
    except ValueError as exc:
        raise InputError(f"HuggingFace config holds an unreadable number: {exc}.", file=str(path),
                         expected=f"numbers of at most {MAX_NUMBER_DIGITS} digits",
                         fix="use the model's config.json unchanged.") from None
    if not isinstance(data, dict):
        raise InputError("HuggingFace config must be a JSON object.", file=str(path),
                         fix="use the model's config.json unchanged.")
    return data


def default_name(raw: dict[str, Any], path: Path, model_type: str) -> str:
    """The model's published name from `_name_or_path`, else the config's folder (else its model_type)."""
    published = raw.get("_name_or_path")
    if isinstance(published, str) and published.strip("/ "):
        return published.strip("/ ").rsplit("/", 1)[-1]
    return path.resolve().parent.name or model_type


def architecture_from_hf_config(path: Path | str, *, name: str | None = None) -> ModelArchitecture:
    """Read a HuggingFace config.json of a supported model type; the name defaults to the last part of
    the config's `_name_or_path` (e.g. Llama-3.1-70B), else the folder's name; a problem may give `name:`."""
    path = Path(path)
    reader = _Reader(_read_json(path), path)
    model_type = reader.req("model_type")
    if model_type not in BUILDERS:
        raise InputError(
            "HuggingFace config has a model_type parasol cannot read.", field="model_type", value=model_type,
            expected="one of " + ", ".join(sorted(BUILDERS)), file=str(path),
            fix="describe the model inline in the problem file (see problems/catalog/ for examples).",
        )
    data = {"name": name or default_name(reader.config, path, model_type), **BUILDERS[model_type](reader)}
    try:
        return architecture_from_dict(data, where="hf_config")
    except InputError as exc:
        field = exc.field or ""
        inner = field.removeprefix("hf_config.")
        key = HF_KEYS.get(inner, inner.rsplit(".", 1)[-1])
        def reword(text: str | None) -> str | None:
            return None if text is None else text.replace(field, key)
        raise InputError(reword(exc.detail) or "", field=key, value=exc.value, expected=exc.expected,
                         fix=reword(exc.fix), file=str(path)) from None
