"""Megatron's `--pipeline-model-parallel-layout` strings, read into per-virtual-stage contents.

The language (Megatron-LM megatron/core/transformer/pipeline_parallel_layer_layout.py:282-321):
`E` embedding, `L` loss, `t` one decoder (transformer) layer, `m` one MTP layer; `|` ends a virtual
pipeline stage; `,` is cosmetic; `(body)*n` repeats a body that holds no parentheses n times and
`x*n` repeats one symbol (a `|` included), inside a body too. Example: `Ettt|(tt|)*29,m|L` is 32 stages.

Stages are in Megatron's flat order: stage s runs on pipeline rank s % PP as virtual stage s // PP,
which is also the order of parasol's `Mapping.layout`. Text Megatron would reject as an invalid
layer character (an unknown symbol, an unclosed or nested parenthesis, `*` without a count) raises
InputError naming the position; the semantic checks (one E first, one L last, decoder and MTP counts,
stages % PP) are rules in constraints/rules/pipeline.py, so `explain` reports them with their numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from parasol.bounds import MAX_EXPRESSION_CHARS, MAX_LAYERS
from parasol.errors import InputError

LAYER_SYMBOLS = {"E": "embedding", "L": "loss", "t": "decoder layer", "m": "MTP layer"}
STAGE_SEPARATOR = "|"
FIELD = "pipeline_model_parallel_layout"
EXAMPLE = "Ettt|(tt|)*29,m|L"
MAX_SYMBOLS = 4 * MAX_LAYERS
"""Most symbols a layout may expand to (decoder and MTP layers, stage separators, E and L are each at
most MAX_LAYERS): a repeat count beyond it is refused before anything is built."""


@dataclass(frozen=True)
class ParsedLayout:
    """A layout string expanded into the symbols of each virtual stage."""

    text: str
    num_layers: int
    stages: tuple[str, ...]

    @property
    def num_stages(self) -> int:
        """Virtual stages in all (PP·VPP once the layout matches the mapping)."""
        return len(self.stages)

    @property
    def block_counts(self) -> tuple[int, ...]:
        """Decoder layers per virtual stage: the counts parasol's `layout` holds."""
        return tuple(stage.count("t") for stage in self.stages)

    @property
    def flat(self) -> str:
        """Every symbol in layer order (stage after stage)."""
        return "".join(self.stages)

    def stages_with(self, symbol: str) -> tuple[int, ...]:
        """Indices of the stages that hold `symbol` at least once."""
        return tuple(i for i, stage in enumerate(self.stages) if symbol in stage)

    @property
    def embedding_stages(self) -> tuple[int, ...]:
        return self.stages_with("E")

    @property
    def loss_stages(self) -> tuple[int, ...]:
        return self.stages_with("L")

    @property
    def mtp_stages(self) -> tuple[int, ...]:
        return self.stages_with("m")

    @property
    def decoder_count(self) -> int:
        return self.flat.count("t")

    @property
    def missing_decoder_layers(self) -> int:
        """num_layers minus the decoder layers placed (negative when the layout places too many)."""
        return self.num_layers - self.decoder_count


def parse_pipeline_layout(text: str, num_layers: int) -> ParsedLayout:
    """Expand a layout string into its virtual stages; InputError (with the position) on bad text."""
    if not text:
        raise _error("The pipeline layout is empty.", text, None, "give one stage per virtual stage, "
                     f"separated by '|', e.g. {EXAMPLE}")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise _error(f"The pipeline layout has {len(text):,} characters, more than {MAX_EXPRESSION_CHARS:,}.",
                     text[:40] + "...", None, "fold repeated stages with (body)*n")
    expanded = _expand(text)
    return ParsedLayout(text=text, num_layers=num_layers, stages=tuple(expanded.split(STAGE_SEPARATOR)))


def _expand(text: str) -> str:
    """Drop commas (as Megatron does first), unroll `(body)*n` and `x*n`, reject anything else."""
    where = [i for i, ch in enumerate(text) if ch != ","]
    s = "".join(text[i] for i in where)
    out: list[str] = []
    size = k = 0
    while k < len(s):
        ch = s[k]
        if ch == "(":
            body, k = _group(s, k, text, where)
            count, k = _repeat(s, k, text, where, required=True)
        elif ch in LAYER_SYMBOLS or ch == STAGE_SEPARATOR:
            body = ch
            count, k = _repeat(s, k + 1, text, where, required=False)
        else:
            raise _bad_char(text, where[k])
        size += len(body) * count
        if size > MAX_SYMBOLS:
            raise _error(f"The pipeline layout expands to more than {MAX_SYMBOLS:,} symbols.", text, None,
                         f"check the repeat counts (a model has at most {MAX_LAYERS:,} layers)")
        out.append(body * count)
    return "".join(out)


def _at(where: list[int], k: int, text: str) -> int:
    """Position in the original text of index `k` of the comma-free text (its end when past it)."""
    return where[k] if k < len(where) else len(text)


def _group(s: str, start: int, text: str, where: list[int]) -> tuple[str, int]:
    """The expanded body (its own x*n unrolled) of the parenthesis opened at `start`, and the index after
    its ')'."""
    close = s.find(")", start + 1)
    if close < 0:
        pos = _at(where, start, text)
        raise _error(f"Unclosed '(' at position {pos} of the pipeline layout.", text, pos,
                     "close the group and give its repeat count, e.g. (tt|)*4")
    out: list[str] = []
    k = start + 1
    while k < close:
        ch = s[k]
        pos = _at(where, k, text)
        if ch == "(":
            raise _error(f"Nested '(' at position {pos} of the pipeline layout; Megatron repeats only groups "
                         "without parentheses.", text, pos,
                         "write the inner group out, e.g. (tttt|)*2 instead of ((tt)*2|)*2")
        if ch not in LAYER_SYMBOLS and ch != STAGE_SEPARATOR:
            raise _bad_char(text, pos)
        count, k = _repeat(s[:close], k + 1, text, where, required=False)
        if count > MAX_SYMBOLS:
            raise _error(f"The repeat count at position {pos} of the pipeline layout is above {MAX_SYMBOLS:,}.",
                         text, pos, f"check the repeat counts (a model has at most {MAX_LAYERS:,} layers)")
        out.append(ch * count)
    body = "".join(out)
    if close == start + 1:
        pos = _at(where, start, text)
        raise _error(f"Empty group '()' at position {pos} of the pipeline layout.", text, pos,
                     "put layers inside the parentheses or remove them")
    return body, close + 1


def _repeat(s: str, start: int, text: str, where: list[int], *, required: bool) -> tuple[int, int]:
    """A `*n` suffix at `start`: (n, index after it); (1, start) when absent and not required."""
    pos = _at(where, start, text)
    if not s.startswith("*", start):
        if required:
            raise _error(f"The group that ends before position {pos} of the pipeline layout has no repeat "
                         "count.", text, pos, "follow a (group) with *n, e.g. (tt|)*4")
        return 1, start
    end = start + 1
    while end < len(s) and s[end].isdigit():
        end += 1
    if end == start + 1:
        raise _error(f"'*' at position {pos} of the pipeline layout is not followed by a count.", text, pos,
                     "write the repeat count after '*', e.g. t*8")
    if end - start - 1 > len(str(MAX_SYMBOLS)):
        raise _error(f"The repeat count at position {pos} of the pipeline layout is above {MAX_SYMBOLS:,}.", text,
                     pos, f"check the repeat counts (a model has at most {MAX_LAYERS:,} layers)")
    return int(s[start + 1:end]), end


def _bad_char(text: str, position: int) -> InputError:
    """Megatron's 'Invalid layer character' as an InputError at `position`."""
    ch = text[position]
    known = ", ".join(f"{s} ({name})" for s, name in LAYER_SYMBOLS.items())
    return _error(f"Invalid layer character {ch!r} at position {position} of the pipeline layout.", text,
                  position, f"use only {known}, '|' between stages, ',' and (..)*n or x*n repeats")


def _error(detail: str, text: str, position: int | None, fix: str) -> InputError:
    """One InputError naming the field, the text (with a caret line when a position is known)."""
    value = text if position is None else f"{text} (position {position}: {text[:position]}^{text[position:]})"
    return InputError(detail, field=FIELD, value=value,
                      expected=f"a Megatron layout string such as {EXAMPLE}", fix=fix + ".")


def run_length(layout: Sequence[int]) -> str:
    """Stage sizes with repeats folded: [3, 4, 4, 4, 2] -> '3 4×3 2'."""
    parts: list[str] = []
    i = 0
    while i < len(layout):
        j = i
        while j < len(layout) and layout[j] == layout[i]:
            j += 1
        parts.append(str(layout[i]) if j - i == 1 else f"{layout[i]}×{j - i}")
        i = j
    return " ".join(parts)
