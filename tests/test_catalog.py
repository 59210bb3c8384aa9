"""The bundled model catalog: names, loading, errors and the summary `parasol models` prints."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from parasol.errors import CatalogError, InputError
from parasol.problems.model.architecture import ModelArchitecture
from parasol.problems.model.catalog import catalog_names, load_model, model_summary

REFERENCE = Path(__file__).resolve().parents[1] / "reference"
EXPECTED = {
    "deepseek-v4-pro", "deepseek-v4-flash", "deepseek-v3", "deepseek-v3.1", "deepseek-v2", "qwen3-235b-a22b", "qwen3-30b-a3b",
    "mixtral-8x7b", "mixtral-8x22b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "gpt-3-175b",
    "nemotron-4-340b", "moe-5t",
    # added for the measured runs of reference/measured-configs.yaml (step-time calibration, issue 4)
    "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "kimi-k2", "gpt-oss-120b",
    "nemotron-4-15b", "nemotron-3-8b", "nemotron-3-22b", "gpt-3-5b", "gpt-3-20b",
    # model shapes of issue 16: hybrid Mamba (the Nemotron 3 ones serve measured-configs.yaml) and sliding window
    "nemotron-h-8b", "nemotron-3-nano-30b-a3b", "nemotron-3-super-120b-a12b", "nemotron-3-ultra-550b-a55b",
    "mistral-7b",
}


def test_names_sorted_and_complete() -> None:
    """catalog_names lists every bundled YAML file, sorted."""
    names = catalog_names()
    assert names == sorted(names)
    assert set(names) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_entry_validates_and_is_named_after_its_file(name: str) -> None:
    """Every entry is a valid ModelArchitecture whose name is its file name, with a cited published block."""
    model = load_model(name)
    assert isinstance(model, ModelArchitecture)
    assert model.name == name
    assert model.published.total is not None and model.published.source


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_entry_cites_its_source(name: str) -> None:
    """Each YAML file opens with comments citing model-specs.yaml or the seed it comes from (entries added
    for measured-configs.yaml cite their primary sources and the measured runs they serve, the model-shape
    entries of issue 16 their paper or Megatron-LM launch file)."""
    text = files("parasol.problems.catalog").joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    assert text.startswith("#")
    assert any(cite in text for cite in ("model-specs.yaml", "seed 003", "measured-configs.yaml", "arXiv",
                                         "Megatron-LM main@"))


def test_catalog_covers_reference_shapes() -> None:
    """Catalog shapes equal the model-specs.yaml entries they cite (layers, hidden, vocab, experts, top-k)."""
    specs = {m["id"]: m for m in yaml.safe_load((REFERENCE / "model-specs.yaml").read_text())["models"]}
    for name in sorted(EXPECTED & specs.keys()):
        model, spec = load_model(name), specs[name]
        assert (model.num_layers, model.hidden_size, model.vocab_size) == (
            spec["num_layers"], spec["hidden_size"], spec["vocab_size"]), name
        assert model.attention.num_heads == spec["num_attention_heads"], name
        if spec["moe"]:
            assert model.moe is not None
            assert (model.moe.num_experts, model.moe.top_k, model.moe.expert_intermediate_size) == (
                spec["moe"]["num_routed_experts"], spec["moe"]["top_k"], spec["moe"]["moe_intermediate_size"]), name
        assert model.mtp_layers == (spec["mtp_layers"] or 0), name


def test_unknown_name_raises_catalog_error() -> None:
    """An unknown name raises CatalogError naming the value, the known names and a fix."""
    with pytest.raises(CatalogError) as info:
        load_model("deepseek-v5")
    message = str(info.value)
    assert "deepseek-v5" in message
    assert "deepseek-v4-pro" in message and "llama-3.1-8b" in message
    assert "Fix:" in message
    assert isinstance(info.value, InputError)


@pytest.mark.parametrize("written, name", [
    ("meta-llama/Llama-3.1-70B", "llama-3.1-70b"), ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
    ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"), ("openai/gpt-oss-120b", "gpt-oss-120b"),
    ("Mixtral-8x7B", "mixtral-8x7b"),
])
def test_a_huggingface_id_or_other_case_names_the_catalog_entry(written: str, name: str) -> None:
    """A model written as its HuggingFace id or in other letter case is the catalog entry it names."""
    assert load_model(written) == load_model(name)


def test_an_id_that_names_no_entry_suggests_the_closest() -> None:
    """An id of a variant the catalog lacks (an instruct or versioned checkpoint) is an error naming the entry it
    is closest to."""
    with pytest.raises(CatalogError, match="use kimi-k2"):
        load_model("moonshotai/Kimi-K2-Instruct")


def test_summary_of_v4_pro() -> None:
    """model_summary gives the block structure, every convention and the published figures."""
    s = model_summary(load_model("deepseek-v4-pro"))
    assert (s["name"], s["layers"], s["dense_blocks"], s["moe_blocks"]) == ("deepseek-v4-pro", 61, 0, 61)
    assert (s["experts"], s["top_k"], s["mtp_layers"]) == (384, 6, 1)
    assert s["total"] == 1_572_997_201_763
    assert s["total_with_mtp"] == 1_598_837_347_742
    assert s["active_with_embedding"] == 49_779_081_059
    assert s["active_head_only"] == 48_852_402_019
    assert s["active_no_embedding"] == 48_852_402_019 - 129_280 * 7168
    pub = s["published"]
    assert pub["total"] == 1.6e12 and pub["total_includes_mtp"] is True
    assert pub["active_convention"] == "head_only" and pub["computed_active"] == s["active_head_only"]
    assert abs(pub["total_error"]) < 0.001


def test_summary_of_dense_model() -> None:
    """A dense model has no MoE blocks, experts or top-k."""
    s = model_summary(load_model("llama-3.1-8b"))
    assert (s["dense_blocks"], s["moe_blocks"], s["experts"], s["top_k"]) == (32, 0, 0, 0)
    assert s["active_with_embedding"] == s["total"] == 8_030_261_248


def test_summary_of_deepseek_v3_counts_dense_lead_in() -> None:
    """DeepSeek-V3 has 3 dense blocks then 58 MoE blocks."""
    s = model_summary(load_model("deepseek-v3"))
    assert (s["dense_blocks"], s["moe_blocks"]) == (3, 58)
