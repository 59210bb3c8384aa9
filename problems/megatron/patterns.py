"""Megatron's model-structure strings read without eval: --moe-layer-freq list expressions and
--hybrid-layer-pattern symbols."""

from __future__ import annotations

from dataclasses import dataclass

from parasol.bounds import MAX_EXPRESSION_CHARS, MAX_LAYERS, MAX_NESTING
from parasol.errors import InputError
from parasol.problems.megatron.flags import flag_error
from parasol.problems.model.architecture import (
    PATTERN_SYMBOLS,
    BlockKind,
)

ARGS = "Megatron-LM megatron/training/arguments.py"
CONFIG = "Megatron-LM megatron/core/transformer/transformer_config.py"
MAX_VALUE = 10**9
"""Largest number a list expression may hold or compute (a layer count or frequency is far smaller)."""


class ListExpr:
    """Recursive-descent reader of Megatron's list form: ints, [..], (..), + and * (arguments.py:245-253);
    text, nesting, numbers and lists are bounded (MAX_EXPRESSION_CHARS, MAX_NESTING, MAX_VALUE, MAX_LAYERS)."""

    def __init__(self, text: str, flag: str) -> None:
        self.text, self.flag, self.pos, self.depth = text, flag, 0, 0

    def fail(self, why: str) -> InputError:
        """The error naming the flag, the text and where reading stopped."""
        return flag_error(self.flag, self.text, "a whole number or a list expression such as ([0]*3+[1]*58)",
                    f"{why} (position {self.pos + 1}); Megatron accepts only digits, [ ] ( ) , + and *.")

    def peek(self) -> str:
        """The next character ('' at the end)."""
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self, ch: str) -> None:
        """Consume `ch` or fail."""
        if self.peek() != ch:
            raise self.fail(f"expected {ch!r}")
        self.pos += 1

    def parse(self) -> int | list[int]:
        """The whole expression."""
        if len(self.text) > MAX_EXPRESSION_CHARS:
            self.pos = MAX_EXPRESSION_CHARS
            raise self.fail(f"the text is longer than {MAX_EXPRESSION_CHARS:,} characters")
        value = self.expr()
        if self.pos != len(self.text):
            raise self.fail(f"unexpected {self.peek()!r}")
        return value

    def expr(self) -> int | list[int]:
        """term ('+' term)*: numbers add, lists concatenate."""
        value = self.term()
        while self.peek() == "+":
            self.pos += 1
            right = self.term()
            if isinstance(value, list) != isinstance(right, list):
                raise self.fail("cannot add a list and a number")
            value = value + right  # type: ignore[operator]
            if isinstance(value, list) and len(value) > MAX_LAYERS:
                raise self.fail(f"the list would exceed {MAX_LAYERS:,} layers")
        return value

    def term(self) -> int | list[int]:
        """factor ('*' factor)*: numbers multiply, a list repeats (at most MAX_LAYERS entries)."""
        value = self.factor()
        while self.peek() == "*":
            self.pos += 1
            right = self.factor()
            if isinstance(value, list) and isinstance(right, list):
                raise self.fail("cannot multiply two lists")
            lists = [x for x in (value, right) if isinstance(x, list)]
            if lists and len(lists[0]) * (right if isinstance(value, list) else value) > MAX_LAYERS:
                raise self.fail(f"the list would exceed {MAX_LAYERS:,} layers")
            if not lists and value * right > MAX_VALUE:  # type: ignore[operator]
                raise self.fail(f"the product exceeds {MAX_VALUE:,}")
            value = value * right  # type: ignore[operator]
        return value

    def factor(self) -> int | list[int]:
        """A number, a [list] or a (parenthesised expression)."""
        ch = self.peek()
        if ch.isdigit():
            start = self.pos
            while self.peek().isdigit():
                self.pos += 1
            if self.pos - start > len(str(MAX_VALUE)) or int(self.text[start:self.pos]) > MAX_VALUE:
                raise self.fail(f"a number above {MAX_VALUE:,}")
            return int(self.text[start:self.pos])
        if ch and ch in "([":
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise self.fail(f"brackets nested more than {MAX_NESTING} deep")
            value = self.group(ch)
            self.depth -= 1
            return value
        raise self.fail(f"unexpected {ch!r}" if ch else "the expression ends early")

    def group(self, ch: str) -> int | list[int]:
        """A (parenthesised expression) or a [list], its opening bracket `ch` next."""
        if ch == "(":
            self.pos += 1
            value = self.expr()
            self.take(")")
            return value
        self.pos += 1
        items: list[int] = []
        while self.peek() != "]":
            item = self.expr()
            if isinstance(item, list):
                raise self.fail("nested lists are not layer patterns")
            items.append(item)
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "]":
                raise self.fail("expected ',' or ']'")
        self.pos += 1
        return items


def parse_layer_freq(text: str, flag: str = "--moe-layer-freq") -> int | list[int]:
    """`--moe-layer-freq`: an int N (an MoE layer every N layers) or a list of 0/1 per layer."""
    value = ListExpr(text, flag).parse()
    if isinstance(value, int):
        if value < 1:
            raise flag_error(flag, text, "a whole number >= 1")
        return value
    if not value or any(v not in (0, 1) for v in value):
        raise flag_error(flag, text, "a list of 0 (dense) and 1 (MoE), one per layer")
    return value


def moe_pattern(freq: int | list[int], num_layers: int, flag: str = "--moe-layer-freq") -> list[int]:
    """MoE (1) / dense (0) per layer: `i % N == 0` for an int (gpt_layer_specs.py:643-660)."""
    if isinstance(freq, int):
        return [1 if i % freq == 0 else 0 for i in range(num_layers)]
    if len(freq) != num_layers:
        raise InputError(
            f"Invalid length of moe_layer_pattern: {len(freq)}, expected {num_layers} (rule "
            "moe-layer-freq-list-length, Megatron-LM megatron/core/models/gpt/gpt_layer_specs.py:643-660).",
            field=flag, value=len(freq), expected=f"one entry per layer ({num_layers})",
            fix="give one 0/1 per --num-layers layer.",
        )
    return freq


def leading_dense(pattern: list[int], flag: str) -> int:
    """Dense blocks before the MoE blocks; parasol models 'first k dense, then MoE' only."""
    k = pattern.index(1) if 1 in pattern else len(pattern)
    if any(v == 0 for v in pattern[k:]):
        raise InputError(
            "The launch line interleaves dense and MoE layers; parasol models leading dense layers "
            "followed by MoE layers only.", field=flag, value="".join(map(str, pattern)),
            expected="a pattern like ([0]*3+[1]*58)",
            fix="describe the model in a problem file, or use a leading-dense pattern.",
        )
    return k


_ATTENTION = {"*": None, "D": None, "C": 4, "H": 128, "W": 0}
_MLP = {"-": BlockKind.dense, "E": BlockKind.moe}
_DSV4 = {"C", "H", "W"}


@dataclass(frozen=True)
class HybridPattern:
    """Blocks of a hybrid pattern: one per attention symbol with the MLP symbol that follows it
    (dev@d48bd6be hybrid_layer_allocation.py Symbols: C CSA ratio 4, H HCA ratio 128, W window 0)."""

    segments: tuple[int, ...]
    mlp: tuple[BlockKind, ...]
    ratios: tuple[int | None, ...]
    mtp_depth: int
    layers: str | None = None
    """The main pattern without '|', one block per symbol, when it holds Mamba (M) or gated DeltaNet (G)
    layers: then Megatron's HybridModel counts every symbol as a layer (hybrid_layer_allocation.py:14-25)."""

    @property
    def dsv4(self) -> bool:
        """Whether any block uses DeepSeek-V4 attention (C, H or W)."""
        return any(r is not None for r in self.ratios)


LAYER_WISE = {"M", "G"}
"""Symbols that make a pattern layer-wise: one block per symbol (Nemotron-H, Nemotron 3, hybrid GDN)."""


def parse_layer_pattern(text: str, flag: str = "--hybrid-layer-pattern") -> HybridPattern:
    """A Mamba/GDN hybrid pattern (one holding an M or G layer: parse_hybrid_pattern): every symbol one block,
    blocks per `|` segment. A segment may be empty: Megatron builds that virtual stage with no layer
    (hybrid_layer_allocation.py select_pipeline_segment takes whatever symbols a segment has, none included), as
    parasol's own cuts leave some of the first and last rank's (problems/empty_stages.py)."""
    main, *mtp = text.split("/")
    bad = sorted(set(main) - set(PATTERN_SYMBOLS) - {"|"})
    if bad:
        raise hybrid_error(flag, text, f"the symbols {bad} in a Mamba/GDN pattern (parasol reads "
                                       + ", ".join(PATTERN_SYMBOLS) + " and | there)")
    segments = tuple(len(segment) for segment in main.split("|"))
    layers = main.replace("|", "")
    mlp = tuple(PATTERN_SYMBOLS[ch][1] for ch in layers)
    return HybridPattern(segments, mlp, tuple(None for _ in layers), len(mtp), layers)


def parse_hybrid_pattern(text: str, flag: str = "--hybrid-layer-pattern") -> HybridPattern:
    """Blocks per `|` segment: one per symbol when the pattern has Mamba or GDN layers, else each block an
    attention symbol followed by its MLP symbol."""
    if LAYER_WISE & set(text.split("/")[0]):
        return parse_layer_pattern(text, flag)
    main, *mtp = text.split("/")
    segments, mlp, ratios = [], [], []
    for segment in main.split("|"):
        count, open_block = 0, False
        for ch in segment:
            if ch in _ATTENTION:
                if open_block:
                    raise hybrid_error(flag, text, "an attention layer without an MLP layer after it")
                ratios.append(_ATTENTION[ch])
                count, open_block = count + 1, True
            elif ch in _MLP:
                if not open_block:
                    raise hybrid_error(flag, text, "an MLP layer without an attention layer before it "
                                                    "in the same segment")
                mlp.append(_MLP[ch])
                open_block = False
            else:
                raise hybrid_error(flag, text, f"the symbol {ch!r} (parasol reads * D C H W attention, "
                                                "- E MLP, and M G layers)")
        if open_block:
            raise hybrid_error(flag, text, "a segment that ends between a block's attention and its MLP")
        segments.append(count)
    return HybridPattern(tuple(segments), tuple(mlp), tuple(ratios), len(mtp))


def hybrid_error(flag: str, text: str, what: str) -> InputError:
    """The error for a hybrid pattern parasol cannot read as transformer blocks."""
    return InputError(f"Cannot read {flag}: it has {what}.", field=flag, value=text,
                      expected="attention+MLP pairs such as CE|HE|WE, '|' between pipeline segments",
                      fix="give parasol whole transformer blocks per segment, or describe the layout "
                          "with --pipeline-model-parallel-layout.")
