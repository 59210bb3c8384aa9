"""Bad input never shows a traceback (issue 2 "Must show"): malformed problem files, generated from the
bundled problems/deepseek-v4-pro-1024.yaml, each give one paragraph on stderr and exit code 2.

Every case runs `parasol explain FILE` and checks the paragraph: it starts with `error:`, has no
line break and no traceback, names the file, the line of the offending key (exactly, where the case
knows it), the field as a dotted path, and says what was expected or how to fix it. The cases are
built three ways: the bundled file loaded as a dict, mutated and dumped again; single lines of the
bundled file edited in place (so the expected line is read off the file itself); and raw bytes.
Reference: BRIEF.md ("users get errors that name the field, the value, the rule, and a next step").
"""

from __future__ import annotations

import copy
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from parasol.solver.cli import main

BUNDLED = Path(__file__).resolve().parents[1] / "problems" / "deepseek-v4-pro-1024.yaml"
MODELS = Path(__file__).resolve().parents[1] / "problems" / "catalog"
TEXT = BUNDLED.read_text(encoding="utf-8")
BASE: dict[str, Any] = yaml.safe_load(TEXT)
INLINE_V4: dict[str, Any] = yaml.safe_load((MODELS / "deepseek-v4-pro.yaml").read_text(encoding="utf-8"))
MARKER = "parasol-was-here"
"""A file a constructed Python object would create in the case's folder; it must never appear."""


@dataclass(frozen=True)
class Written:
    """A malformed problem on disk, and what its error must say."""

    path: Path
    field: str | None
    line: int | None


@dataclass(frozen=True)
class Case:
    """One malformed problem: how to write it, the field its error must name, and text it must hold."""

    id: str
    write: Callable[[Path], Written]
    says: tuple[str, ...] = ()


# --- three ways to write a malformed problem --------------------------------------------------------


def _set(data: dict, path: tuple[str, ...], value: Any) -> None:
    """Set (or, with value _DELETE, remove) a nested key of a problem dict."""
    for key in path[:-1]:
        data = data[key]
    if value is _DELETE:
        del data[path[-1]]
    else:
        data[path[-1]] = value


_DELETE = object()


def mutated(path: tuple[str, ...], value: Any, field: str | None = None) -> Callable[[Path], Written]:
    """The bundled problem as a dict with one key set (or deleted), dumped to YAML."""
    def write(folder: Path) -> Written:
        data = copy.deepcopy(BASE)
        _set(data, path, value)
        out = folder / "problem.yaml"
        out.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
        return Written(out, field if field is not None else ".".join(path), None)
    return write


def inline_model(change: Callable[[dict], None], field: str) -> Callable[[Path], Written]:
    """The bundled problem with DeepSeek-V4-Pro written inline under `model:` and then changed."""
    model = copy.deepcopy(INLINE_V4)
    change(model)
    return mutated(("model",), model, field)


def line_of(prefix: str) -> int:
    """1-based number of the single line of the bundled file that starts with `prefix` (indent included)."""
    hits = [i for i, row in enumerate(TEXT.splitlines(), 1) if row.startswith(prefix)]
    assert len(hits) == 1, f"{prefix!r} is not on exactly one line of {BUNDLED}"
    return hits[0]


def edited(prefix: str, new: str, field: str | None, *, after: bool = False) -> Callable[[Path], Written]:
    """The bundled text with the line starting with `prefix` replaced by `new` (or `new` inserted after
    it); the error must point at that line."""
    def write(folder: Path) -> Written:
        rows = TEXT.splitlines()
        n = line_of(prefix)
        if after:
            rows.insert(n, new)
        else:
            rows[n - 1] = new
        out = folder / "problem.yaml"
        out.write_text("\n".join(rows) + "\n", encoding="utf-8")
        return Written(out, field, n + 1 if after else n)
    return write


def raw(content: bytes | str, field: str | None = None, line: int | None = None) -> Callable[[Path], Written]:
    """A problem file with exactly these bytes."""
    def write(folder: Path) -> Written:
        out = folder / "problem.yaml"
        out.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return Written(out, field, line)
    return write


def directory(folder: Path) -> Written:
    """A path that is a directory."""
    (folder / "problems.yaml").mkdir()
    return Written(folder / "problems.yaml", None, None)


def missing(folder: Path) -> Written:
    """A path where no file exists."""
    return Written(folder / "no-such-problem.yaml", None, None)


def hf_directory(folder: Path) -> Written:
    """`model: {hf_config: …}` naming a directory."""
    (folder / "checkpoint").mkdir()
    return mutated(("model",), {"hf_config": "checkpoint"}, "model.hf_config")(folder)


def python_tag(tag_line: str) -> Callable[[Path], Written]:
    """A YAML tag that asks for a Python object, placed on the `model:` line."""
    return edited("model:", tag_line, "model")


def recursive_alias(folder: Path) -> Written:
    """`ep: &a [*a]`: a list that contains itself."""
    out = folder / "problem.yaml"
    out.write_text(TEXT.replace("  ep: [32, 64, 128]", "  ep: &a [*a]"), encoding="utf-8")
    return Written(out, "search.ep.0", line_of("  ep: ["))


def with_bytes(old: str, new: bytes) -> bytes:
    """The bundled file as UTF-8 bytes with the first `old` replaced by raw bytes `new`."""
    data = TEXT.encode("utf-8")
    assert old.encode("utf-8") in data
    return data.replace(old.encode("utf-8"), new, 1)


BILLION_LAUGHS = "".join(
    [f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)]
)


# --- the cases -----------------------------------------------------------------------------------

CASES = [
    # fuzzed types
    Case("seq_len-text", edited("  seq_len:", "  seq_len: eight-k", "training.seq_len"), ("whole number", "text")),
    Case("seq_len-list", mutated(("training", "seq_len"), [8192]), ("got a list",)),
    Case("seq_len-true", edited("  seq_len:", "  seq_len: true", "training.seq_len"), ("true/false",)),
    Case("seq_len-null", mutated(("training", "seq_len"), None), ("null",)),
    Case("seq_len-fraction", mutated(("training", "seq_len"), 8192.5), ("whole number",)),
    Case("seq_len-huge", mutated(("training", "seq_len"), 10**30), ("at most",)),
    Case("seq_len-negative", mutated(("training", "seq_len"), -8192), ("at least 1",)),
    Case("seq_len-zero", edited("  seq_len:", "  seq_len: 0", "training.seq_len"), ("at least 1",)),
    Case("seq_len-nan", mutated(("training", "seq_len"), math.nan), ("finite",)),
    Case("workspace-inf", mutated(("training", "workspace_gb"), math.inf), ("finite",)),
    Case("global_batch-with-unit", edited("  global_batch:", "  global_batch: 4k", "training.global_batch")),
    Case("training-is-a-list", mutated(("training",), [8192, 4096]), ("mapping",)),
    Case("hardware-is-text", mutated(("hardware",), "h800-hgx"), ("mapping",)),
    Case("options-is-a-list", mutated(("framework", "options"), ["flex"]), ("mapping",)),
    Case("search-item-text", edited("  ep: [", "  ep: [32, sixty-four, 128]", "search.ep.1"), ("whole number",)),
    Case("search-degree-mapping", mutated(("search", "tp"), {"min": 1}), ("list",)),
    Case("mapping-pp-fraction", edited("  pp: 8", "  pp: 8.5", "mapping.pp"), ("whole number",)),
    Case("mapping-tp-true", mutated(("mapping", "tp"), True), ("true/false",)),
    Case("bool-flag-list", mutated(("training", "distributed_optimizer"), [True]), ("true or false",)),
    Case("model-is-a-number", edited("model:", "model: 5", "model"), ("catalog name",)),
    Case("description-mapping", mutated(("description",), {"text": "x"}), ("text",)),
    Case("long-value-is-cut", mutated(("description",), ["x" * 5000]), ("...",)),
    # missing required fields
    Case("missing-model", mutated(("model",), _DELETE), ("Missing required field",)),
    Case("missing-training", mutated(("training",), _DELETE), ("Missing required field",)),
    Case("missing-seq_len", mutated(("training", "seq_len"), _DELETE), ("under `training`",)),
    Case("missing-global_batch", mutated(("training", "global_batch"), _DELETE), ("under `training`",)),
    Case("missing-hardware", mutated(("hardware",), _DELETE), ("Missing required field",)),
    Case("missing-gpus", mutated(("hardware", "gpus"), _DELETE), ("under `hardware`",)),
    Case("hardware-without-preset", mutated(("hardware",), {"gpus": 1024}), ("hardware.preset",)),
    # unknown keys at every level
    Case("unknown-top", edited("objectives:", "solver: cpsat", "solver", after=True), ("Unknown key",)),
    Case("unknown-training", edited("  global_batch:", "  learning_rate: 0.0003", "training.learning_rate",
                                    after=True), ("Unknown key",)),
    Case("unknown-hardware", edited("  gpus:", "  nodes: 128", "hardware.nodes", after=True), ("Unknown key",)),
    Case("unknown-framework", edited("  rule_packs:", "  version: 0.9", "framework.version", after=True)),
    Case("unknown-option-typo", edited("    cp_partition_mode:", "    moe_token_dispatcher: flex",
                                       "framework.options.moe_token_dispatcher", after=True),
         ("did you mean `moe_token_dispatcher_type`",)),
    Case("unknown-search", edited("  cp: [", "  dp: [1, 2]", "search.dp", after=True), ("Unknown key",)),
    Case("unknown-mapping", edited("  ep: 64", "  dp: 16", "mapping.dp", after=True), ("Unknown key",)),
    Case("unknown-inline-model", inline_model(lambda m: m.update(layers=61), "model.layers"), ("Unknown key",)),
    Case("unknown-inline-attention", inline_model(lambda m: m["attention"].update(window=128),
                                                  "model.attention.window"), ("Unknown key",)),
    Case("unknown-inline-moe", inline_model(lambda m: m["moe"].update(experts=384), "model.moe.experts"),
         ("Unknown key",)),
    Case("unknown-topology-key", mutated(("hardware",), {"preset": "h800-hgx", "gpus": 1024,
                                                          "topology": {"gpus_per_rack": 72}},
                                         "hardware.topology.gpus_per_rack")),
    # absurd sizes
    Case("top_k-above-experts", inline_model(lambda m: m["moe"].update(top_k=385), "model.moe.top_k"),
         ("cannot exceed num_experts",)),
    Case("top_k-above-experts-override", mutated(("model",), {"catalog": "deepseek-v4-pro", "moe": {"top_k": 385}},
                                                 "model.moe.top_k"), ("cannot exceed num_experts",)),
    Case("gpus-1e30", edited("  gpus:", "  gpus: 1000000000000000000000000000000", "hardware.gpus"),
         ("at most 1,048,576",)),
    Case("gpus-zero", mutated(("hardware", "gpus"), 0), ("at least 1",)),
    Case("ranks-per-node-not-dividing", mutated(("hardware", "ranks_per_node"), 7), ("dividing 1024",)),
    Case("vocab-zero", inline_model(lambda m: m.update(vocab_size=0), "model.vocab_size"), ("at least 1",)),
    Case("dense-lead-in-too-long", mutated(("model",), {"catalog": "deepseek-v3", "first_dense_layers": 99},
                                           "model.first_dense_layers"), ("exceeds num_layers",)),
    # bad enums
    Case("optimizer-sgd", edited("  optimizer:", "  optimizer: sgd", "training.optimizer"), ("'adam'",)),
    Case("precision-fp4", edited("  precision:", "  precision: fp4", "training.precision"), ("did you mean 'fp8'",)),
    Case("recompute-partial", edited("  recompute:", "  recompute: partial", "training.recompute"), ("'selective'",)),
    Case("rule-pack-foo", edited("  rule_packs:", "  rule_packs: [megatron-core, foo]", "framework.rule_packs.1"),
         ("'deepseek-v4'",)),
    Case("grad-dtype-fp16", mutated(("training", "grad_dtype"), "fp16"), ("'bf16'",)),
    Case("attention-kind-unknown", inline_model(lambda m: m["attention"].update(kind="linear"),
                                                "model.attention.kind"), ("'dsv4_hybrid'",)),
    # unknown names and paths
    Case("model-unknown", edited("model:", "model: deepseek-v5-pro", "model"), ("deepseek-v4-pro",)),
    Case("catalog-unknown", mutated(("model",), {"catalog": "llama-5"}, "model.catalog"), ("parasol models",)),
    Case("preset-unknown", edited("  preset:", "  preset: h900-hgx", "hardware.preset"), ("h800-hgx",)),
    Case("hf_config-missing", mutated(("model",), {"hf_config": "no/such/config.json"}, "model.hf_config"),
         ("does not exist",)),
    Case("hf_config-directory", hf_directory, ("is a directory",)),
    Case("hf_config-with-extra-key", mutated(("model",), {"hf_config": "config.json", "num_layers": 8},
                                             "model.num_layers"), ("cannot be combined",)),
    # YAML syntax
    Case("yaml-bad-indentation", edited("  global_batch:", "     global_batch: 4096", "training.global_batch"),
         ("indentation",)),
    Case("yaml-unclosed-quote", edited("  precision:", '  precision: "bf16', "training.precision"),
         ("never closed",)),
    Case("yaml-tab", edited("  seq_len:", "\tseq_len: 8192", "training.seq_len"), ("tab",)),
    Case("yaml-unclosed-list", edited("  cp: [", "  cp: [1, 2, 4", "search.cp")),
    Case("yaml-duplicate-key", edited("  global_batch:", "  seq_len: 4096", "training.seq_len", after=True),
         ("appears twice",)),
    # whole-file problems
    Case("empty-file", raw(""), ("empty",)),
    Case("comments-only", raw("# nothing here\n"), ("empty",)),
    Case("top-level-list", raw("- model: deepseek-v4-pro\n- hardware: h800-hgx\n", line=1), ("not a list",)),
    Case("top-level-text", raw("deepseek-v4-pro on 1024 GPUs\n", line=1), ("single value",)),
    Case("not-utf8", raw(with_bytes("H800-class", b"H800-cl\xe4ss"), line=1), ("UTF-8",)),
    Case("control-character", raw(with_bytes("name: ", b"name: \x07"), line=line_of("name:")),
         ("control character",)),
    Case("a-directory", directory, ("directory",)),
    Case("no-such-file", missing, ("No problem file",)),
    Case("deep-nesting", raw("model: " + "[" * 100 + "]" * 100 + "\n", field="model" + ".0" * 32, line=1),
         ("32 levels",)),
    Case("too-deep-to-read", raw("model: " + "[" * 700 + "]" * 700 + "\n"), ("too deeply",)),
    # YAML that tries to build objects, and keys YAML reads as something else
    Case("python-object-apply", python_tag(f'model: !!python/object/apply:os.system ["touch {MARKER}"]'),
         ("not allowed",)),
    Case("python-name", python_tag("model: !!python/name:os.system"), ("not allowed",)),
    Case("python-object-new", python_tag("model: !!python/object/new:os.getcwd []"), ("not allowed",)),
    Case("custom-tag", python_tag("model: !include other.yaml"), ("not allowed",)),
    Case("number-key", edited("  seq_len:", "  1: 8192", "training.1"), ("a number, not as a name",)),
    Case("yes-no-key", edited("  precision:", "  on: bf16", "training.on"), ("true/false",)),
    Case("billion-laughs", raw("a: &a [x, x, x, x, x, x, x, x, x]\n" + BILLION_LAUGHS + "model: *i\n",
                               field="model", line=10), ("got a list",)),
    Case("recursive-alias", recursive_alias, ("whole number",)),
    Case("histogram-length", mutated(("contract",), {"routing": {"skew": "histogram", "histogram": [1, 2, 3]}},
                                     "contract.routing.histogram"), ("3 entries", "384 routed experts")),
    Case("histogram-share", mutated(("contract",), {"routing": {"skew": "histogram", "histogram": [200] + [1] * 383}},
                                    "contract.routing.histogram"), ("above 1/k",)),
    Case("zipf-without-exponent", mutated(("contract",), {"routing": {"skew": "zipf"}}, "contract.routing"),
         ("zipf_exponent",)),
]


# --- the checks ----------------------------------------------------------------------------------


def check_paragraph(text: str, written: Written, says: tuple[str, ...]) -> None:
    """The error contract: one paragraph naming file, line, field, and what was expected or a fix."""
    assert "Traceback" not in text
    assert text.endswith("\n") and "\n" not in text[:-1], text
    body = text[:-1]
    assert body.startswith("error: "), body
    assert str(written.path) in body, body
    if written.line is not None:
        assert f"{written.path}:{written.line}: " in body, body
    if written.field is not None:
        assert f"`{written.field}`" in body, body
    assert "Expected " in body or "Fix: " in body, body
    assert len(body) < 1500, body
    for phrase in says:
        assert phrase in body, body


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_problem_is_one_paragraph_and_exit_2(case: Case, tmp_path: Path, monkeypatch) -> None:
    """Issue 2 "Must show": each malformed problem → exit 2 and one `error:` paragraph on stderr
    (BRIEF.md: name the field, the value, the rule and a next step)."""
    monkeypatch.chdir(tmp_path)
    written = case.write(tmp_path)
    result = CliRunner().invoke(main, ["explain", str(written.path)])
    assert isinstance(result.exception, SystemExit), result.exc_info
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    check_paragraph(result.stderr, written, case.says)
    assert not (tmp_path / MARKER).exists()


def test_there_are_at_least_fifty_cases_and_fifteen_exact_lines(tmp_path: Path) -> None:
    """Issue 2 asks for fifty malformed files, fifteen of them with the exact line asserted."""
    exact = 0
    for i, case in enumerate(CASES):
        folder = tmp_path / str(i)
        folder.mkdir()
        exact += case.write(folder).line is not None
    assert len(CASES) >= 50
    assert exact >= 15
    assert len({c.id for c in CASES}) == len(CASES)


def test_python_tags_never_run(tmp_path: Path, monkeypatch) -> None:
    """A `!!python/object/apply:os.system` tag is refused before anything is constructed: the command
    it names never runs (yaml.SafeLoader only; problems/loader.py)."""
    monkeypatch.chdir(tmp_path)
    written = python_tag(f'model: !!python/object/apply:os.system ["touch {tmp_path / MARKER}"]')(tmp_path)
    result = CliRunner().invoke(main, ["explain", str(written.path)])
    assert result.exit_code == 2
    assert "!!python/object/apply:os.system" in result.stderr
    assert not (tmp_path / MARKER).exists()


def _console_script() -> list[str]:
    """The installed `parasol` entry point (or the same `main` through this interpreter)."""
    found = shutil.which("parasol")
    return [found] if found else [sys.executable, "-c", "from parasol.solver.cli import main; main()"]


SUBPROCESS_CASES = [c for c in CASES if c.id in ("seq_len-text", "python-object-apply", "not-utf8")]


@pytest.mark.slow
@pytest.mark.parametrize("case", SUBPROCESS_CASES, ids=[c.id for c in SUBPROCESS_CASES])
def test_installed_command_reports_one_paragraph(case: Case, tmp_path: Path) -> None:
    """The same contract through the real `parasol` process: stderr, exit status 2, no traceback."""
    written = case.write(tmp_path)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    proc = subprocess.run([*_console_script(), "explain", str(written.path)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    check_paragraph(proc.stderr, written, case.says)
    assert not (tmp_path / MARKER).exists()
