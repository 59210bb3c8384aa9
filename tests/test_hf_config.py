"""HuggingFace config.json import: round trips from catalog values, and errors that name file and key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from parasol.errors import InputError
from parasol.problems.model.architecture import DSV4Attention, GQAAttention, MLAAttention, ModelArchitecture
from parasol.problems.model.catalog import load_model
from parasol.problems.model.hf_config import architecture_from_hf_config
from parasol.problems.model.params import model_params


def _common(m: ModelArchitecture, model_type: str) -> dict[str, Any]:
    """Keys every HF config carries, taken from a catalog entry."""
    return {
        "model_type": model_type, "hidden_size": m.hidden_size, "vocab_size": m.vocab_size,
        "num_hidden_layers": m.num_layers, "num_attention_heads": m.attention.num_heads,
        "max_position_embeddings": m.max_context, "tie_word_embeddings": m.tied_embeddings, "hidden_act": "silu",
    }


def _deepseek(m: ModelArchitecture, model_type: str) -> dict[str, Any]:
    """A deepseek_v2 / v3 / v4 config.json written from a catalog entry."""
    assert m.moe is not None
    cfg = _common(m, model_type) | {
        "n_routed_experts": m.moe.num_experts, "num_experts_per_tok": m.moe.top_k,
        "moe_intermediate_size": m.moe.expert_intermediate_size, "n_shared_experts": m.moe.num_shared_experts,
        "topk_method": "noaux_tc" if m.moe.router_bias else "group_limited_greedy",
        "num_nextn_predict_layers": m.mtp_layers, "moe_layer_freq": 1,
    }
    att = m.attention
    if isinstance(att, MLAAttention):
        assert m.dense_mlp is not None
        cfg |= {"q_lora_rank": att.q_lora_rank, "kv_lora_rank": att.kv_lora_rank,
                "qk_nope_head_dim": att.qk_nope_head_dim, "qk_rope_head_dim": att.qk_rope_head_dim,
                "v_head_dim": att.v_head_dim, "intermediate_size": m.dense_mlp.intermediate_size,
                "first_k_dense_replace": m.first_dense_layers}
    else:
        assert isinstance(att, DSV4Attention)
        cfg |= {"head_dim": att.head_dim, "num_key_value_heads": att.num_kv_heads, "q_lora_rank": att.q_lora_rank,
                "o_groups": att.o_groups, "o_lora_rank": att.o_lora_rank, "qk_rope_head_dim": att.qk_rope_head_dim,
                "sliding_window": att.sliding_window, "index_n_heads": att.index_n_heads,
                "index_head_dim": att.index_head_dim, "index_topk": att.index_topk,
                "compress_ratios": list(att.compress_ratios), "num_hash_layers": m.moe.num_hash_layers,
                "hc_mult": m.hc_mult}
    return cfg


def _gqa(m: ModelArchitecture, model_type: str) -> dict[str, Any]:
    """A qwen3_moe / mixtral / gpt_oss / llama config.json written from a catalog entry."""
    att = m.attention
    assert isinstance(att, GQAAttention)
    cfg = _common(m, model_type) | {"num_key_value_heads": att.num_kv_heads, "head_dim": att.head_dim,
                                    "attention_bias": att.bias}
    if model_type == "qwen3_moe":
        assert m.moe is not None
        cfg |= {"num_experts": m.moe.num_experts, "num_experts_per_tok": m.moe.top_k,
                "moe_intermediate_size": m.moe.expert_intermediate_size, "intermediate_size": 12288,
                "decoder_sparse_step": 1, "mlp_only_layers": []}
    elif model_type == "gpt_oss":
        assert m.moe is not None and att.sliding_window is not None and isinstance(att.window_skip_freq, int)
        skip = att.window_skip_freq
        cfg |= {"num_local_experts": m.moe.num_experts, "num_experts_per_tok": m.moe.top_k,
                "intermediate_size": m.moe.expert_intermediate_size, "sliding_window": att.sliding_window,
                "layer_types": ["full_attention" if (i + 1) % skip == 0 else "sliding_attention"
                                for i in range(m.num_layers)]}
    elif model_type == "mixtral":
        assert m.moe is not None
        cfg |= {"num_local_experts": m.moe.num_experts, "num_experts_per_tok": m.moe.top_k,
                "intermediate_size": m.moe.expert_intermediate_size}
    else:
        assert m.dense_mlp is not None
        cfg |= {"intermediate_size": m.dense_mlp.intermediate_size, "mlp_bias": False}
    return cfg


ROUND_TRIPS = [
    ("deepseek-v4-pro", "deepseek_v4", _deepseek), ("deepseek-v4-flash", "deepseek_v4", _deepseek),
    ("deepseek-v3", "deepseek_v3", _deepseek), ("deepseek-v2", "deepseek_v2", _deepseek),
    ("qwen3-235b-a22b", "qwen3_moe", _gqa), ("qwen3-30b-a3b", "qwen3_moe", _gqa),
    ("mixtral-8x7b", "mixtral", _gqa), ("mixtral-8x22b", "mixtral", _gqa), ("gpt-oss-120b", "gpt_oss", _gqa),
    ("llama-3.1-8b", "llama", _gqa), ("llama-3.1-70b", "llama", _gqa), ("llama-3.1-405b", "llama", _gqa),
]


def _write(tmp_path: Path, cfg: dict[str, Any], folder: str = "model") -> Path:
    """Write a config.json into its own folder (HF layout) and return its path."""
    path = tmp_path / folder / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(("name", "model_type", "build"), ROUND_TRIPS)
def test_round_trip_gives_catalog_counts(tmp_path: Path, name: str, model_type: str, build) -> None:
    """A config.json written from a catalog entry reads back to the same architecture and counts."""
    catalog = load_model(name)
    model = architecture_from_hf_config(_write(tmp_path, build(catalog, model_type), folder=name))
    assert model.name == name
    assert model.model_copy(update={"published": catalog.published, "notes": catalog.notes}) == catalog
    want, got = model_params(catalog), model_params(model)
    assert (got.total, got.total_with_mtp, got.active_with_embedding) == (
        want.total, want.total_with_mtp, want.active_with_embedding)


QWEN25_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
             "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
             "vocab_size": 152064, "max_position_embeddings": 131072, "tie_word_embeddings": False,
             "hidden_act": "silu", "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 28}
"""Qwen/Qwen2.5-7B's config.json (huggingface.co/Qwen/Qwen2.5-7B), the keys parasol reads."""
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "head_dim": 128,
            "intermediate_size": 12288, "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
            "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False,
            "attention_bias": False, "hidden_act": "silu", "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": 36}
"""Qwen/Qwen3-8B's config.json (huggingface.co/Qwen/Qwen3-8B), the keys parasol reads."""


@pytest.mark.parametrize("config, total, non_embedding", [
    (QWEN25_7B, 7_615_616_512, "6.53"),
    (QWEN3_8B, 8_190_735_360, "6.95"),
])
def test_qwen_dense_configs_give_the_published_counts(tmp_path: Path, config: dict, total: int,
                                                      non_embedding: str) -> None:
    """Qwen2/2.5 (biases on Q, K and V alone: 4,608 per Qwen2.5-7B layer) and Qwen3 dense (q/k RMSNorm) configs.
    Qwen2.5-7B's checkpoint holds 7,615,616,512 parameters (its safetensors index, 15.23 GB in BF16) and its model
    card says 7.61B, non-embedding 6.53B; Qwen3-8B's card says 8.2B, non-embedding 6.95B. Their
    `use_sliding_window: false` leaves every layer global whatever `sliding_window` says."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    model = architecture_from_hf_config(path)
    params = model_params(model)
    assert params.total == total
    assert f"{(params.total - params.embedding - params.output_head) / 1e9:.2f}" == non_embedding
    assert model.attention.sliding_window is None


def test_qwen2_moe_config_gives_the_published_counts(tmp_path: Path) -> None:
    """Qwen/Qwen2-57B-A14B's config.json: Qwen2 attention (QKV biases), 64 experts top-8 of 2,560 and one shared
    expert of 20,480 under a sigmoid gate h→1. Its checkpoint holds 57,408,658,944 parameters (the model card's
    "57B total, 14B activated"; 14.25B active here, embedding and head included)."""
    config = {"model_type": "qwen2_moe", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
              "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 151936, "hidden_act": "silu",
              "max_position_embeddings": 131072, "tie_word_embeddings": False, "num_experts": 64,
              "num_experts_per_tok": 8, "moe_intermediate_size": 2560, "shared_expert_intermediate_size": 20480,
              "decoder_sparse_step": 1, "mlp_only_layers": [], "use_sliding_window": False, "sliding_window": 65536}
    params = model_params(architecture_from_hf_config(_write(tmp_path, config)))
    assert params.total == 57_408_658_944
    assert round(params.active_with_embedding / 1e9, 2) == 14.25


def test_glm45_config_gives_its_tensor_by_tensor_count(tmp_path: Path) -> None:
    """zai-org/GLM-4.5's config.json (model card: 355B total, 32B active). Tensor by tensor: attention
    5120·12288 (q) + 2·5120·1024 (k, v) + 12288·5120 (o) + 12288 + 2048 (q, k, v biases; none on o) + 2·128 (q/k
    norms) = 136,329,472; 3 dense blocks of 3·5120·12288; 89 MoE blocks of 160 + 1 shared experts of 3·5120·1536,
    a 160×5120 router and its 160 biases; two norms a block; untied 151,552×5120 embedding and head and the final
    norm: 352,797,829,024 before the MTP block (356.8B with it; the checkpoint's 358B adds the MTP layer's own
    embedding and head copies), 32.9B active with the head."""
    config = {"model_type": "glm4_moe", "attention_bias": True, "first_k_dense_replace": 3, "head_dim": 128,
              "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 12288, "max_position_embeddings": 131072,
              "moe_intermediate_size": 1536, "n_routed_experts": 160, "n_shared_experts": 1, "num_attention_heads": 96,
              "num_experts_per_tok": 8, "num_hidden_layers": 92, "num_key_value_heads": 8,
              "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5, "tie_word_embeddings": False,
              "use_qk_norm": True, "vocab_size": 151552}
    model = architecture_from_hf_config(_write(tmp_path, config))
    params = model_params(model)
    assert params.total == 352_797_829_024
    assert round(params.total_with_mtp / 1e9, 1) == 356.8
    assert round(params.active_head_only / 1e9, 1) == 32.9
    assert (model.first_dense_layers, model.mtp_layers, model.moe.num_shared_experts) == (3, 1, 1)


def test_qwen_sliding_window_from_max_window_layers(tmp_path: Path) -> None:
    """`use_sliding_window: true` without `layer_types` makes the layers from `max_window_layers` on local, as
    transformers' Qwen2Config builds its layer_types."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN25_7B | {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20}))
    attention = architecture_from_hf_config(path).attention
    assert attention.sliding_window == 4096
    assert attention.window_skip_freq == (0,) * 20 + (1,) * 8


def test_name_argument_overrides_folder(tmp_path: Path) -> None:
    """An explicit name wins over the folder name."""
    cfg = _gqa(load_model("llama-3.1-8b"), "llama")
    assert architecture_from_hf_config(_write(tmp_path, cfg), name="mine").name == "mine"


def test_head_dim_defaults_to_hidden_over_heads(tmp_path: Path) -> None:
    """Llama configs without head_dim use hidden_size / num_attention_heads, as the HF class does."""
    cfg = _gqa(load_model("llama-3.1-8b"), "llama")
    del cfg["head_dim"]
    assert architecture_from_hf_config(_write(tmp_path, cfg)).attention.head_dim == 128


def test_unknown_model_type(tmp_path: Path) -> None:
    """An unsupported model_type names the file, the field, the supported types and a fix."""
    path = _write(tmp_path, {"model_type": "gpt_neox", "hidden_size": 4096})
    with pytest.raises(InputError) as info:
        architecture_from_hf_config(path)
    message = str(info.value)
    assert str(path) in message and "model_type" in message and "gpt_neox" in message
    assert "deepseek_v3" in message and "Fix:" in message


def test_missing_key(tmp_path: Path) -> None:
    """A missing required key is named together with the file and a fix."""
    cfg = _deepseek(load_model("deepseek-v3"), "deepseek_v3")
    del cfg["kv_lora_rank"]
    path = _write(tmp_path, cfg)
    with pytest.raises(InputError) as info:
        architecture_from_hf_config(path)
    assert info.value.field == "kv_lora_rank" and info.value.file == str(path)
    assert "Fix:" in str(info.value)


def test_missing_model_type(tmp_path: Path) -> None:
    """A config without model_type is reported as a missing key."""
    with pytest.raises(InputError) as info:
        architecture_from_hf_config(_write(tmp_path, {"hidden_size": 4096}))
    assert info.value.field == "model_type"


def test_missing_file_and_bad_json(tmp_path: Path) -> None:
    """A missing file and malformed JSON are InputErrors that point at the file (and line)."""
    with pytest.raises(InputError, match="not found"):
        architecture_from_hf_config(tmp_path / "absent" / "config.json")
    bad = tmp_path / "bad" / "config.json"
    bad.parent.mkdir()
    bad.write_text('{\n  "model_type": "llama",\n  oops\n}')
    with pytest.raises(InputError) as info:
        architecture_from_hf_config(bad)
    assert info.value.line == 3


def test_invalid_value_names_file(tmp_path: Path) -> None:
    """A value the architecture rejects (top_k above the expert count) is reported with the file."""
    cfg = _gqa(load_model("mixtral-8x7b"), "mixtral") | {"num_experts_per_tok": 9}
    path = _write(tmp_path, cfg)
    with pytest.raises(InputError) as info:
        architecture_from_hf_config(path)
    assert info.value.file == str(path) and "top_k" in str(info.value)


def test_unsupported_layouts(tmp_path: Path) -> None:
    """Interleaved dense/MoE layouts and non-gated activations are refused with the key named."""
    qwen = _gqa(load_model("qwen3-30b-a3b"), "qwen3_moe") | {"mlp_only_layers": [0, 1]}
    with pytest.raises(InputError) as info:
        architecture_from_hf_config(_write(tmp_path, qwen, "q"))
    assert info.value.field == "mlp_only_layers"
    llama = _gqa(load_model("llama-3.1-8b"), "llama") | {"hidden_act": "relu"}
    with pytest.raises(InputError) as info:
        architecture_from_hf_config(_write(tmp_path, llama, "l"))
    assert info.value.field == "hidden_act"
