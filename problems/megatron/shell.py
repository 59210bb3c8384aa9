"""The shell layer of a launch script: logical lines, variables and arrays, and the words of the
command that starts training. Nothing is executed; a variable that cannot be resolved stays a
placeholder that the flag readers name."""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass

from parasol.errors import InputError

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


def placeholder(name: str) -> str:
    """The placeholder for a shell variable whose value is unknown."""
    return f"{_OPEN}{name}{_CLOSE}"


def unresolved_names(text: str) -> list[str]:
    """Names of the unresolved variables inside `text`."""
    return _UNRESOLVED.findall(text)


def shown(text: str) -> str:
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
            return placeholder(m.group(5))
        name = m.group(1) or m.group(4)
        if name in shell.arrays:
            if m.group(2):
                return shell.array_words(name)
            return shlex.quote(shell.arrays[name][0]) if shell.arrays[name] else ""
        if name in shell.scalars:
            return shell.scalars[name]
        if m.group(3) is not None:
            return _expand(m.group(3), shell)
        return placeholder(name)
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
class Command:
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


def launch_command(text: str, source: str = SOURCE) -> Command:
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
        return Command(tuple(_until_operator(words[at + 1:])), tuple(words[:at]), tuple(notes))
    words = [w for ws in loose for w in ws]
    if not words or not words[0].startswith("--"):
        raise InputError(
            "No Megatron-LM flags found in the launch line.", field=SOURCE,
            value=shown(" ".join(words))[:80] if words else None,
            expected="`torchrun … pretrain_gpt.py --flag value …`, or flags alone starting with `--`",
            fix="pass the command that starts training, or just its `--flag value` part.", file=source,
        )
    return Command(tuple(words), (), tuple(notes))


def _launcher_counts(launcher: tuple[str, ...]) -> tuple[int, int] | None:
    """torchrun's (--nproc_per_node, --nnodes) (1 node when absent), when both are numbers."""
    values: dict[str, str] = {}
    for i, w in enumerate(launcher):
        name, eq, val = w.partition("=")
        if name in (*_LAUNCHER_GPUS, "--nnodes"):
            values[name] = val if eq else (launcher[i + 1] if i + 1 < len(launcher) else "")
    per_node = next((values[k] for k in _LAUNCHER_GPUS if k in values), None)
    nodes = values.get("--nnodes", "1")
    if per_node is None or not per_node.isdigit() or not nodes.isdigit():
        return None
    return int(per_node), int(nodes)


def launcher_gpus(launcher: tuple[str, ...]) -> int | None:
    """GPUs torchrun starts: --nproc_per_node × --nnodes (1 node when absent), when both are numbers."""
    counts = _launcher_counts(launcher)
    return None if counts is None else counts[0] * counts[1]


def launcher_ranks_per_node(launcher: tuple[str, ...]) -> int | None:
    """Ranks torchrun starts on each node (--nproc_per_node), when it is a number."""
    counts = _launcher_counts(launcher)
    return None if counts is None else counts[0]
