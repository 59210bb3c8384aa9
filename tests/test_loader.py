"""The problem loader (problems/loader.py): the four ways to name a model, the bundled problems, plain
YAML features, and errors that carry the file, the line and the dotted field.

Sources: BRIEF.md ("A problem file names its model either from the catalog or inline (and may point at
a HuggingFace `config.json`)"), the bundled problems/deepseek-v4-pro-{1024,8192}.yaml (seed 000's
configurations A and B/C: 1,024 and 8,192 GPUs, S 8192, B 4096), problems/catalog/*.yaml.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from parasol.errors import InputError
from parasol.problems.loader import Problem, load_problem, load_problem_text
from parasol.problems.model.architecture import GQAAttention, MLAAttention
from parasol.problems.model.catalog import load_model

ROOT = Path(__file__).resolve().parents[1]
BUNDLED_1024 = ROOT / "problems" / "deepseek-v4-pro-1024.yaml"
BUNDLED_8192 = ROOT / "problems" / "deepseek-v4-pro-8192.yaml"

RUN = """training:
  seq_len: 4096
  global_batch: 512
hardware:
  preset: h100-hgx
  gpus: 64
"""


def problem_with(model_yaml: str, base_dir: Path | None = None) -> Problem:
    """A small problem (64 H100s, S 4096, B 512) whose `model:` section is the given YAML."""
    return load_problem_text(f"model: {model_yaml}\n{RUN}", source="test.yaml", base_dir=base_dir)


def error_of(text: str) -> InputError:
    """The InputError that loading `text` raises."""
    with pytest.raises(InputError) as info:
        load_problem_text(text, source="p.yaml")
    return info.value


# --- good paths --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "gpus"), [(BUNDLED_1024, 1024), (BUNDLED_8192, 8192)])
def test_bundled_problems_load(path: Path, gpus: int) -> None:
    """Seed 000: DeepSeek-V4-Pro (61 blocks, 384 experts top-6) with S 8192 and B 4096 on 1,024 / 8,192
    H800-class GPUs in 8-GPU nodes."""
    problem = load_problem(path)
    assert problem.source == str(path)
    assert problem.gpus == gpus
    assert problem.model == load_model("deepseek-v4-pro")
    assert problem.model.num_layers == 61 and problem.model.moe is not None and problem.model.moe.top_k == 6
    assert (problem.training.seq_len, problem.training.global_batch) == (8192, 4096)
    assert problem.hardware.topology.gpus_per_node == 8


def test_line_of_points_at_the_key() -> None:
    """Problem.line_of gives the line of a key as it is in the file (used by citations and errors)."""
    problem = load_problem(BUNDLED_1024)
    rows = BUNDLED_1024.read_text(encoding="utf-8").splitlines()
    assert rows[problem.line_of("training", "seq_len") - 1].startswith("  seq_len:")
    assert rows[problem.line_of("hardware", "gpus") - 1].startswith("  gpus:")
    assert rows[problem.line_of("search", "ep", 1) - 1].startswith("  ep: [32, 64, 128]")
    assert problem.line_of("training", "no_such_key") == problem.line_of("training")


def test_model_by_catalog_name() -> None:
    """BRIEF: a problem names its model from the catalog."""
    assert problem_with("deepseek-v3").model == load_model("deepseek-v3")


def test_model_by_catalog_with_overrides() -> None:
    """`{catalog: name, ...}` overrides fields; nested mappings merge into the catalog's (top_k changes,
    the 384 experts stay), and the rest of the catalog entry is unchanged."""
    model = problem_with("{catalog: deepseek-v4-pro, num_layers: 43, moe: {top_k: 8}}").model
    base = load_model("deepseek-v4-pro")
    assert model.num_layers == 43
    assert model.moe is not None and base.moe is not None
    assert (model.moe.top_k, model.moe.num_experts) == (8, base.moe.num_experts)
    assert model.moe.expert_intermediate_size == 3072
    assert model.attention == base.attention and model.hidden_size == 7168


def test_override_that_switches_attention_kind_replaces_it() -> None:
    """An override with another `attention.kind` replaces the attention block instead of merging it."""
    model = problem_with("{catalog: deepseek-v3, attention: {kind: gqa, num_heads: 128, num_kv_heads: 8, "
                         "head_dim: 128}}").model
    assert isinstance(load_model("deepseek-v3").attention, MLAAttention)
    assert model.attention == GQAAttention(num_heads=128, num_kv_heads=8, head_dim=128)


def test_model_inline() -> None:
    """BRIEF: a problem may give the architecture inline (here problems/catalog/llama-3.1-8b.yaml verbatim)."""
    inline = yaml.safe_load((ROOT / "problems" / "catalog" / "llama-3.1-8b.yaml").read_text(encoding="utf-8"))
    assert problem_with(json.dumps(inline)).model == load_model("llama-3.1-8b")


def test_model_from_hf_config(tmp_path: Path) -> None:
    """BRIEF: a problem may point at a HuggingFace config.json, relative to the problem file; Llama 3.1 8B's
    published config (hidden 4096, 32 layers, 32 heads / 8 KV heads, FFN 14336, vocab 128256)."""
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "hidden_act": "silu",
        "max_position_embeddings": 131072, "tie_word_embeddings": False,
    }), encoding="utf-8")
    (tmp_path / "problem.yaml").write_text(f"model: {{hf_config: llama/config.json}}\n{RUN}", encoding="utf-8")
    model = load_problem(tmp_path / "problem.yaml").model
    expected = load_model("llama-3.1-8b")
    assert model.name == "llama"
    for field in ("hidden_size", "vocab_size", "num_layers", "attention", "dense_mlp", "max_context"):
        assert getattr(model, field) == getattr(expected, field), field


def test_anchors_merge_keys_and_byte_order_mark(tmp_path: Path) -> None:
    """Plain YAML features still work: an anchor reused by an alias, a `<<` merge key, a UTF-8 BOM."""
    text = ("\ufeffmodel: llama-3.1-8b\n"
            "training:\n  <<: {seq_len: 4096, global_batch: 512}\n  precision: fp8\n"
            "hardware: {preset: h100-hgx, gpus: 64}\n"
            "search: {tp: &degrees [1, 2], cp: *degrees}\n")
    path = tmp_path / "p.yaml"
    path.write_bytes(text.encode("utf-8"))
    problem = load_problem(path)
    assert (problem.training.seq_len, problem.training.global_batch) == (4096, 512)
    assert problem.spec.search.tp == problem.spec.search.cp == [1, 2]


# --- errors: the file, the line, the field ------------------------------------------------------------


def test_wrong_type_names_line_field_and_value() -> None:
    """A text where a number belongs: line of the key, dotted field, the value and the expected type."""
    err = error_of(f"model: deepseek-v3\n{RUN}".replace("seq_len: 4096", "seq_len: 4k"))
    assert (err.file, err.line, err.field, err.value) == ("p.yaml", 3, "training.seq_len", "4k")
    assert err.expected is not None and err.expected.startswith("a whole number >= 1 and <= 16,777,216")
    assert str(err).startswith("p.yaml:3: Wrong type for `training.seq_len`: got text.")


def test_list_item_error_points_at_the_item_line() -> None:
    """An item of a block list is reported on its own line, as `search.ep.2`."""
    err = error_of(f"model: deepseek-v3\n{RUN}search:\n  ep:\n    - 8\n    - 16\n    - lots\n")
    assert (err.line, err.field, err.value) == (12, "search.ep.2", "lots")


def test_unknown_key_suggests_the_near_one() -> None:
    """A misspelt key: its own line, and the known key it is closest to."""
    err = error_of(f"model: deepseek-v3\n{RUN}".replace("global_batch", "global_bach"))
    assert (err.line, err.field) == (4, "training.global_bach")
    assert err.fix is not None and "did you mean `global_batch`" in err.fix


@pytest.mark.parametrize("section, key, fix", [
    ("mapping", "dp: 8", "parasol derives the data-parallel size as GPUs / (TP·PP·CP)"),
    ("search", "dp: [1, 2]", "parasol derives the data-parallel size"),
    ("mapping", "tensor-model-parallel-size: 8", "write `tp` (Megatron's tensor_model_parallel_size"),
    ("mapping", "micro_batch_size: 2", "write `mbs`"),
    ("mapping", "overlap_grad_reduce: true", "it is a Megatron option: write `overlap_grad_reduce:` under "
                                             "`framework.options`"),
    ("search", "fp8_param_gather: [true]", "write `fp8_param_gather:` under `framework.options`"),
])
def test_megatron_names_and_derived_sizes_name_the_key_to_write(section: str, key: str, fix: str) -> None:
    """Keys a Megatron user writes: the data-parallel size, which parasol derives, a node count where parasol counts
    GPUs, and Megatron's own names of mapping keys (the same name in `training` is global_batch, micro_batch: the
    key known there)."""
    err = error_of(f"model: deepseek-v3\n{RUN}{section}:\n  {key}\n")
    assert err.fix is not None and fix in err.fix
    err = error_of(f"model: deepseek-v3\n{RUN}".replace("global_batch", "global_batch_size"))
    assert err.fix is not None and "write `global_batch`" in err.fix
    err = error_of(f"model: deepseek-v3\n{RUN}".replace("global_batch", "fp8_recipe: mxfp8\n  global_batch"))
    assert err.fix is not None and "write `fp8_recipe:` under `framework.options`" in err.fix
    err = error_of(f"model: deepseek-v3\n{RUN}".replace("hardware:\n", "hardware:\n  nodes: 32\n"))
    assert err.fix is not None and "write `gpus:`, the GPUs in the job: nodes × GPUs per node" in err.fix


def test_inline_model_error_points_into_the_model() -> None:
    """An inline model's own validator (top_k <= num_experts) is reported at `model.moe.top_k`."""
    text = ("model:\n  catalog: deepseek-v3\n  moe:\n    top_k: 512\n" + RUN)
    err = error_of(text)
    assert (err.line, err.field, err.value) == (4, "model.moe.top_k", 512)
    assert "cannot exceed num_experts (256)" in str(err)


def test_hardware_override_error_points_at_the_override() -> None:
    """A bad hardware override is reported at its own line (the preset's fields are checked by
    hardware/presets)."""
    text = f"model: deepseek-v3\n{RUN}".replace("  gpus: 64", "  gpus: 64\n  topology:\n    gpus_per_rack: 72")
    err = error_of(text)
    assert (err.line, err.field) == (9, "hardware.topology.gpus_per_rack")


def test_duplicate_key_and_syntax_error_lines() -> None:
    """PyYAML would keep the second of two equal keys silently: the loader names both lines. An unclosed
    quote is reported where it opens, not at the end of the file."""
    dup = error_of(f"model: deepseek-v3\n{RUN}".replace("  global_batch: 512", "  global_batch: 512\n  seq_len: 1"))
    assert (dup.line, dup.field) == (5, "training.seq_len") and "first on line 3" in str(dup)
    quote = error_of(f"model: deepseek-v3\n{RUN}".replace("preset: h100-hgx", 'preset: "h100-hgx'))
    assert (quote.line, quote.field) == (6, "hardware.preset") and "never closed" in str(quote)


def test_bool_is_not_a_number() -> None:
    """YAML `true` where a count belongs is an error, not the number 1 (pydantic alone would accept it)."""
    err = error_of(f"model: deepseek-v3\n{RUN}".replace("gpus: 64", "gpus: true"))
    assert (err.line, err.field, err.value) == (7, "hardware.gpus", True)
