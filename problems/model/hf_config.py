"""Build a ModelArchitecture from a HuggingFace `config.json`.

Supported `model_type`s and the keys read (HF names on the left of each mapping):

- `deepseek_v2`, `deepseek_v3`: MLA (`q_lora_rank` may be null, `kv_lora_rank`, `qk_nope_head_dim`,
  `qk_rope_head_dim`, `v_head_dim`), `first_k_dense_replace` dense blocks of `intermediate_size`, then
  MoE (`n_routed_experts`, `num_experts_per_tok`, `moe_intermediate_size`, `n_shared_experts`;
  `topk_method: noaux_tc` means a score-correction bias), `num_nextn_predict_layers` MTP blocks.
- `deepseek_v4`: hybrid CSA/HCA attention (`head_dim`, `num_key_value_heads`, `q_lora_rank`,
  `o_groups`, `o_lora_rank`, `qk_rope_head_dim`, `sliding_window`, `index_n_heads`,
  `index_head_dim`, `index_topk`, `compress_ratios` with one entry per block and MTP block), MoE with
  `num_hash_layers`, mHC `hc_mult`.
- `qwen3_moe`: GQA with per-head q/k RMSNorm (`head_dim`, `num_key_value_heads`), every block MoE
  (`num_experts`, `num_experts_per_tok`, `moe_intermediate_size`), no shared expert.
- `mixtral`: GQA, every block MoE (`num_local_experts`, `num_experts_per_tok`, `intermediate_size`).
- `llama`: GQA, dense `intermediate_size`, optional `attention_bias` / `mlp_bias`.

Common keys: `hidden_size`, `vocab_size`, `num_hidden_layers`, `num_attention_heads`,
`max_position_embeddings`, `tie_word_embeddings` (default false, as in these models' HF classes),
`hidden_act` (silu → SwiGLU, gelu → GeGLU).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parasol.errors import InputError
from parasol.problems.model.architecture import ModelArchitecture, architecture_from_dict

Config = dict[str, Any]

GATED_ACTIVATIONS = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu"}


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
        if act not in GATED_ACTIVATIONS:
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

    def gqa(self, qk_norm: bool = False) -> Config:
        """Grouped-query attention; head_dim defaults to hidden / heads as in the HF classes."""
        heads = self.req("num_attention_heads")
        return {
            "kind": "gqa",
            "num_heads": heads,
            "num_kv_heads": self.get("num_key_value_heads", heads),
            "head_dim": self.get("head_dim", self.req("hidden_size") // heads),
            "qk_norm": qk_norm,
            "bias": self.get("attention_bias", False),
        }

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
    if r.get("decoder_sparse_step", 1) != 1:
        raise r.unsupported("decoder_sparse_step", "1 (every block MoE)")
    if r.get("mlp_only_layers", []):
        raise r.unsupported("mlp_only_layers", "an empty list (every block MoE)")
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


BUILDERS: dict[str, Callable[[_Reader], Config]] = {
    "deepseek_v2": _deepseek_mla,
    "deepseek_v3": _deepseek_mla,
    "deepseek_v4": _deepseek_v4,
    "qwen3_moe": _qwen3_moe,
    "mixtral": _mixtral,
    "llama": _llama,
}


def _read_json(path: Path) -> Config:
    """Parse the file as a JSON object, reporting a missing file or bad JSON with its location."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("HuggingFace config file not found.", file=str(path),
                         fix="check the `hf_config` path (relative paths start at the problem file).") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"HuggingFace config is not valid JSON: {exc.msg}.", file=str(path), line=exc.lineno,
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
        raise InputError(exc.detail, field=exc.field, value=exc.value, expected=exc.expected, fix=exc.fix,
                         file=str(path)) from None
