"""Read a Megatron-LM launch line or launch script (`explain --megatron-args`, issue 3 part 4: "a launch
script is enough"): the model, the parallel mapping, the Megatron options and the training run it
describes, with Megatron-LM's own defaults for what it leaves out.

Defaults and rewrites follow NVIDIA/Megatron-LM main@d98e8a64 (megatron/training/arguments.py,
megatron/core/transformer/transformer_config.py) and, for the DeepSeek-V4 hybrid pattern, dev@d48bd6be.
Nothing is executed. The shell layer understands `NAME=value`, arrays `NAME=( … )` / `NAME+=( … )`,
`$NAME`, `${NAME}`, `${NAME[@]}` and `${NAME:-default}`; a variable it cannot resolve is named in an
InputError when a modelled flag needs it, and in a note otherwise. Every flag parasol does not model
is kept and reported as a note.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from parasol.constraints.core.base import MegatronStage
from parasol.errors import InputError
from parasol.problems.loader import Problem, load_problem, problem_from_parts
from parasol.problems.mapping import Mapping
from parasol.problems.mapping_input import build_mapping, parse_sets
from parasol.problems.megatron.layout_string import parse_pipeline_layout
from parasol.problems.model.architecture import (
    BlockKind,
    DSV4Attention,
    ModelArchitecture,
    architecture_from_dict,
)
from parasol.problems.model.catalog import load_model
from parasol.problems.options import MegatronOptions
from parasol.problems.schema import RECOMPUTE_MODULES, Training

ARGS = "Megatron-LM megatron/training/arguments.py"
CONFIG = "Megatron-LM megatron/core/transformer/transformer_config.py"
SOURCE = "--megatron-args"

_OPEN, _CLOSE = "\ue000", "\ue001"
_UNRESOLVED = re.compile(f"{_OPEN}([^{_CLOSE}]*){_CLOSE}")
_ASSIGN = re.compile(r"^\s*(?:(?:export|local|readonly|declare(?:\s+-\w+)*)\s+)?([A-Za-z_]\w*)(\+?)=(.*)$", re.S)
_VAR = re.compile(
    r"\$\{([A-Za-z_]\w*|\d+)(\[[@*]\])?(?::?-((?:[^{}]|\{[^{}]*\})*))?\}"
    r"|\$([A-Za-z_]\w*|\d)"
    r"|(\$\(\(.*?\)\)|\$\([^()]*\)|`[^`]*`|\$\{[^}]*\})"
)
_CONTROL = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac"}
_LAUNCHER_GPUS = ("--nproc_per_node", "--nproc-per-node")


@dataclass(frozen=True)
class LaunchWarning:
    """A flag Megatron rewrites or has deprecated, or a default parasol had to assume."""

    flag: str
    message: str
    source: str
    stage: MegatronStage = MegatronStage.arguments

    def as_dict(self) -> dict:
        """The shape of `explain --json` warnings, under the rule id `megatron-args`."""
        return {"rule": "megatron-args", "flag": self.flag, "message": self.message, "source": self.source,
                "stage": self.stage.value}


@dataclass(frozen=True)
class ParsedLaunch:
    """What a launch line says. `mapping_fields`, `training_fields` and the options in
    `options.model_fields_set` hold only what the line gives (explicitly or through a flag that
    implies it), so they can override a problem file; Megatron's defaults for the rest are applied
    when there is no problem file (`launch_problem`)."""

    model: ModelArchitecture | None
    mapping_fields: dict
    options: MegatronOptions
    training_fields: dict
    notes: tuple[str, ...]
    warnings: tuple[LaunchWarning, ...] = ()
    launcher_gpus: int | None = None
    deepseek_v4: bool = False
    model_unavailable: str | None = None


# ----------------------------------------------------------------------------------------------
# Shell layer: logical lines, variables, the launch command's words


def _unresolved(name: str) -> str:
    """The placeholder for a shell variable whose value is unknown."""
    return f"{_OPEN}{name}{_CLOSE}"


def _unresolved_names(text: str) -> list[str]:
    """Names of the unresolved variables inside `text`."""
    return _UNRESOLVED.findall(text)


def _shown(text: str) -> str:
    """`text` with placeholders written back as `$NAME`."""
    return _UNRESOLVED.sub(lambda m: m.group(1) if m.group(1).startswith(("$", "`")) else f"${m.group(1)}", text)


@dataclass
class _Shell:
    """Scalar and array variables assigned so far in a script."""

    scalars: dict[str, str] = dataclasses.field(default_factory=dict)
    arrays: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def array_words(self, name: str) -> str:
        """`${NAME[@]}` as shell text: a `--flag value` element splits into words, others stay whole."""
        words = []
        for element in self.arrays[name]:
            split = element.startswith("--") and " " in element
            words.append(element if split else shlex.quote(element))
        return " ".join(words)


def _expand(text: str, shell: _Shell) -> str:
    """Substitute known variables; unknown ones become placeholders (defaults of `${X:-d}` apply)."""
    def sub(m: re.Match[str]) -> str:
        if m.group(5) is not None:
            return _unresolved(m.group(5))
        name = m.group(1) or m.group(4)
        if name in shell.arrays:
            if m.group(2):
                return shell.array_words(name)
            return shlex.quote(shell.arrays[name][0]) if shell.arrays[name] else ""
        if name in shell.scalars:
            return shell.scalars[name]
        if m.group(3) is not None:
            return _expand(m.group(3), shell)
        return _unresolved(name)
    return _VAR.sub(sub, text)


def _unclosed(text: str) -> bool:
    """Whether `text` ends inside a quote or an open parenthesis (comments skipped)."""
    depth, quote, prev, i = 0, "", " ", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"':
                i += 1
        elif ch in "'\"":
            quote = ch
        elif ch == "\\":
            i += 1
        elif ch == "#" and prev.isspace():
            end = text.find("\n", i)
            if end < 0:
                break
            i, ch = end, "\n"
        elif ch in "()":
            depth += 1 if ch == "(" else -1
        prev = ch
        i += 1
    return bool(quote) or depth > 0


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations, multi-line quotes and multi-line arrays; keep each start line."""
    physical = text.replace("\r\n", "\n").split("\n")
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(physical):
        start, line = i + 1, physical[i]
        while i + 1 < len(physical) and (line.endswith("\\") or _unclosed(line)):
            i += 1
            line = line[:-1] + " " + physical[i] if line.endswith("\\") else line + "\n" + physical[i]
        out.append((start, line))
        i += 1
    return out


def _split(text: str, line: int, source: str) -> list[str]:
    """Shell words of `text` (quotes removed, comments dropped)."""
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise InputError(f"Cannot split the launch line into words: {exc}.", file=source, line=line,
                         fix="close the quote on that line (or the line it continues).") from None


def _assign(m: re.Match[str], line: int, shell: _Shell, source: str) -> None:
    """Record `NAME=value`, `NAME=( … )` or `NAME+=( … )`."""
    name, append, value = m.group(1), m.group(2) == "+", m.group(3).strip()
    if value.startswith("("):
        body = value[1:value.rindex(")")] if ")" in value else value[1:]
        words = _split(_expand(body, shell), line, source)
        shell.arrays[name] = (shell.arrays.get(name, []) if append else []) + words
        return
    expanded = " ".join(_split(_expand(value, shell), line, source))
    shell.scalars[name] = (shell.scalars.get(name, "") if append else "") + expanded


@dataclass(frozen=True)
class _Command:
    """The training command's flag words, the launcher's words before the program, and script notes."""

    words: tuple[str, ...]
    launcher: tuple[str, ...]
    notes: tuple[str, ...]


def _program_index(words: list[str]) -> int | None:
    """Position of the training program (`….py`) when flags follow it."""
    for i, w in enumerate(words):
        if w.endswith(".py") and any(x.startswith("--") for x in words[i + 1:]):
            return i
    return None


_OPERATOR = re.compile(r"^(?:\|\|?|&&?|;|\d*[<>].*|[<>].*)$")


def _until_operator(words: list[str]) -> list[str]:
    """The command's own words: up to a pipe, `;`, `&&`, `&` or a redirection (`2>&1 | tee log`)."""
    out: list[str] = []
    for w in words:
        if _OPERATOR.match(w):
            break
        if w.endswith(";"):
            out.append(w[:-1])
            break
        out.append(w)
    return out


def _command_words(words: list[str], line: int, source: str) -> list[str]:
    """Words with a quoted command string (`bash -c "… pretrain_gpt.py …"`) split into its own words."""
    out: list[str] = []
    for w in words:
        nested = ".py" in w and len(w.split()) > 1
        out.extend(_split(w, line, source) if nested else [w])
    return out


def launch_command(text: str, source: str = SOURCE) -> _Command:
    """Find the Megatron-LM command in a launch line or script and return its flag words."""
    shell = _Shell()
    candidates: list[tuple[int, list[str]]] = []
    loose: list[list[str]] = []
    control = False
    for line, raw in _logical_lines(text):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        m = _ASSIGN.match(raw)
        if m:
            _assign(m, line, shell, source)
            continue
        words = _command_words(_split(_expand(raw, shell), line, source), line, source)
        if words and words[0] in _CONTROL | {"[[", "["}:
            control = True
        if _program_index(words) is not None:
            candidates.append((line, words))
        elif words and words[0] not in _CONTROL | {"[[", "["}:
            loose.append(words)
    notes = ["the script has shell conditionals or loops; parasol read every branch in order"] if control else []
    if candidates:
        if len(candidates) > 1:
            notes.append(f"{len(candidates)} training commands found; read the last one "
                         f"(line {candidates[-1][0]})")
        words = candidates[-1][1]
        at = _program_index(words)
        assert at is not None
        return _Command(tuple(_until_operator(words[at + 1:])), tuple(words[:at]), tuple(notes))
    words = [w for ws in loose for w in ws]
    if not words or not words[0].startswith("--"):
        raise InputError(
            "No Megatron-LM flags found in the launch line.", field=SOURCE,
            value=_shown(" ".join(words))[:80] if words else None,
            expected="`torchrun … pretrain_gpt.py --flag value …`, or flags alone starting with `--`",
            fix="pass the command that starts training, or just its `--flag value` part.", file=source,
        )
    return _Command(tuple(words), (), tuple(notes))


def _launcher_gpus(launcher: tuple[str, ...]) -> int | None:
    """GPUs torchrun starts: --nproc_per_node × --nnodes (1 node when absent), when both are numbers."""
    values: dict[str, str] = {}
    for i, w in enumerate(launcher):
        name, eq, val = w.partition("=")
        if name in (*_LAUNCHER_GPUS, "--nnodes"):
            values[name] = val if eq else (launcher[i + 1] if i + 1 < len(launcher) else "")
    per_node = next((values[k] for k in _LAUNCHER_GPUS if k in values), None)
    nodes = values.get("--nnodes", "1")
    if per_node is None or not per_node.isdigit() or not nodes.isdigit():
        return None
    return int(per_node) * int(nodes)


# ----------------------------------------------------------------------------------------------
# Flags: argparse's reading (last value wins), typed getters that name the flag on bad values


class _Flags:
    """The command's flags as argparse sees them; the flags no mapper reads are 'not modelled'."""

    def __init__(self, words: tuple[str, ...]) -> None:
        self.values: dict[str, tuple[str, ...]] = {}
        self.history: dict[str, list[tuple[str, ...]]] = {}
        self.stray: list[str] = []
        self.used: set[str] = set()
        name: str | None = None
        for word in words:
            if word == "--":
                continue
            if word.startswith("--"):
                name, eq, value = word.partition("=")
                self.values.pop(name, None)
                self.values[name] = (value,) if eq else ()
                self.history.setdefault(name, []).append(self.values[name])
            elif name is None:
                self.stray.append(word)
            else:
                self.values[name] += (word,)
                self.history[name][-1] = self.values[name]

    def given(self, name: str) -> bool:
        """Whether the flag appears (does not count as reading it)."""
        return name in self.values

    def _read(self, name: str) -> tuple[str, ...] | None:
        """The flag's words, marking it read; unresolved shell variables are an error here."""
        if name not in self.values:
            return None
        self.used.add(name)
        values = self.values[name]
        names = [n for v in values for n in _unresolved_names(v)]
        if names:
            shown = ", ".join(_shown(_unresolved(n)) for n in names)
            raise InputError(
                f"{name} takes its value from shell variable(s) {shown}, which parasol cannot resolve.",
                field=name, fix="assign the variable in the script (NAME=value) or write the value into "
                                "the launch line.",
            )
        return values

    def switch(self, name: str) -> bool:
        """A store_true flag: present or not; a value after it is an error."""
        values = self._read(name)
        if values:
            raise _bad(name, " ".join(values), "no value (it is an on/off switch)",
                       f"remove {values[0]!r} after {name}, or check for a missing flag name before it.")
        return values is not None

    def one(self, name: str) -> str | None:
        """The single value of a flag."""
        values = self._read(name)
        if values is None:
            return None
        if len(values) != 1:
            raise _bad(name, " ".join(values) or None, "exactly one value",
                       f"give one value after {name}, e.g. `{name} 8`.")
        return values[0]

    def integer(self, name: str, minimum: int = 1) -> int | None:
        """A whole-number flag, at least `minimum`."""
        text = self.one(name)
        if text is None:
            return None
        try:
            value = int(text)
        except ValueError:
            raise _bad(name, text, f"a whole number >= {minimum}") from None
        if value < minimum:
            raise _bad(name, text, f"a whole number >= {minimum}")
        return value

    def number(self, name: str) -> float | None:
        """A real-number flag."""
        text = self.one(name)
        if text is None:
            return None
        try:
            return float(text)
        except ValueError:
            raise _bad(name, text, "a number, e.g. 1.25") from None

    def choice(self, name: str, choices: tuple[str, ...]) -> str | None:
        """A flag with a fixed set of values (Megatron's argparse `choices`)."""
        text = self.one(name)
        if text is not None and text not in choices:
            raise _bad(name, text, "one of " + ", ".join(choices))
        return text

    def words(self, name: str) -> tuple[str, ...] | None:
        """A flag taking one or more values (argparse nargs='+')."""
        values = self._read(name)
        if values is not None and not values:
            raise _bad(name, None, "one or more values", f"give the values after {name}.")
        return values

    def take_given(self, names: tuple[str, ...]) -> list[str]:
        """Mark the given flags among `names` as read; return them as `flag value` texts."""
        taken = [name for name in self.values if name in names]
        self.used.update(taken)
        return [" ".join((name, *map(_shown, self.values[name]))) for name in taken]

    def unused(self) -> list[str]:
        """Notes for the flags no mapper read, in launch-line order."""
        notes = []
        for name, values in self.values.items():
            if name in self.used:
                continue
            text = _shown(" ".join(values))
            notes.append(f"not modelled: {name}" + (f" {text}" if text else ""))
        return notes

    def repeat_notes(self) -> list[str]:
        """Flags given more than once with different values (argparse keeps the last)."""
        return [f"{name} is given {len(seen)} times with different values; Megatron keeps the last "
                f"({_shown(' '.join(self.values[name]))})"
                for name, seen in self.history.items() if len(set(seen)) > 1]


def _bad(flag: str, value: str | None, expected: str, fix: str | None = None) -> InputError:
    """The error for a malformed flag value."""
    return InputError(f"Cannot read {flag} in the launch line.", field=flag, value=value, expected=expected,
                      fix=fix or f"correct the value after {flag}.")


# ----------------------------------------------------------------------------------------------
# --moe-layer-freq list expressions, e.g. "([0]*3+[1]*58)", without eval


MAX_LAYERS = 100_000


class _ListExpr:
    """Recursive-descent reader of Megatron's list form: ints, [..], (..), + and * (arguments.py:245-253)."""

    def __init__(self, text: str, flag: str) -> None:
        self.text, self.flag, self.pos = text, flag, 0

    def fail(self, why: str) -> InputError:
        """The error naming the flag, the text and where reading stopped."""
        return _bad(self.flag, self.text, "a whole number or a list expression such as ([0]*3+[1]*58)",
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
            value = value * right  # type: ignore[operator]
        return value

    def factor(self) -> int | list[int]:
        """A number, a [list] or a (parenthesised expression)."""
        ch = self.peek()
        if ch.isdigit():
            start = self.pos
            while self.peek().isdigit():
                self.pos += 1
            return int(self.text[start:self.pos])
        if ch == "(":
            self.pos += 1
            value = self.expr()
            self.take(")")
            return value
        if ch == "[":
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
        raise self.fail(f"unexpected {ch!r}" if ch else "the expression ends early")


def parse_layer_freq(text: str, flag: str = "--moe-layer-freq") -> int | list[int]:
    """`--moe-layer-freq`: an int N (an MoE layer every N layers) or a list of 0/1 per layer."""
    value = _ListExpr(text, flag).parse()
    if isinstance(value, int):
        if value < 1:
            raise _bad(flag, text, "a whole number >= 1")
        return value
    if not value or any(v not in (0, 1) for v in value):
        raise _bad(flag, text, "a list of 0 (dense) and 1 (MoE), one per layer")
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


# ----------------------------------------------------------------------------------------------
# --hybrid-layer-pattern (HybridModel): '|' splits pipeline segments, '/' starts MTP depths


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

    @property
    def dsv4(self) -> bool:
        """Whether any block uses DeepSeek-V4 attention (C, H or W)."""
        return any(r is not None for r in self.ratios)


def parse_hybrid_pattern(text: str, flag: str = "--hybrid-layer-pattern") -> HybridPattern:
    """Blocks per `|` segment, each block an attention symbol followed by its MLP symbol."""
    main, *mtp = text.split("/")
    segments, mlp, ratios = [], [], []
    for segment in main.split("|"):
        count, open_block = 0, False
        for ch in segment:
            if ch in _ATTENTION:
                if open_block:
                    raise _hybrid_error(flag, text, "an attention layer without an MLP layer after it")
                ratios.append(_ATTENTION[ch])
                count, open_block = count + 1, True
            elif ch in _MLP:
                if not open_block:
                    raise _hybrid_error(flag, text, "an MLP layer without an attention layer before it "
                                                    "in the same segment")
                mlp.append(_MLP[ch])
                open_block = False
            else:
                raise _hybrid_error(flag, text, f"the symbol {ch!r} (parasol models * D C H W attention "
                                                "and - E MLP layers; Mamba/GDN are not modelled)")
        if open_block:
            raise _hybrid_error(flag, text, "a segment that ends between a block's attention and its MLP")
        segments.append(count)
    return HybridPattern(tuple(segments), tuple(mlp), tuple(ratios), len(mtp))


def _hybrid_error(flag: str, text: str, what: str) -> InputError:
    """The error for a hybrid pattern parasol cannot read as transformer blocks."""
    return InputError(f"Cannot read {flag}: it has {what}.", field=flag, value=text,
                      expected="attention+MLP pairs such as CE|HE|WE, '|' between pipeline segments",
                      fix="give parasol whole transformer blocks per segment, or describe the layout "
                          "with --pipeline-model-parallel-layout.")


# ----------------------------------------------------------------------------------------------
# The model


_REQUIRED_MODEL = ("--num-layers", "--hidden-size", "--num-attention-heads")
MODEL_FLAGS = (
    *_REQUIRED_MODEL, "--ffn-hidden-size", "--kv-channels", "--group-query-attention", "--num-query-groups",
    "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq", "--moe-router-enable-expert-bias", "--multi-latent-attention", "--q-lora-rank",
    "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--qk-layernorm", "--swiglu",
    "--squared-relu", "--quick-geglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
    "--normalization", "--padded-vocab-size", "--vocab-size", "--make-vocab-size-divisible-by",
    "--mtp-num-layers", "--max-position-embeddings", "--position-embedding-type",
)
"""Flags that describe the model; with a problem file they are compared with its model, not used."""
DEFAULT_VOCAB = 50257


@dataclass
class _Context:
    """What the mappers share: the flags, notes and warnings collected, and the reference model."""

    flags: _Flags
    reference: ModelArchitecture | None
    notes: list[str] = dataclasses.field(default_factory=list)
    warnings: list[LaunchWarning] = dataclasses.field(default_factory=list)
    pattern: HybridPattern | None = None
    moe_layer_recompute: bool = False


def _activation(f: _Flags) -> str:
    """MLP activation: --swiglu, --squared-relu, --quick-geglu, else GeLU (arguments.py:2444-2455)."""
    if f.switch("--swiglu"):
        return "swiglu"
    if f.switch("--squared-relu"):
        return "squared_relu"
    if f.switch("--quick-geglu"):
        return "geglu"
    return "gelu"


def _ffn_size(f: _Flags, hidden: int, activation: str) -> int:
    """--ffn-hidden-size, default 4h, or int(8h/3 /64)·64 with SwiGLU (arguments.py:1320-1329)."""
    given = f.integer("--ffn-hidden-size")
    if given is not None:
        return given
    return int((4 * hidden * 2 / 3) / 64) * 64 if activation == "swiglu" else 4 * hidden


def _vocab(c: _Context, tp: int) -> int:
    """--padded-vocab-size, else --vocab-size padded to a multiple of 128·TP (build_tokenizer.py:133-146)."""
    f = c.flags
    padded = f.integer("--padded-vocab-size")
    if padded is not None:
        return padded
    divisible = f.integer("--make-vocab-size-divisible-by") or 128
    vocab = f.integer("--vocab-size")
    if vocab is None:
        vocab = DEFAULT_VOCAB
    if not f.given("--vocab-size") and c.reference is None:
        c.warnings.append(LaunchWarning(
            "--vocab-size", f"no --padded-vocab-size or --vocab-size: assumed the GPT-2 BPE vocabulary "
            f"({DEFAULT_VOCAB:,} tokens) that Megatron's default tokenizer uses; pass the real size",
            "Megatron-LM megatron/core/tokenizers/utils/build_tokenizer.py:133-152", MegatronStage.not_megatron))
    multiple = divisible * tp
    return -(-vocab // multiple) * multiple


def _attention(c: _Context, hidden: int, heads: int) -> dict:
    """GQA/MHA or MLA from the attention flags, with Megatron's defaults."""
    f = c.flags
    if f.switch("--multi-latent-attention"):
        if f.given("--group-query-attention"):
            c.notes.append("--group-query-attention with --multi-latent-attention: Megatron rejects the "
                           "pair (rule mla-excludes-gqa); parasol used MLA")
        q_rank = f.integer("--q-lora-rank")
        return {"kind": "mla", "num_heads": heads, "q_lora_rank": q_rank,
                "kv_lora_rank": f.integer("--kv-lora-rank") or 32,
                "qk_nope_head_dim": f.integer("--qk-head-dim") or 128,
                "qk_rope_head_dim": f.integer("--qk-pos-emb-head-dim") or 64,
                "v_head_dim": f.integer("--v-head-dim") or 128}
    groups = f.integer("--num-query-groups")
    kv_heads = heads
    if f.switch("--group-query-attention"):
        kv_heads = groups or 1
    elif groups is not None:
        c.notes.append("--num-query-groups without --group-query-attention: Megatron ignores it "
                       "(argument_utils.py:330-333) and uses one KV head per query head")
    head_dim = f.integer("--kv-channels")
    if head_dim is None:
        if hidden % heads:
            raise InputError(
                f"--hidden-size {hidden} is not a multiple of --num-attention-heads {heads} and "
                "--kv-channels is not given (rule hidden-divisible-by-heads, arguments.py:1331-1333).",
                field="--kv-channels", fix="pass --kv-channels (the head dimension).")
        head_dim = hidden // heads
    return {"kind": "gqa", "num_heads": heads, "num_kv_heads": kv_heads, "head_dim": head_dim,
            "qk_norm": f.switch("--qk-layernorm"), "bias": not f.given("--disable-bias-linear")}


def _blocks_mlp(c: _Context, num_layers: int) -> list[int]:
    """MoE (1) / dense (0) per block, from the hybrid pattern or --moe-layer-freq."""
    if c.pattern is not None:
        return [1 if k is BlockKind.moe else 0 for k in c.pattern.mlp]
    text = c.flags.one("--moe-layer-freq")
    freq = parse_layer_freq(text) if text is not None else 1
    return moe_pattern(freq, num_layers)


def _moe(c: _Context, hidden: int, ffn: int, activation: str, num_layers: int) -> tuple[dict | None, int]:
    """The MoE section and the number of leading dense blocks."""
    f = c.flags
    experts = f.integer("--num-experts", minimum=0)
    if not experts:
        return None, 0
    shared = f.integer("--moe-shared-expert-intermediate-size")
    moe = {"num_experts": experts, "top_k": f.integer("--moe-router-topk") or 2,
           "expert_intermediate_size": f.integer("--moe-ffn-hidden-size") or ffn,
           "num_shared_experts": 1 if shared else 0, "shared_intermediate_size": shared,
           "activation": activation, "router_bias": f.switch("--moe-router-enable-expert-bias")}
    flag = "--hybrid-layer-pattern" if c.pattern is not None else "--moe-layer-freq"
    return moe, leading_dense(_blocks_mlp(c, num_layers), flag)


def _max_positions(c: _Context) -> int | None:
    """--max-position-embeddings (required by Megatron, arguments.py:1314-1317); --seq-length stands in."""
    f = c.flags
    given = f.integer("--max-position-embeddings")
    if given is None and f.given("--seq-length"):
        c.notes.append("--max-position-embeddings is missing (Megatron requires it); parasol used --seq-length")
        return f.integer("--seq-length")
    return given


def _model_gaps(c: _Context) -> str | None:
    """Why the line does not describe a model parasol can build, or None when it does."""
    f = c.flags
    if c.pattern is not None and c.pattern.dsv4:
        return ("the hybrid pattern uses DeepSeek-V4 attention (C/H/W), whose dimensions (o_groups, "
                "indexer, mHC) are not launch flags parasol reads")
    needed = [n for n in _REQUIRED_MODEL if not f.given(n) and not (n == "--num-layers" and c.pattern)]
    if len(needed) == len(_REQUIRED_MODEL):
        return "the launch line has no model flags (" + ", ".join(_REQUIRED_MODEL) + ")"
    if needed:
        return "the launch line lacks " + ", ".join(needed)
    return None


def _model(c: _Context, tp: int) -> ModelArchitecture | None:
    """The architecture the flags describe, with Megatron's defaults (None when flags are missing)."""
    f = c.flags
    hidden = f.integer("--hidden-size")
    heads = f.integer("--num-attention-heads")
    layers = f.integer("--num-layers")
    if c.pattern is not None:
        if layers is not None and layers != len(c.pattern.mlp):
            c.notes.append(f"--num-layers {layers} differs from the {len(c.pattern.mlp)} blocks of "
                           "--hybrid-layer-pattern; Megatron derives the layers from the pattern")
        layers = len(c.pattern.mlp)
    assert hidden is not None and heads is not None and layers is not None
    activation = _activation(f)
    ffn = _ffn_size(f, hidden, activation)
    bias = not f.switch("--disable-bias-linear")
    moe, first_dense = _moe(c, hidden, ffn, activation, layers)
    position = f.choice("--position-embedding-type", ("learned_absolute", "rope", "yarn", "mrope", "relative", "none"))
    max_positions = _max_positions(c)
    learned = position in (None, "learned_absolute")
    if learned and max_positions is None:
        raise InputError("Learned absolute position embeddings (Megatron's default) need "
                         "--max-position-embeddings.", field="--max-position-embeddings",
                         fix="pass --max-position-embeddings, or --position-embedding-type rope.")
    mtp = f.integer("--mtp-num-layers", minimum=0) or 0
    if c.pattern is not None and c.pattern.mtp_depth and not mtp:
        mtp = c.pattern.mtp_depth
    data = {
        "name": "megatron-args",
        "hidden_size": hidden,
        "vocab_size": _vocab(c, tp),
        "num_layers": layers,
        "attention": _attention(c, hidden, heads),
        "dense_mlp": {"intermediate_size": ffn, "activation": activation, "bias": bias}
        if moe is None or first_dense else None,
        "moe": moe,
        "first_dense_layers": first_dense,
        "norm": {"RMSNorm": "rmsnorm", "LayerNorm": "layernorm"}[
            f.choice("--normalization", ("LayerNorm", "RMSNorm")) or "LayerNorm"],
        "tied_embeddings": not f.switch("--untie-embeddings-and-output-weights"),
        "learned_position_embeddings": max_positions if learned and max_positions else 0,
        "mtp_layers": mtp,
        "max_context": max_positions,
        "notes": "built from a Megatron-LM launch line",
    }
    return architecture_from_dict(data, where="model from --megatron-args")


def _compare_reference(c: _Context) -> None:
    """Notes where the launch line's model flags disagree with the problem's model (which is used)."""
    ref, f = c.reference, c.flags
    assert ref is not None
    checks: dict[str, int | None] = {
        "--num-layers": ref.num_layers, "--hidden-size": ref.hidden_size,
        "--num-attention-heads": ref.attention.num_heads,
        "--num-experts": ref.moe.num_experts if ref.moe else 0,
        "--moe-router-topk": ref.moe.top_k if ref.moe else None,
        "--mtp-num-layers": ref.mtp_layers,
    }
    for flag, expected in checks.items():
        value = f.integer(flag, minimum=0) if f.given(flag) else None
        if value is not None and expected is not None and value != expected:
            c.notes.append(f"{flag} {value} differs from the problem's model ({ref.name}: {expected}); "
                           "the problem's model is used")
    freq = f.one("--moe-layer-freq")
    if freq is not None and ref.moe is not None and c.pattern is None:
        pattern = moe_pattern(parse_layer_freq(freq), ref.num_layers)
        if pattern != [b.mlp is BlockKind.moe for b in ref.blocks]:
            c.notes.append("--moe-layer-freq differs from the problem model's dense/MoE blocks; the problem's "
                           "model is used")
    if c.pattern is not None and isinstance(ref.attention, DSV4Attention):
        ratios = tuple(ref.attention.compress_ratios[:ref.num_layers])
        if c.pattern.dsv4 and tuple(c.pattern.ratios) != ratios:
            c.notes.append("--hybrid-layer-pattern's C/H/W sequence differs from the problem model's "
                           "compress ratios; the problem's model is used")


# ----------------------------------------------------------------------------------------------
# Mapping: degrees, batch, recompute, pipeline layout


_DEGREES = {
    "tp": "--tensor-model-parallel-size", "pp": "--pipeline-model-parallel-size",
    "cp": "--context-parallel-size", "ep": "--expert-model-parallel-size",
    "etp": "--expert-tensor-parallel-size", "mbs": "--micro-batch-size",
    "gbs": "--global-batch-size", "seq_len": "--seq-length",
}
_PIPELINE_FLAGS = ("the launch line's pipeline flags (--num-virtual-stages-per-pipeline-rank, "
                   "--num-layers-per-virtual-pipeline-stage, --pipeline-model-parallel-layout, "
                   "--hybrid-layer-pattern, --decoder-first/last-pipeline-num-layers, --account-for-*)")


def _recompute(c: _Context, options: dict) -> str | None:
    """--recompute-granularity as Megatron rewrites it: --recompute-activations forces 'selective'
    (arguments.py:607-609); --moe-layer-recompute turns anything but 'full' into 'selective'
    (transformer_config.py:2014-2025, which rejects it with 'full')."""
    f = c.flags
    granularity = f.choice("--recompute-granularity", ("full", "selective"))
    if f.switch("--recompute-activations"):
        options["recompute_activations"] = True
        granularity = "selective"
    if f.switch("--moe-layer-recompute"):
        options["moe_layer_recompute"] = True
        if granularity != "full":
            granularity = "selective"
            c.moe_layer_recompute = True
    return granularity


def _layers_for_layout(c: _Context, model: ModelArchitecture | None) -> int | None:
    """Main blocks the pipeline flags split: the model's, else --num-layers."""
    if model is not None:
        return model.num_layers
    if c.reference is not None:
        return c.reference.num_layers
    return c.flags.integer("--num-layers")


def _vpp_from_layers_per_stage(k: int, layers: int | None, pp: int, options: dict) -> int:
    """vpp = (L'/PP)/k, L' counting embedding/loss slots when accounted for (rule vpp-from-layers-per-vstage)."""
    if layers is None:
        raise InputError("--num-layers-per-virtual-pipeline-stage needs the number of layers.",
                         field="--num-layers-per-virtual-pipeline-stage",
                         fix="pass --num-layers or a problem file.")
    total = layers + int(options.get("account_for_embedding_in_pipeline_split", False)) \
        + int(options.get("account_for_loss_in_pipeline_split", False))
    if total % pp or (total // pp) % k:
        raise InputError(
            f"{total} layers over PP {pp} cannot form virtual stages of {k} layers (rule "
            f"vpp-from-layers-per-vstage, {ARGS}:953-975); Megatron stops at argument validation.",
            field="--num-layers-per-virtual-pipeline-stage", value=k,
            expected=f"a divisor of {total}/{pp} layers per pipeline rank",
            fix="pick another --num-layers-per-virtual-pipeline-stage, or use "
                "--num-virtual-stages-per-pipeline-rank.")
    return total // pp // k


def _uneven_layout(layers: int, pp: int, vpp: int, first: int | None, last: int | None) -> tuple[int, ...] | None:
    """Blocks per virtual stage for --decoder-first/last-pipeline-num-layers (transformer_config.py:2294-2368);
    None when Megatron's divisibility rules fail (the uneven-* rules then say why)."""
    ends = [n for n in (first, last) if n is not None]
    middle_layers, middle_stages = layers - sum(ends), pp - len(ends)
    if middle_stages < 0 or (middle_layers > 0) != (middle_stages > 0) or (middle_stages and middle_layers % middle_stages):
        return None
    per_rank = [middle_layers // middle_stages if middle_stages else 0] * pp
    if first is not None:
        per_rank[0] = first
    if last is not None:
        per_rank[-1] = last
    if any(n % vpp for n in per_rank):
        return None
    return tuple(per_rank[k % pp] // vpp for k in range(pp * vpp))


def _accounted_layout(layers: int, pp: int, vpp: int, embedding: bool, loss: bool) -> tuple[int, ...] | None:
    """Blocks per virtual stage when the embedding and/or loss take a layer slot (rule account-for-divisible)."""
    total = layers + int(embedding) + int(loss)
    stages = pp * vpp
    if total % stages:
        return None
    counts = [total // stages] * stages
    counts[0] -= int(embedding)
    counts[-1] -= int(loss)
    return tuple(counts) if min(counts) >= 0 else None


def _check_vpp_sources(c: _Context, k: int | None, v: int | None, layout_text: str | None) -> None:
    """The flags that set virtual stages; Megatron accepts one (rules vpp-args-mutually-exclusive,
    hybrid-pattern-excludes-vpp-args, vpp-layers-per-vstage-excludes-uneven)."""
    given = [name for name, on in (("--num-layers-per-virtual-pipeline-stage", k is not None),
                                   ("--num-virtual-stages-per-pipeline-rank", v is not None),
                                   ("--pipeline-model-parallel-layout", layout_text is not None),
                                   ("--hybrid-layer-pattern", c.pattern is not None and len(c.pattern.segments) > 1))
             if on]
    uneven = c.flags.given("--decoder-first-pipeline-num-layers") or c.flags.given("--decoder-last-pipeline-num-layers")
    if len(given) > 1 or (k is not None and uneven):
        clash = given if len(given) > 1 else [given[0], "--decoder-first/last-pipeline-num-layers"]
        raise InputError(
            f"{' and '.join(clash)} cannot be set together: Megatron takes the virtual pipeline stages from "
            f"one source and stops at argument validation ({ARGS}:799-862,927-939).",
            field=clash[0], fix="keep one way of describing the virtual stages (with uneven first/last "
                                "stages use --num-virtual-stages-per-pipeline-rank).")


def _pipeline(c: _Context, model: ModelArchitecture | None, pp: int, options: dict) -> dict:
    """vpp and layout from the pipeline flags; the raw strings stay in the options for the rules."""
    f = c.flags
    layers = _layers_for_layout(c, model)
    k = f.integer("--num-layers-per-virtual-pipeline-stage")
    v = f.integer("--num-virtual-stages-per-pipeline-rank")
    layout_text = f.one("--pipeline-model-parallel-layout")
    if layout_text is not None:
        options["pipeline_model_parallel_layout"] = layout_text
    _check_vpp_sources(c, k, v, layout_text)
    out: dict = {}
    if v is not None:
        out["vpp"] = v
    if k is not None:
        out["vpp"] = _vpp_from_layers_per_stage(k, layers, pp, options)
    if layout_text is not None:
        out.update(_stages(parse_pipeline_layout(layout_text, layers or 0).block_counts, pp))
    if c.pattern is not None and len(c.pattern.segments) > 1:
        out.update(_stages(c.pattern.segments, pp))
    if "layout" not in out and layers is not None:
        layout = _derived_layout(layers, pp, out.get("vpp", 1), options)
        if layout is not None:
            out["layout"] = layout
    return out


def _stages(counts: tuple[int, ...], pp: int) -> dict:
    """vpp and layout from explicit virtual stages (layout string or hybrid segments); when their
    number is not a multiple of PP nothing is set and the stage-count rules report it."""
    if len(counts) % pp:
        return {}
    return {"vpp": len(counts) // pp, "layout": counts}


def _derived_layout(layers: int, pp: int, vpp: int, options: dict) -> tuple[int, ...] | None:
    """The layout uneven first/last counts or accounted embedding/loss imply (None when neither is given)."""
    first = options.get("decoder_first_pipeline_num_layers")
    last = options.get("decoder_last_pipeline_num_layers")
    if first is not None or last is not None:
        return _uneven_layout(layers, pp, vpp, first, last)
    embedding = options.get("account_for_embedding_in_pipeline_split", False)
    loss = options.get("account_for_loss_in_pipeline_split", False)
    if embedding or loss:
        return _accounted_layout(layers, pp, vpp, embedding, loss)
    return None


def _mapping(c: _Context, model: ModelArchitecture | None, options: dict) -> dict:
    """Mapping fields the line gives: degrees, batch, sequence, recompute, vpp and layout."""
    f = c.flags
    fields: dict = {}
    for key, flag in _DEGREES.items():
        value = f.integer(flag)
        if value is not None:
            fields[key] = value
    recompute = _recompute(c, options)
    if recompute is not None:
        fields["recompute"] = recompute
    fields.update(_pipeline(c, model, fields.get("pp", 1), options))
    return fields


# ----------------------------------------------------------------------------------------------
# Megatron options and the training run


def _set(options: dict, key: str, value: object) -> None:
    """Record an option when the flag gave one."""
    if value is not None:
        options[key] = value


def _dispatcher_options(c: _Context, options: dict) -> None:
    """MoE dispatcher flags; --moe-enable-deepep is deprecated and maps to the deepep backend."""
    f = c.flags
    _set(options, "moe_token_dispatcher_type", f.choice("--moe-token-dispatcher-type", ("allgather", "alltoall", "flex")))
    _set(options, "moe_flex_dispatcher_backend",
         f.choice("--moe-flex-dispatcher-backend", ("deepep", "hybridep", "ncclep")))
    if f.switch("--moe-enable-deepep"):
        options["moe_enable_deepep"] = True
        options.setdefault("moe_flex_dispatcher_backend", "deepep")
        c.warnings.append(LaunchWarning(
            "--moe-enable-deepep", "moe_enable_deepep is deprecated; use --moe-token-dispatcher-type flex "
            "--moe-flex-dispatcher-backend deepep (it requires the flex dispatcher)",
            f"{CONFIG}:1743-1752", MegatronStage.config))
    for flag, key in (("--moe-pad-expert-input-to-capacity", "moe_pad_expert_input_to_capacity"),
                      ("--moe-grouped-gemm", "moe_grouped_gemm"),
                      ("--moe-shared-expert-overlap", "moe_shared_expert_overlap"),
                      ("--overlap-moe-expert-parallel-comm", "overlap_moe_expert_parallel_comm")):
        if f.switch(flag):
            options[key] = True


def _cp_options(c: _Context, options: dict) -> None:
    """Context-parallel flags: --cp-comm-type (per-layer lists judged by their first value)."""
    f = c.flags
    kinds = f.words("--cp-comm-type")
    if kinds is not None:
        for kind in kinds:
            if kind not in ("p2p", "a2a", "allgather", "a2a+p2p"):
                raise _bad("--cp-comm-type", kind, "p2p, a2a, allgather or a2a+p2p")
        options["cp_comm_type"] = kinds[0]
        if len(set(kinds)) > 1:
            c.notes.append(f"--cp-comm-type gives {len(kinds)} per-layer values; parasol judged {kinds[0]!r}")
    sizes = f.words("--hierarchical-context-parallel-sizes")
    if sizes is not None:
        if not all(s.isdigit() and int(s) > 0 for s in sizes):
            raise _bad("--hierarchical-context-parallel-sizes", " ".join(sizes), "positive whole numbers")
        options["hierarchical_context_parallel_sizes"] = tuple(int(s) for s in sizes)
    _set(options, "cp_partition_mode", f.choice("--cp-partition-mode", ("zigzag", "contiguous")))


def _pipeline_options(c: _Context, options: dict) -> None:
    """Pipeline flags the pipeline rules read."""
    f = c.flags
    _set(options, "microbatch_group_size_per_vp_stage",
         f.integer("--microbatch-group-size-per-virtual-pipeline-stage"))
    if f.switch("--no-overlap-p2p-communication"):
        options["overlap_p2p_comm"] = False
    if f.switch("--overlap-p2p-communication"):
        options["overlap_p2p_comm"] = True
    _set(options, "decoder_first_pipeline_num_layers", f.integer("--decoder-first-pipeline-num-layers"))
    _set(options, "decoder_last_pipeline_num_layers", f.integer("--decoder-last-pipeline-num-layers"))
    for flag, key in (("--account-for-embedding-in-pipeline-split", "account_for_embedding_in_pipeline_split"),
                      ("--account-for-loss-in-pipeline-split", "account_for_loss_in_pipeline_split"),
                      ("--use-tp-pp-dp-mapping", "use_tp_pp_dp_mapping")):
        if f.switch(flag):
            options[key] = True


def _other_options(c: _Context, options: dict) -> None:
    """Bias, recompute method, optimizer instances, kernels, offloading and loss flags."""
    f = c.flags
    if f.given("--disable-bias-linear"):
        options["add_bias_linear"] = not f.switch("--disable-bias-linear")
    _set(options, "recompute_method", f.choice("--recompute-method", ("uniform", "block")))
    _set(options, "recompute_num_layers", f.integer("--recompute-num-layers"))
    _set(options, "num_distributed_optimizer_instances", f.integer("--num-distributed-optimizer-instances"))
    _set(options, "dsa_kernel_backend", f.choice("--dsa-kernel-backend", ("cudnn", "none", "tilelang")))
    modules = f.words("--offload-modules")
    if modules is not None:
        options["offload_modules"] = modules
    _set(options, "kv_channels", f.integer("--kv-channels"))
    rampup = f.words("--rampup-batch-size")
    if rampup is not None:
        if len(rampup) != 3 or not all(r.isdigit() and int(r) > 0 for r in rampup):
            raise _bad("--rampup-batch-size", " ".join(rampup), "three positive whole numbers: START INCREMENT SAMPLES")
        options["rampup_batch_size"] = tuple(int(r) for r in rampup)
    for flag, key in (("--deterministic-mode", "deterministic_mode"), ("--cpu-offloading", "cpu_offloading"),
                      ("--calculate-per-token-loss", "calculate_per_token_loss"),
                      ("--tp-comm-overlap", "tp_comm_overlap"),
                      ("--cross-entropy-loss-fusion", "cross_entropy_loss_fusion"),
                      ("--dynamic-context-parallel", "dynamic_context_parallel")):
        if f.switch(flag):
            options[key] = True


def _hybrid_option(c: _Context, options: dict) -> None:
    """--hybrid-layer-pattern (or the deprecated --hybrid-override-pattern) kept raw and parsed."""
    f = c.flags
    text = f.one("--hybrid-layer-pattern")
    old = f.one("--hybrid-override-pattern")
    if old is not None:
        c.warnings.append(LaunchWarning("--hybrid-override-pattern", "--hybrid-override-pattern is "
                                        "deprecated. Use --hybrid-layer-pattern instead.", f"{ARGS}:743-755"))
        text = text or old
    if text is not None:
        options["hybrid_layer_pattern"] = text
        c.pattern = parse_hybrid_pattern(text)


def _training(c: _Context, mapping: dict) -> dict:
    """Training fields: sequence, batch, precision, optimizer sharding, SP, recompute, capacity, packing."""
    f = c.flags
    out: dict = {}
    for key, field in (("seq_len", "seq_len"), ("gbs", "global_batch"), ("mbs", "micro_batch"),
                       ("recompute", "recompute")):
        if key in mapping:
            out[field] = mapping[key]
    fp8 = f.choice("--fp8-format", ("e4m3", "hybrid"))
    bf16 = f.switch("--bf16")
    if fp8 is not None:
        out["precision"] = "fp8"
    elif bf16:
        out["precision"] = "bf16"
    if f.switch("--fp16"):
        out.setdefault("precision", "bf16")
        c.notes.append("--fp16: parasol models 16-bit training as BF16 (same bytes per value)")
    if f.switch("--use-distributed-optimizer"):
        out["distributed_optimizer"] = True
    if f.switch("--sequence-parallel"):
        out["sequence_parallel"] = True
    modules = f.words("--recompute-modules")
    if modules is not None:
        bad = [m for m in modules if m not in RECOMPUTE_MODULES]
        if bad:
            raise _bad("--recompute-modules", " ".join(bad), "modules among " + ", ".join(RECOMPUTE_MODULES))
        out["recompute_modules"] = modules
    if c.moe_layer_recompute:
        base = out.get("recompute_modules", ("core_attn",))
        out["recompute_modules"] = (*base, "moe") if "moe" not in base else base
    factor = f.number("--moe-expert-capacity-factor")
    if factor is not None:
        out["capacity_factor"] = factor if factor > 0 else None
    if f.one("--sequence-packing-scheduler") is not None:
        out["packed_sequences"] = True
    return out


def _options(c: _Context) -> dict:
    """Every Megatron option the line sets."""
    options: dict = {}
    _dispatcher_options(c, options)
    _cp_options(c, options)
    _pipeline_options(c, options)
    _other_options(c, options)
    return options


# ----------------------------------------------------------------------------------------------
# Entry points


def parse_launch(text: str, *, source: str = SOURCE, model: ModelArchitecture | None = None) -> ParsedLaunch:
    """Read a launch line or script. `model` is the problem's model when there is a problem file: it
    replaces the line's model flags (which are compared with it) and its blocks are what the pipeline
    flags split."""
    command = launch_command(text, source)
    f = _Flags(command.words)
    c = _Context(flags=f, reference=model, notes=list(command.notes))
    options: dict = {}
    _hybrid_option(c, options)
    options.update(_options(c))
    c.notes.extend(f.repeat_notes())
    if f.stray:
        c.notes.append("ignored words before the first flag: " + _shown(" ".join(f.stray)))
    tp = f.integer("--tensor-model-parallel-size") or 1
    gaps = _model_gaps(c)
    built = _model(c, tp) if gaps is None and model is None else None
    if model is not None:
        _compare_reference(c)
        compared = f.take_given(MODEL_FLAGS)
        if compared:
            c.notes.append(f"model flags compared with the problem's model {model.name}, which is used: "
                           + ", ".join(compared))
    mapping = _mapping(c, built, options)
    training = _training(c, mapping)
    try:
        opts = MegatronOptions(**options)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"Invalid Megatron option from the launch line: {err['msg']}.",
                         field=str(err["loc"][0]), value=err.get("input"),
                         fix="correct the matching flag.") from None
    return ParsedLaunch(
        model=built, mapping_fields=mapping, options=opts, training_fields=training,
        notes=(*c.notes, *f.unused()), warnings=tuple(c.warnings), launcher_gpus=_launcher_gpus(command.launcher),
        deepseek_v4=bool(c.pattern and c.pattern.dsv4), model_unavailable=gaps,
    )


def read_launch_file(path: str | Path) -> str:
    """The text of a launch script."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Cannot read the launch script {str(p)!r}: {exc}.", field="--megatron-args-file",
                         fix="give a readable UTF-8 shell script.") from None


def _set_value(value: object) -> str:
    """A mapping value written as `--set` text."""
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(getattr(value, "value", value))


def _check_conflicts(fields: dict, sets: dict[str, str]) -> None:
    """A --set that disagrees with the launch line is an error (neither silently wins)."""
    for key, text in sets.items():
        if key not in fields or _set_value(fields[key]) == text.replace(" ", ""):
            continue
        flag = _DEGREES.get(key, "--recompute-granularity" if key == "recompute" else _PIPELINE_FLAGS)
        raise InputError(
            f"--set {key}={text} conflicts with the launch line ({flag} gives {_set_value(fields[key])}).",
            field=key, value=text, fix=f"drop --set {key} or change the launch line, so that one value remains.")


def _merged_options(base: MegatronOptions, parsed: ParsedLaunch, extra: dict | None = None) -> MegatronOptions:
    """`base` with the options the launch line sets."""
    data = base.model_dump()
    data.update(extra or {})
    data.update({k: getattr(parsed.options, k) for k in parsed.options.model_fields_set})
    return MegatronOptions.model_validate(data)


def _training_section(data: dict) -> Training:
    """Validated training fields; a bad combination names the field."""
    try:
        return Training.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"Invalid training setting from the launch line: {err['msg']}.",
                         field=f"training.{err['loc'][0]}", value=err.get("input"),
                         fix="correct the matching flag.") from None


def apply_launch(problem: Problem, parsed: ParsedLaunch, sets: dict[str, str]) -> tuple[Problem, Mapping, tuple[str, ...]]:
    """The problem with the launch line's training and options, and the mapping it runs (the
    problem's mapping < the launch line < --set; a --set that disagrees with the line is an error)."""
    _check_conflicts(parsed.mapping_fields, sets)
    spec = problem.spec
    notes: list[str] = []
    if parsed.launcher_gpus is not None and parsed.launcher_gpus != problem.gpus:
        notes.append(f"the launcher starts {parsed.launcher_gpus} GPUs; judged on the problem's {problem.gpus}")
    section = spec.mapping
    pipeline_keys = {"pp", "vpp", "layout"} & set(parsed.mapping_fields)
    if section is not None and section.layout is not None and pipeline_keys and "layout" not in parsed.mapping_fields:
        section = section.model_copy(update={"layout": None})
        notes.append("the problem's mapping.layout is replaced by the launch line's pipeline")
    training = _training_section(spec.training.model_dump() | parsed.training_fields)
    framework = spec.framework.model_copy(update={"options": _merged_options(spec.framework.options, parsed)})
    new_spec = spec.model_copy(update={"training": training, "framework": framework, "mapping": section})
    updated = dataclasses.replace(problem, spec=new_spec)
    values = {k: _set_value(v) for k, v in parsed.mapping_fields.items()}
    return updated, build_mapping(updated, {**values, **sets}), tuple(notes)


MEGATRON_TRAINING_DEFAULTS: dict = {"distributed_optimizer": False, "sequence_parallel": False}
"""Training defaults of Megatron-LM where parasol's differ (no distributed optimizer, no SP)."""

MEGATRON_OPTION_DEFAULTS: dict = {"add_bias_linear": True, "moe_grouped_gemm": False}
"""Option defaults of Megatron-LM where parasol's differ (transformer_config.py:212-214, 850)."""


def _standalone_model(parsed: ParsedLaunch, model_name: str | None) -> ModelArchitecture:
    """The model of a run without a problem file: --model, else the launch line's flags."""
    if model_name is not None:
        return load_model(model_name)
    if parsed.model is None:
        raise InputError(
            f"Cannot build the model from the launch line: {parsed.model_unavailable}.", field=SOURCE,
            expected="--num-layers, --hidden-size and --num-attention-heads (plus the other model flags)",
            fix="add the model flags, pass --model NAME (`parasol models`), or explain a problem file.")
    return parsed.model


def _standalone_gpus(parsed: ParsedLaunch, gpus: int | None, notes: list[str]) -> int:
    """--gpus, else the launcher's nproc_per_node × nnodes."""
    if gpus is not None:
        if parsed.launcher_gpus is not None and parsed.launcher_gpus != gpus:
            notes.append(f"the launcher starts {parsed.launcher_gpus} GPUs; judged on --gpus {gpus}")
        return gpus
    if parsed.launcher_gpus is None:
        raise InputError("The GPU count is unknown.", field="--gpus",
                         fix="pass --gpus N (the launch line's torchrun --nproc_per_node/--nnodes are not numbers).")
    return parsed.launcher_gpus


def _standalone_training(parsed: ParsedLaunch, gpus: int, notes: list[str]) -> dict:
    """Training section with Megatron's defaults; GBS defaults to MBS·DP (rule gbs-default)."""
    training = {**MEGATRON_TRAINING_DEFAULTS, **parsed.training_fields}
    if "seq_len" not in training:
        raise InputError("The launch line has no --seq-length.", field="--seq-length",
                         fix="add --seq-length (tokens per sequence), e.g. --seq-length 8192.")
    if "precision" not in training:
        notes.append("no --bf16/--fp16/--fp8-format: Megatron would train in FP32, which parasol does not "
                     "model; judged as BF16")
    if "global_batch" not in training:
        m = parsed.mapping_fields
        model_size = m.get("tp", 1) * m.get("pp", 1) * m.get("cp", 1)
        if gpus % model_size:
            raise InputError("--global-batch-size is missing and its default MBS·DP is not whole: "
                             f"{gpus} GPUs / (TP·PP·CP = {model_size}).", field="--global-batch-size",
                             fix="pass --global-batch-size.")
        training["global_batch"] = m.get("mbs", 1) * gpus // model_size
        notes.append(f"--global-batch-size defaults to MBS·DP = {training['global_batch']} (rule gbs-default)")
    return training


def launch_problem(parsed: ParsedLaunch, *, hardware: str, gpus: int | None = None, model_name: str | None = None,
                   sets: dict[str, str] | None = None) -> tuple[Problem, Mapping, tuple[str, ...]]:
    """A problem and mapping from the launch line alone (no problem file): the model from its flags
    (or --model), the run from --seq-length/--global-batch-size…, Megatron's defaults for the rest, and
    the megatron-core pack, plus deepseek-v4 for a C/H/W hybrid pattern or a DeepSeek-V4 model;
    `sets` pin mapping fields as --set does (never gpus, which --gpus gives)."""
    pinned = sets or {}
    if "gpus" in pinned:
        raise InputError("--set gpus is not used without a problem file.", field="--set", value=pinned["gpus"],
                         fix="pass --gpus N instead.")
    _check_conflicts(parsed.mapping_fields, pinned)
    notes: list[str] = []
    model = _standalone_model(parsed, model_name)
    count = _standalone_gpus(parsed, gpus, notes)
    training = _standalone_training(parsed, count, notes)
    options = _merged_options(MegatronOptions(), parsed, MEGATRON_OPTION_DEFAULTS)
    packs = ["megatron-core"]
    if parsed.deepseek_v4 or isinstance(model.attention, DSV4Attention):
        packs.append("deepseek-v4")
    sections = {"training": training, "hardware": {"preset": hardware, "gpus": count},
                "framework": {"rule_packs": packs, "options": options.model_dump()}}
    problem = problem_from_parts(model, sections, source=SOURCE)
    values = {k: _set_value(v) for k, v in parsed.mapping_fields.items()}
    return problem, build_mapping(problem, {**values, **pinned}), tuple(notes)



@dataclass(frozen=True)
class ExplainInputs:
    """The problem and mapping `explain` judges, with what the launch line adds to the report."""

    problem: Problem
    mapping: Mapping
    notes: tuple[str, ...] = ()
    warnings: tuple[LaunchWarning, ...] = ()


def launch_text(args: str | None, path: str | None) -> tuple[str, str] | None:
    """The launch line from --megatron-args or --megatron-args-file (not both), with its source name."""
    if args is not None and path is not None:
        raise InputError("Both --megatron-args and --megatron-args-file are given.", field="--megatron-args",
                         fix="pass the launch line one way.")
    if path is not None:
        return read_launch_file(path), path
    return (args, SOURCE) if args is not None else None


def _no_problem_options(hardware: str | None, gpus: int | None, model_name: str | None) -> None:
    """--hardware/--gpus/--model describe a run without a problem file; with one they are errors."""
    given = [name for name, value in (("--hardware", hardware), ("--gpus", gpus), ("--model", model_name))
             if value is not None]
    if given:
        raise InputError(f"{', '.join(given)} apply only without a problem file.", field=given[0],
                         fix="edit the problem file (or use --set gpus=N), or drop PROBLEM.yaml.")


def explain_inputs(problem_path: str | None, sets: tuple[str, ...], launch: tuple[str, str] | None, *,
                   hardware: str | None = None, gpus: int | None = None,
                   model_name: str | None = None) -> ExplainInputs:
    """Problem file (+ launch line) + --set, or hardware + launch line alone: what `explain` judges."""
    pinned = parse_sets(sets)
    if problem_path is not None:
        _no_problem_options(hardware, gpus, model_name)
        problem = load_problem(problem_path)
        if launch is None:
            return ExplainInputs(problem, build_mapping(problem, pinned))
        parsed = parse_launch(launch[0], source=launch[1], model=problem.model)
        updated, mapping, notes = apply_launch(problem, parsed, pinned)
        return ExplainInputs(updated, mapping, (*notes, *parsed.notes), parsed.warnings)
    if launch is None or hardware is None:
        raise InputError("Nothing to explain: give PROBLEM.yaml, or --hardware PRESET with --megatron-args "
                         "(or --megatron-args-file).", field="PROBLEM",
                         fix="e.g. `parasol explain problems/deepseek-v4-pro-1024.yaml` or "
                             "`parasol explain --hardware h100-hgx --gpus 8 --megatron-args \"--num-layers 32 …\"`.")
    if gpus is not None and gpus < 1:
        raise InputError("--gpus must be at least 1.", field="--gpus", value=gpus, fix="pass the job's GPU count.")
    parsed = parse_launch(launch[0], source=launch[1])
    problem, mapping, notes = launch_problem(parsed, hardware=hardware, gpus=gpus, model_name=model_name,
                                             sets=pinned)
    return ExplainInputs(problem, mapping, (*notes, *parsed.notes), parsed.warnings)
