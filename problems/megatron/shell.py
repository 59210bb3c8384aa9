"""The shell layer of a launch script: logical lines, variables and arrays, and the words of the
command that starts training. Nothing is executed; a variable that cannot be resolved stays a
placeholder that the flag readers name."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import operator
import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from parasol.errors import InputError

SOURCE = "--megatron-args"

_OPEN, _CLOSE, _BLANK = "\ue000", "\ue001", "\ue002"
_WHITESPACE = re.compile(r"\s+")
_UNRESOLVED = re.compile(f"{_OPEN}([^{_CLOSE}]*){_CLOSE}")
_ASSIGN = re.compile(r"^\s*(?:(?:export|local|readonly|declare(?:\s+-\w+)*)\s+)?([A-Za-z_]\w*)(\+?)=(.*)$", re.S)
_VAR = re.compile(
    r"\$\{(?P<name>[A-Za-z_]\w*|\d+)(?P<all>\[[@*]\])?(?:(?P<colon>:?)(?P<op>[-=])(?P<default>(?:[^{}]|\{[^{}]*\})*))?\}"
    r"|\$(?P<bare>[A-Za-z_]\w*|\d)"
    r"|(?P<other>\$\(\(.*?\)\)|\$\([^()]*\)|`[^`]*`|\$\{[^}]*\})"
)
"""`${NAME}`, `${NAME[@]}`, `${NAME-default}`, `${NAME:-default}`, `${NAME=default}`, `${NAME:=default}`; `$NAME`;
and what the shell layer does not read (command substitution, other expansions), which stays a placeholder."""
_NAME = re.compile(r"[A-Za-z_]\w*")
_INTEGER = re.compile(r"^\s*[+-]?\d+\s*$")
_CONTROL = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac"}


def placeholder(name: str) -> str:
    """The placeholder for a shell variable or expression whose value is unknown: one word, its blanks held by a
    private character, so that splitting the line into words keeps it whole (`$(( A * B ))`)."""
    return f"{_OPEN}{_WHITESPACE.sub(_BLANK, name)}{_CLOSE}"


def unresolved_names(text: str) -> list[str]:
    """Names of the unresolved variables and expressions inside `text` (their blanks single spaces)."""
    return [name.replace(_BLANK, " ") for name in _UNRESOLVED.findall(text)]


def shown(text: str) -> str:
    """`text` with placeholders written back as `$NAME` (an expression as it was written, blanks single spaces)."""
    def written(m: re.Match[str]) -> str:
        name = m.group(1).replace(_BLANK, " ")
        return name if name.startswith(("$", "`")) else f"${name}"
    return _UNRESOLVED.sub(written, text)


@dataclass
class _Shell:
    """Scalar and array variables assigned so far in a script."""

    scalars: dict[str, str] = dataclasses.field(default_factory=dict)
    arrays: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    exported: set[str] = dataclasses.field(default_factory=set)
    """Names `export` gave the environment of the commands after it."""

    def environment(self) -> dict[str, str]:
        """The exported scalar variables as they stand."""
        return {name: self.scalars[name] for name in sorted(self.exported) if name in self.scalars}

    def array_words(self, name: str) -> str:
        """`${NAME[@]}` as shell text: a `--flag value` element splits into words, others stay whole."""
        words = []
        for element in self.arrays[name]:
            split = element.startswith("--") and " " in element
            words.append(element if split else shlex.quote(element))
        return " ".join(words)


def _quotient(a: int, b: int) -> int:
    """Bash's integer `/`: the quotient truncated toward zero."""
    if b == 0:
        raise ValueError("division by zero")
    return abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)


def _remainder(a: int, b: int) -> int:
    """Bash's `%`: what `/` leaves, with the dividend's sign."""
    return a - b * _quotient(a, b)


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _quotient,
           ast.Mod: _remainder}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _integer_value(node: ast.AST) -> int:
    """The value of an integer expression of + - * / % and parentheses, as bash computes it (ValueError for
    anything else: `**`, shifts, comparisons and the like stay unresolved)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_integer_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_integer_value(node.left), _integer_value(node.right))
    raise ValueError("not shell integer arithmetic")


def _arithmetic(expression: str, shell: _Shell) -> str | None:
    """The value of `$(( expression ))`: its `$NAME`s and bare names read the integer variables assigned so far;
    None when one is unknown or not an integer, or the expression uses more than + - * / % and parentheses."""
    expanded = _expand(expression, shell)
    if unresolved_names(expanded):
        return None
    names = [shell.scalars.get(name, "") for name in _NAME.findall(expanded)]
    if not all(_INTEGER.match(value) for value in names):
        return None
    values = iter(names)
    text = _NAME.sub(lambda _: f"({next(values).strip()})", expanded)
    try:
        return str(_integer_value(ast.parse(text.strip(), mode="eval").body))
    except (SyntaxError, ValueError, RecursionError):
        return None


def _arithmetic_spans(text: str, shell: _Shell) -> list[tuple[int, int, str]]:
    """Each `$(( … ))` of `text` outside `${ … }` (a default's own arithmetic is read when the default is): its
    start, its end and its value (_arithmetic), or a placeholder naming it."""
    spans, at, braces = [], 0, 0
    while at < len(text):
        if text.startswith("${", at):
            braces, at = braces + 1, at + 2
        elif text[at] == "}" and braces:
            braces, at = braces - 1, at + 1
        elif text.startswith("$((", at) and not braces:
            depth, end = 2, at + 3
            while end < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                end += 1
            whole = text[at:end]
            value = _arithmetic(whole[3:-2], shell) if not depth and whole.endswith("))") else None
            spans.append((at, end, placeholder(whole) if value is None else value))
            at = end
        else:
            at += 1
    return spans


def _expand(text: str, shell: _Shell) -> str:
    """Substitute known variables and shell arithmetic (_arithmetic); unknown ones become placeholders. Defaults
    apply as bash's do: `${X-d}` and `${X=d}` when X is unset, `${X:-d}` and `${X:=d}` also when it is empty; the
    `=` forms assign the default (`: ${TP:=4}`)."""
    def sub(m: re.Match[str]) -> str:
        if m["other"] is not None:
            return placeholder(m["other"])
        name = m["name"] or m["bare"]
        if name in shell.arrays:
            if m["all"]:
                return shell.array_words(name)
            return shlex.quote(shell.arrays[name][0]) if shell.arrays[name] else ""
        value = shell.scalars.get(name)
        if m["op"] is None or (value is not None and (value or not m["colon"])):
            return placeholder(name) if value is None else value
        value = _expand(m["default"], shell)
        if m["op"] == "=" and not unresolved_names(value):
            shell.scalars[name] = value
        return value
    out, at = [], 0
    for start, end, value in _arithmetic_spans(text, shell):
        out += [_VAR.sub(sub, text[at:start]), value]
        at = end
    return "".join(out) + _VAR.sub(sub, text[at:])


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
    """The training command's flag words, the launcher's words before the program, script notes, the program
    (`….py`; None for flags alone), the script's `#SBATCH` options (the allocation srun starts its tasks in) and the
    command's environment."""

    words: tuple[str, ...]
    launcher: tuple[str, ...]
    notes: tuple[str, ...]
    program: str | None = None
    allocation: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()
    """The variables the command runs with: the script's exported ones and those written before it."""

    @property
    def ranks(self) -> tuple[int, int | None] | None:
        """Ranks the launcher starts and ranks per node (None when it does not say), when they are numbers (one
        rank per GPU): torchrun's --nproc_per_node × --nnodes (1 node when absent; it wins when srun or mpirun
        starts torchrun), else srun's --ntasks, or --ntasks-per-node × --nodes (its own, else the `#SBATCH`
        allocation's), or mpirun's -np, or --npernode (one node)."""
        return _launcher_counts(self.launcher, self.allocation)

    @property
    def segment_nodes(self) -> int | None:
        """Slurm's --segment (the `#SBATCH` allocation's, srun's own winning): the nodes of each piece of the
        allocation placed within one block of a block topology (an NVL72 rack); None when not given or not a
        number."""
        counts = _given_counts((*self.allocation, *self.launcher), _SEGMENT)
        return None if counts is None else counts["segment"]


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


_PREFIX_ASSIGN = re.compile(r"^[A-Za-z_]\w*=")
_KEYWORD = re.compile(r"^\s*(export|local|readonly|declare)\b")
_ARRAY = re.compile(r"^\s*(?:(?:export|local|readonly|declare(?:\s+-\w+)*)\s+)?[A-Za-z_]\w*\+?=\(")


def _assignment_line(raw: str, shell: _Shell, line: int, source: str) -> tuple[list[str], dict[str, str]]:
    """Read a line that starts with an assignment into `shell`: none of its words are a command ([]), or the
    command after leading `NAME=value` words and those variables, its environment (`NCCL_DEBUG=INFO torchrun …`;
    `TP=2 PP=4` assigns both). `export A=1 B=2` assigns and exports each, `export NAME` exports NAME; an array or
    another declaration keyword is one assignment, read whole."""
    keyword, m = _KEYWORD.match(raw), _ASSIGN.match(raw)
    if _ARRAY.match(raw) or (keyword and keyword.group(1) != "export"):
        if m is not None:
            _assign(m, line, shell, source)
            if keyword and keyword.group(1) == "export":
                shell.exported.add(m.group(1))
        return [], {}
    words = _split(_expand(raw, shell), line, source)
    if keyword:
        for word in words[1:]:
            m = _ASSIGN.match(word)
            if m is not None:
                _assign(m, line, shell, source)
            shell.exported.add(m.group(1) if m is not None else word)
        return [], {}
    assigned = list(itertools.takewhile(_PREFIX_ASSIGN.match, words))
    if len(assigned) == len(words):
        for each in [_ASSIGN.match(w) for w in assigned] if len(assigned) > 1 else [_ASSIGN.match(raw)]:
            assert each is not None
            _assign(each, line, shell, source)
        return [], {}
    return words[len(assigned):], dict(w.split("=", 1) for w in assigned)


def launch_command(text: str, source: str = SOURCE) -> Command:
    """Find the Megatron-LM command in a launch line or script and return its flag words."""
    shell = _Shell()
    candidates: list[tuple[int, list[str], dict[str, str]]] = []
    loose: list[list[str]] = []
    loose_environment: dict[str, str] = {}
    allocation: list[str] = []
    control = False
    for line, raw in _logical_lines(text):
        if raw.lstrip().startswith(_SBATCH):
            allocation.extend(itertools.takewhile(lambda w: not w.startswith("#"), raw.split()[1:]))
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        prefix: dict[str, str] = {}
        if _ASSIGN.match(raw) or _KEYWORD.match(raw):
            words, prefix = _assignment_line(raw, shell, line, source)
            if not words:
                continue
        else:
            words = _split(_expand(raw, shell), line, source)
        words = _command_words(words, line, source)
        if words and words[0] in _CONTROL | {"[[", "["}:
            control = True
        if _program_index(words) is not None:
            candidates.append((line, words, shell.environment() | prefix))
        elif words and words[0] not in _CONTROL | {"[[", "["}:
            loose.append(words)
            loose_environment |= shell.environment() | prefix
    notes = ["the script has shell conditionals or loops; parasol read every branch in order"] if control else []
    if candidates:
        if len(candidates) > 1:
            notes.append(f"{len(candidates)} training commands found; read the last one "
                         f"(line {candidates[-1][0]})")
        _, words, environment = candidates[-1]
        at = _program_index(words)
        assert at is not None
        return Command(tuple(_until_operator(words[at + 1:])), tuple(words[:at]), tuple(notes), words[at],
                       tuple(allocation), tuple(environment.items()))
    words = [w for ws in loose for w in ws]
    if not words or not words[0].startswith("--"):
        raise InputError(
            "No Megatron-LM flags found in the launch line.", field=SOURCE,
            value=shown(" ".join(words))[:80] if words else None,
            expected="`torchrun … pretrain_gpt.py --flag value …`, or flags alone starting with `--`",
            fix="pass the command that starts training, or just its `--flag value` part.", file=source,
        )
    return Command(tuple(words), (), tuple(notes), environment=tuple(loose_environment.items()))


_SBATCH = "#SBATCH"
Options = dict[str, tuple[str, ...]]
"""A launcher's spellings of its rank counts: ranks per node, nodes and ranks in all."""
_TORCHRUN: Options = {"per_node": ("--nproc_per_node", "--nproc-per-node"), "nodes": ("--nnodes",), "total": ()}
_SRUN: Options = {"per_node": ("--ntasks-per-node",), "nodes": ("--nodes", "-N"), "total": ("--ntasks", "-n")}
_MPIRUN: Options = {"per_node": ("--npernode", "-npernode", "-N"), "nodes": (), "total": ("-np", "--np", "-n")}
"""torchrun's, Slurm srun's and Open MPI mpirun / mpiexec's."""
_SEGMENT: Options = {"segment": ("--segment",)}
"""Slurm's segment size, in nodes (sbatch/srun --segment, for block topologies)."""


def _given_counts(words: tuple[str, ...], options: Options) -> dict[str, int | None] | None:
    """Each count of `options` as given in the launcher's words (`--name value`, `--name=value`, `-Nvalue`; the
    spelling given last wins), None where none is; None in all when one given is not a whole number."""
    names = {name: count for count, spellings in options.items() for name in spellings}
    given: dict[str, str] = {}
    for i, w in enumerate(words):
        name, eq, value = w.partition("=")
        if name in names:
            given[names[name]] = value if eq else (words[i + 1] if i + 1 < len(words) else "")
        elif len(w) > 2 and w[:2] in names and w[1] != "-":
            given[names[w[:2]]] = w[2:]
    if not all(value.isdigit() for value in given.values()):
        return None
    return {count: int(given[count]) if count in given else None for count in options}


def _ranks(counts: dict[str, int | None] | None) -> tuple[int, int | None] | None:
    """(ranks, ranks per node) from given counts: the total when given, else per node × nodes (1 when not given)."""
    if counts is None or (counts["total"] is None and counts["per_node"] is None):
        return None
    if counts["total"] is not None:
        return counts["total"], counts["per_node"]
    return counts["per_node"] * (counts["nodes"] or 1), counts["per_node"]


def _launcher_counts(launcher: tuple[str, ...], allocation: tuple[str, ...]) -> tuple[int, int | None] | None:
    """Command.ranks of these launcher words and `#SBATCH` options."""
    torchrun = _given_counts(launcher, _TORCHRUN)
    if torchrun is None or torchrun["per_node"] is not None:
        return _ranks(torchrun)
    programs = {PurePosixPath(word).name for word in launcher}
    if "srun" in programs:
        return _ranks(_given_counts((*allocation, *launcher), _SRUN))
    if programs & {"mpirun", "mpiexec"}:
        return _ranks(_given_counts(launcher, _MPIRUN))
    return None
