"""The launch command's flags as Megatron's argparse reads them (the last value wins), typed getters
that name the flag on a bad value, and what the flag readers share (notes, warnings)."""

from __future__ import annotations

import difflib
from functools import cache
from importlib import resources
from pathlib import PurePosixPath

from parasol.errors import InputError
from parasol.problems.megatron.shell import placeholder, shown, unresolved_names

ARGS = "Megatron-LM megatron/training/arguments.py"
NOT_MODELLED = "not modelled: "
"""The prefix of the note for a known Megatron flag that no parasol reader uses."""
CONFIG = "Megatron-LM megatron/core/transformer/transformer_config.py"
OWN_PARSER_PROGRAMS = frozenset({"pretrain_gpt.py", "pretrain_mamba.py", "pretrain_hybrid.py"})
"""Megatron-LM's training programs whose parser is arguments.py's alone (pretrain_gpt.py and pretrain_hybrid.py add
the ModelOpt flags, which megatron_flags.txt holds); pretrain_vlm.py, train_rl.py and the examples' programs add their
own (extra_args_provider), which parasol does not know."""


@cache
def megatron_flag_names() -> frozenset[str]:
    """Every flag Megatron-LM's parser accepts (problems/megatron/megatron_flags.txt, read from its source)."""
    text = resources.files("parasol.problems.megatron").joinpath("megatron_flags.txt").read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.startswith("--"))


@cache
def megatron_parser_flags() -> frozenset[str]:
    """Every option Megatron-LM main's own parser defines (problems/megatron/megatron_parser_flags.txt, printed by
    bench/megatron_parser_flags.py): narrower than megatron_flag_names, which also takes every config dataclass
    field's name so that it can tell a typo from a Megatron flag."""
    text = resources.files("parasol.problems.megatron").joinpath("megatron_parser_flags.txt").read_text(
        encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.startswith("--"))


def unknown_flag_error(unknown: list[str]) -> InputError:
    """Megatron's own refusal of flags its parser does not know, with the closest known names."""
    hints = []
    for flag in unknown:
        negated = flag.startswith(("--no-", "--disable-"))
        names = sorted(n for n in megatron_flag_names() if negated or not n.startswith(("--no-", "--disable-")))
        close = difflib.get_close_matches(flag, names, n=2, cutoff=0.75)
        hints.append(f"{flag} (did you mean {' or '.join(close)}?)" if close else flag)
    return InputError(f"Megatron-LM would stop at unrecognized arguments: {', '.join(hints)}.",
                      field=unknown[0], expected="a flag of Megatron-LM's megatron/training/arguments.py",
                      fix="correct the spelling, or remove the flag.")


class Flags:
    """The command's flags as argparse sees them; the flags no mapper reads are 'not modelled'."""

    def __init__(self, words: tuple[str, ...], program: str | None = None) -> None:
        self.program = program
        """The training program the flags follow (None: flags alone, read as pretrain_gpt.py's)."""
        self.own_parser = program is None or PurePosixPath(program).name in OWN_PARSER_PROGRAMS
        """Whether the program's parser is Megatron-LM's arguments.py alone (OWN_PARSER_PROGRAMS)."""
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

    def check_known(self) -> None:
        """Refuse flags Megatron's parser does not know, as Megatron does (argparse, allow_abbrev=False), unless the
        program may add its own (own_parser; unparsed then notes them)."""
        unknown = [name for name in self.values if name not in megatron_flag_names()]
        if unknown and self.own_parser:
            raise unknown_flag_error(unknown)

    def given(self, name: str) -> bool:
        """Whether the flag appears (does not count as reading it)."""
        return name in self.values

    def _read(self, name: str) -> tuple[str, ...] | None:
        """The flag's words, marking it read; unresolved shell variables are an error here."""
        if name not in self.values:
            return None
        self.used.add(name)
        values = self.values[name]
        names = [n for v in values for n in unresolved_names(v)]
        if names:
            listed = ", ".join(shown(placeholder(n)) for n in names)
            raise InputError(
                f"{name} takes its value from {listed}, which parasol cannot resolve (a shell variable the script "
                "does not assign, or arithmetic beyond + - * / % on assigned integers).",
                field=name, fix="assign the variable in the script (NAME=value) or write the value into "
                                "the launch line.",
            )
        return values

    def switch(self, name: str) -> bool:
        """A store_true flag: present or not; a value after it is an error."""
        values = self._read(name)
        if values:
            raise flag_error(name, " ".join(values), "no value (it is an on/off switch)",
                       f"remove {values[0]!r} after {name}, or check for a missing flag name before it.")
        return values is not None

    def one(self, name: str) -> str | None:
        """The single value of a flag."""
        values = self._read(name)
        if values is None:
            return None
        if len(values) != 1:
            raise flag_error(name, " ".join(values) or None, "exactly one value",
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
            raise flag_error(name, text, f"a whole number >= {minimum}") from None
        if value < minimum:
            raise flag_error(name, text, f"a whole number >= {minimum}")
        return value

    def number(self, name: str) -> float | None:
        """A real-number flag."""
        text = self.one(name)
        if text is None:
            return None
        try:
            return float(text)
        except ValueError:
            raise flag_error(name, text, "a number, e.g. 1.25") from None

    def choice(self, name: str, choices: tuple[str, ...]) -> str | None:
        """A flag with a fixed set of values (Megatron's argparse `choices`)."""
        text = self.one(name)
        if text is not None and text not in choices:
            raise flag_error(name, text, "one of " + ", ".join(choices))
        return text

    def words(self, name: str) -> tuple[str, ...] | None:
        """A flag taking one or more values (argparse nargs='+')."""
        values = self._read(name)
        if values is not None and not values:
            raise flag_error(name, None, "one or more values", f"give the values after {name}.")
        return values

    def take_given(self, names: tuple[str, ...]) -> list[str]:
        """Mark the given flags among `names` as read; return them as `flag value` texts."""
        taken = [name for name in self.values if name in names]
        self.used.update(taken)
        return [" ".join((name, *map(shown, self.values[name]))) for name in taken]

    def unparsed(self, exempt: frozenset[str]) -> list[str]:
        """Notes for the given flags Megatron-LM main's parser does not define (megatron_parser_flags; `exempt`: those
        a reader notes itself or a DeepSeek-V4 dev-branch flag), in launch-line order: Megatron stops at parsing
        them, unless a program with a parser of its own adds them (own_parser). They count as read, so they are not
        also listed as not modelled."""
        notes = []
        for name in self.values:
            if name in megatron_parser_flags() or name in exempt:
                continue
            self.used.add(name)
            notes.append(f"{name}: not an option of Megatron-LM main's parser (an older or a dev-branch flag?); "
                         "Megatron-LM main stops at parsing it (unrecognized arguments)" if self.own_parser else
                         f"{name}: not an option of Megatron-LM main's parser; {self.program} must add it (its "
                         "extra_args_provider), or Megatron-LM stops at parsing it")
        return notes

    def unused(self) -> list[str]:
        """Notes for the flags no mapper read, in launch-line order."""
        notes = []
        for name, values in self.values.items():
            if name in self.used:
                continue
            text = shown(" ".join(values))
            notes.append(f"{NOT_MODELLED}{name}" + (f" {text}" if text else ""))
        return notes

    def repeat_notes(self) -> list[str]:
        """Flags given more than once with different values (argparse keeps the last)."""
        return [f"{name} is given {len(seen)} times with different values; Megatron keeps the last "
                f"({shown(' '.join(self.values[name]))})"
                for name, seen in self.history.items() if len(set(seen)) > 1]


def flag_error(flag: str, value: str | None, expected: str, fix: str | None = None) -> InputError:
    """The error for a malformed flag value."""
    return InputError(f"Cannot read {flag} in the launch line.", field=flag, value=value, expected=expected,
                      fix=fix or f"correct the value after {flag}.")
