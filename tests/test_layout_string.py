"""problems/megatron/layout_string.py reads Megatron's --pipeline-model-parallel-layout language
(megatron-rules.yaml layout-valid-chars: E/L/t/m, '|' between stages, ',' cosmetic, (..)*n and x*n;
pipeline_parallel_layer_layout.py:282-321, whose docstring example is used below)."""

from __future__ import annotations

import pytest

from parasol.errors import InputError
from parasol.problems.megatron.layout_string import parse_pipeline_layout


def test_megatron_docstring_example() -> None:
    """'Ettt|(tt|)*29,m|L' is [E,t,t,t] + [t,t]*29 + [m] + [L]: 32 stages, 61 decoder layers."""
    parsed = parse_pipeline_layout("Ettt|(tt|)*29,m|L", 61)
    assert parsed.num_stages == 32
    assert parsed.block_counts == (3,) + (2,) * 29 + (0, 0)
    assert parsed.stages[0] == "Ettt" and parsed.stages[-2:] == ("m", "L")
    assert (parsed.embedding_stages, parsed.loss_stages, parsed.mtp_stages) == ((0,), (31,), (30,))
    assert parsed.decoder_count == 61 and parsed.missing_decoder_layers == 0


@pytest.mark.parametrize(("text", "stages"), [
    ("t*3", ("ttt",)),
    ("E,t,t|t,tL", ("Ett", "ttL")),
    ("E(t*8|)*3t*8L", ("E" + "t" * 8, "t" * 8, "t" * 8, "t" * 8 + "L")),
    ("(|t)*0Et|tL", ("Et", "tL")),
    ("Et|*2tL", ("Et", "", "tL")),
    ("t,*3", ("ttt",)),
])
def test_repeats_and_commas(text: str, stages: tuple[str, ...]) -> None:
    """Megatron drops commas first, unrolls (body)*n then x*n (a '|' too; an empty stage is kept)."""
    assert parse_pipeline_layout(text, 0).stages == stages


def test_seed_61_blocks_on_8_stages() -> None:
    """Seed 000 §61 个块怎样分给流水线: 7,8,8,8,8,8,7,7 written as a layout string."""
    parsed = parse_pipeline_layout("Et*7|(t*8|)*5t*7|t*7mL", 61)
    assert parsed.block_counts == (7, 8, 8, 8, 8, 8, 7, 7)
    assert parsed.mtp_stages == (7,)


@pytest.mark.parametrize(("text", "position"), [
    ("Ex|L", 1),
    ("Et(t", 2),
    ("E((t)*2)*2|L", 2),
    ("Et*|L", 2),
    ("E()*2|L", 1),
    ("E(t)|L", 4),
    ("E t|L", 1),
    ("E,,x", 3),
])
def test_malformed_text_names_the_position(text: str, position: int) -> None:
    """Text Megatron cannot read raises InputError with the field and the position in the original text."""
    with pytest.raises(InputError) as info:
        parse_pipeline_layout(text, 2)
    assert info.value.field == "pipeline_model_parallel_layout"
    assert f"position {position}" in info.value.detail


def test_empty_text() -> None:
    """An empty layout is an InputError, not zero stages."""
    with pytest.raises(InputError):
        parse_pipeline_layout("", 1)
