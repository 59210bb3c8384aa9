"""Parameter counts of every catalog model against reference/model-specs.yaml and the seeds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from parasol.problems.model.architecture import BlockKind, DSV4Attention
from parasol.problems.model.catalog import load_model, published_active, published_total_error
from parasol.problems.model.params import block_params, expert_params, model_params
from parasol.problems.model.params_dsv4 import (
    compressor_params,
    dsv4_attention_params,
    indexer_params,
    mhc_block_params,
    mhc_head_params,
)

REFERENCE = Path(__file__).resolve().parents[1] / "reference"
SPECS = {m["id"]: m for m in yaml.safe_load((REFERENCE / "model-specs.yaml").read_text())["models"]}
CATALOGUED = [
    "deepseek-v4-pro", "deepseek-v4-flash", "deepseek-v3", "deepseek-v2", "qwen3-235b-a22b", "qwen3-30b-a3b",
    "mixtral-8x7b", "mixtral-8x22b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "gpt-3-175b",
    "nemotron-4-340b",
]


def _rel(a: float, b: float) -> float:
    """Relative difference of a from b."""
    return abs(a / b - 1.0)


@pytest.mark.parametrize("name", CATALOGUED)
def test_total_matches_reference_computed(name: str) -> None:
    """Total (main model, embedding and head, no MTP) within 0.1% of model-specs.yaml computed_total_params."""
    assert _rel(model_params(load_model(name)).total, SPECS[name]["computed_total_params"]) < 1e-3


@pytest.mark.parametrize("name", CATALOGUED)
def test_total_matches_published(name: str) -> None:
    """Total within 1% of model-specs.yaml published_total_params, under the entry's MTP convention."""
    model = load_model(name)
    assert model.published.total == SPECS[name]["published_total_params"]
    error = published_total_error(model, model_params(model))
    assert error is not None and abs(error) < 0.01


@pytest.mark.parametrize("name", CATALOGUED)
def test_active_matches_reference(name: str) -> None:
    """Active counts within 0.5% of model-specs.yaml computed_active_params_incl/excl_embedding."""
    params = model_params(load_model(name))
    spec = SPECS[name]
    assert _rel(params.active_with_embedding, spec["computed_active_params_incl_embedding"]) < 5e-3
    assert _rel(params.active_head_only, spec["computed_active_params_excl_embedding"]) < 5e-3


@pytest.mark.parametrize("name", CATALOGUED)
def test_published_active_convention(name: str) -> None:
    """The computed active count under the vendor's convention is within 3% of the vendor's rounded figure
    (the widest gap is V4-Flash: 13.27B head-only vs "13B")."""
    model = load_model(name)
    assert model.published.active == SPECS[name]["published_active_params"]
    assert _rel(published_active(model_params(model), model.published.active_convention), model.published.active) < 0.03


@pytest.mark.parametrize("name", ["deepseek-v4-pro", "deepseek-v4-flash", "deepseek-v3"])
def test_mtp_matches_reference(name: str) -> None:
    """MTP blocks (without the shared embedding and head) equal model-specs.yaml computed_mtp_params."""
    assert model_params(load_model(name)).mtp == SPECS[name]["computed_mtp_params"]


@pytest.mark.parametrize("name", ["deepseek-v4-pro", "deepseek-v4-flash"])
def test_v4_exact(name: str) -> None:
    """V4 counts equal model-specs.yaml to the parameter (shapes of the official inference/model.py)."""
    params = model_params(load_model(name))
    spec = SPECS[name]
    assert params.total == spec["computed_total_params"]
    assert params.total_with_mtp == spec["computed_total_params_with_mtp"]
    assert params.active_with_embedding == spec["computed_active_params_incl_embedding"]
    assert params.active_head_only == spec["computed_active_params_excl_embedding"]


def test_v4_pro_published_total_follows_mtp() -> None:
    """V4-Pro's "1.6T" matches only the count with MTP; V4-Flash's "284B" matches without (model-specs.yaml)."""
    pro, flash = model_params(load_model("deepseek-v4-pro")), model_params(load_model("deepseek-v4-flash"))
    assert _rel(pro.total_with_mtp, 1.6e12) < 0.001 < _rel(pro.total, 1.6e12)
    assert _rel(flash.total, 284e9) < 0.002 < _rel(flash.total_with_mtp, 284e9)


def test_v4_pro_routed_expert() -> None:
    """One SwiGLU routed expert of V4-Pro, 3·7168·3072 = 66,060,288 (seed 000, 显存 section)."""
    model = load_model("deepseek-v4-pro")
    assert expert_params(model) == 66_060_288
    assert block_params(model, model.blocks[10]).per_expert == 66_060_288


def test_moe_5t_total() -> None:
    """The seed-003 5T MoE: 384 experts, top-16, 128k context, total within 1% of 5e12."""
    model = load_model("moe-5t")
    assert model.moe is not None and (model.moe.num_experts, model.moe.top_k) == (384, 16)
    assert model.max_context == 131_072
    assert _rel(model_params(model).total, 5e12) < 0.01


def test_v4_block_sharding_classes() -> None:
    """A V4-Pro MoE block splits into attention, shared expert, router, 384 routed experts, norms and mHC."""
    model = load_model("deepseek-v4-pro")
    h = model.hidden_size
    p = block_params(model, model.blocks[5])
    assert p.routed_experts == 384 * 66_060_288 and p.num_experts == 384
    assert p.shared_experts == 66_060_288
    assert p.router == 384 * h + 384
    assert p.norms == 2 * h
    assert p.extra == mhc_block_params(h, 4)
    assert p.dense_mlp == 0


def test_hash_routed_router_has_no_bias() -> None:
    """V4's first 3 MoE layers are hash-routed: the gate weight stays, the bias goes, tid2eid is not counted."""
    model = load_model("deepseek-v4-flash")
    h = model.hidden_size
    assert [b.hash_routed for b in model.blocks[:4]] == [True, True, True, False]
    assert block_params(model, model.blocks[0]).router == 256 * h
    assert block_params(model, model.blocks[3]).router == 256 * h + 256


def test_v4_attention_by_ratio() -> None:
    """Ratio 0 is window only; 128 (HCA) adds a compressor; 4 (CSA) adds an overlapping compressor and the indexer."""
    model = load_model("deepseek-v4-flash")
    att = model.attention
    assert isinstance(att, DSV4Attention)
    h = model.hidden_size
    window = dsv4_attention_params(h, att, 0)
    assert dsv4_attention_params(h, att, 128) - window == compressor_params(h, 512, 128) == 128 * 512 + 2 * h * 512 + 512
    csa_extra = compressor_params(h, 512, 4) + indexer_params(h, att)
    assert compressor_params(h, 512, 4) == 4 * 1024 + 2 * h * 1024 + 512
    assert dsv4_attention_params(h, att, 4) - window == csa_extra


def test_v4_window_attention_tensors() -> None:
    """Window-only V4-Flash attention: sink 64, wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b."""
    att = load_model("deepseek-v4-flash").attention
    assert isinstance(att, DSV4Attention)
    h = 4096
    expected = 64 + h * 1024 + 1024 + 1024 * 64 * 512 + h * 512 + 512 + 64 * 512 * 1024 + 8 * 1024 * h
    assert dsv4_attention_params(h, att, 0) == expected


def test_mhc_params() -> None:
    """mHC: (2+m)·m mixes per sub-layer from m·h inputs; head collapse m·m·h + m + 1; none for a plain residual."""
    assert mhc_block_params(7168, 4) == 2 * (24 * 4 * 7168 + 24 + 3)
    assert mhc_head_params(7168, 4) == 16 * 7168 + 5
    assert mhc_block_params(7168, 1) == mhc_head_params(7168, 1) == 0


def test_v4_structure() -> None:
    """V4-Pro: 61 MoE blocks (no dense lead-in), one window-only MTP block, mHC head outside the blocks."""
    model = load_model("deepseek-v4-pro")
    params = model_params(model)
    assert all(b.mlp is BlockKind.moe for b in model.blocks)
    assert [b.compress_ratio for b in model.mtp_blocks] == [0]
    assert sum(b.compress_ratio == 4 for b in model.blocks) == 30
    assert params.mhc_head == mhc_head_params(7168, 4)


def test_dense_models_have_no_top_k_saving() -> None:
    """A dense model's active count is its total."""
    params = model_params(load_model("llama-3.1-70b"))
    assert params.active_with_embedding == params.total
