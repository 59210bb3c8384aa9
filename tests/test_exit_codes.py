"""Exit codes and the input guards of issue 13: an internal error is exit 3 with one line (the traceback
only with --debug); every reproduction of the issue's table is a clear one-paragraph error with exit 2 or
a verdict; no output replaces an input; the reference data lives inside the repository.
Sources: issue 13 (the reproductions), parasol/bounds.py (the bounds), solver/cli.py (the exit codes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import parasol.solver.cli as cli
from parasol.bounds import MAX_GPUS, MAX_LAYERS

ROOT = Path(__file__).resolve().parents[1]
V4 = str(ROOT / "problems" / "deepseek-v4-pro-1024.yaml")
ASIC = str(ROOT / "problems" / "5t-moe-asic-64.yaml")


def run(*args: str):
    return CliRunner().invoke(cli.main, list(args))


def _boom(*_: object, **__: object) -> None:
    raise RuntimeError("simulated bug")


def test_internal_error_is_exit_3_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "explain_mapping", _boom)
    result = run("explain", V4)
    assert result.exit_code == cli.EXIT_INTERNAL == 3
    text = result.output
    assert "Traceback" not in text
    assert "internal error" in text and "simulated bug" in text and "--debug" in text
    assert len([line for line in text.splitlines() if line.strip()]) == 1


def test_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "explain_mapping", _boom)
    result = run("--debug", "explain", V4)
    assert result.exit_code == 3
    assert "Traceback" in result.output and "RuntimeError: simulated bug" in result.output


def test_help_documents_every_exit_code() -> None:
    for args in ((), ("solve",), ("explain",), ("sweep",)):
        text = " ".join(run(*args, "--help").output.split())
        for phrase in ("0 feasible", "1 infeasible", "2 bad input", "3 internal error"):
            assert phrase in text, (args, phrase)


@pytest.mark.parametrize("args", [
    ("explain", V4, "--set", "mbs=2147483648"),
    ("explain", V4, "--set", "seq_len=1000000000000000000000"),
    ("explain", V4, "--set", "gbs=1000000000000000000000"),
    ("explain", V4, "--set", "gpus=1000000000000"),
    ("explain", V4, "--set", f"gpus={2 * MAX_GPUS}"),
    ("explain", V4, "--set", "mbs=" + "9" * 5000),
    ("explain", V4, "--megatron-args", "--pipeline-model-parallel-layout Et*999999999|L"),
    ("explain", V4, "--megatron-args", "--moe-layer-freq " + "(" * 3000 + "1" + ")" * 3000),
    ("explain", V4, "--megatron-args", "--moe-layer-freq " + "9" * 5000),
    ("explain", V4, "--megatron-args-file", "/dev/zero"),
    ("explain", "/dev/zero"),
    ("calibrate", "/dev/zero"),
    ("sweep", V4, "--gpus", "1_..8"),
    ("sweep", V4, "--gpus", "9" * 5000),
    ("sweep", V4, "--gpus", "1..100000000+1"),
    ("solve", V4, "--time-limit", "nan"),
    ("explain", "--hardware", "h100-hgx", "--gpus", "8", "--megatron-args",
     "--num-layers 100000000 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
     "--micro-batch-size 1 --global-batch-size 8"),
], ids=lambda a: " ".join(a)[:60])
def test_issue_reproductions_are_bad_input(args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert len(result.output) < 1500


def _edited(tmp_path: Path, source: str, old: str, new: str) -> str:
    path = tmp_path / "p.yaml"
    text = Path(source).read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("source", "old", "new", "field"), [
    (ASIC, "capacity_factor: 1.25", "capacity_factor: 9007199254740992", "training.capacity_factor"),
    (ASIC, "num_experts: 384 ", "num_experts: 1e15 ", "model.moe.num_experts"),
    (ASIC, "num_layers: 128 ", f"num_layers: {MAX_LAYERS + 1} ", "model.num_layers"),
    (ASIC, "num_layers: 128 ", "num_layers: 9007199254740992 ", "model.num_layers"),
])
def test_problem_values_past_their_bound(tmp_path: Path, source: str, old: str, new: str, field: str) -> None:
    result = run("explain", _edited(tmp_path, source, old, new))
    assert result.exit_code == 2, result.output
    assert field in result.output and "p.yaml:" in result.output


def test_own_mapping_errors_carry_file_and_line(tmp_path: Path) -> None:
    path = _edited(tmp_path, V4, "  ep: 64\n", "  ep: 0\n")
    result = run("explain", path)
    assert result.exit_code == 2
    line = next(i for i, text in enumerate(Path(path).read_text().splitlines(), 1) if "ep: 0" in text)
    assert f"p.yaml:{line}:" in result.output


def test_outputs_never_replace_inputs(tmp_path: Path) -> None:
    problem = tmp_path / "p.yaml"
    shutil.copy(V4, problem)
    before = problem.read_bytes()
    result = run("solve", str(problem), "--rank-map", str(problem), "--time-limit", "1")
    assert result.exit_code == 2 and "input" in result.output
    assert problem.read_bytes() == before
    runs = tmp_path / "runs.yaml"
    shutil.copy(ROOT / "reference" / "measured-configs.yaml", runs)
    before = runs.read_bytes()
    result = run("calibrate", str(runs), "--out", str(runs))
    assert result.exit_code == 2 and "input" in result.output
    assert runs.read_bytes() == before


@pytest.mark.parametrize("flags", [("--out", "/proc/x"), ("--rank-map", "/proc/x"),
                                   ("--emit", "megatron", "--out", "/proc/x")])
def test_unwritable_outputs_are_bad_input(flags: tuple[str, ...], tmp_path: Path) -> None:
    problem = tmp_path / "small.yaml"
    problem.write_text(
        "model: llama-3-8b\ntraining: {seq_len: 4096, global_batch: 64}\nhardware: {preset: h100-hgx, gpus: 8}\n",
        encoding="utf-8")
    result = run("solve", str(problem), "--time-limit", "2", *flags)
    assert result.exit_code == 2, result.output
    assert "/proc/x" in result.output and "Traceback" not in result.output


def test_no_pick_hint_without_pick(tmp_path: Path) -> None:
    result = run("solve", ASIC, "--time-limit", "0.2", "--rank-map", str(tmp_path / "r.csv"))
    assert "--pick" not in result.output


def test_nothing_reads_outside_the_repository() -> None:
    """No source, test, benchmark or data file reaches for, or cites, a sibling folder (a fresh clone has
    none: the seeds, the brief and the reference data are in reference/)."""
    reaches = ("parents[" + "2]", "parent." + "parent", '/ "sha' + 'red"', "/work/" + "shared", "../" + "shared")
    offenders = []
    for folder in ("parasol", "hardware", "problems", "constraints", "solver", "tests", "bench"):
        for path in sorted(p for ext in ("py", "yaml", "md", "txt") for p in (ROOT / folder).rglob(f"*.{ext}")):
            text = path.read_text(encoding="utf-8")
            offenders += [f"{path.relative_to(ROOT)}: {r}" for r in reaches if r in text]
    assert offenders == []


LLAMA_HF = {"model_type": "llama", "hidden_size": 4096, "vocab_size": 32000, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336}


@pytest.mark.parametrize("text", [
    json.dumps({**LLAMA_HF, "num_attention_heads": 0}),
    json.dumps({**LLAMA_HF, "num_attention_heads": "32"}),
    json.dumps({**LLAMA_HF, "num_attention_heads": None}),
    json.dumps({**LLAMA_HF, "num_attention_heads": [32]}),
    json.dumps({**LLAMA_HF, "hidden_act": ["silu"]}),
    json.dumps({**LLAMA_HF, "num_hidden_layers": 1e300}),
    json.dumps(LLAMA_HF)[:-1] + ', "vocab_size": ' + "9" * 5000 + "}",
    json.dumps(LLAMA_HF)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
], ids=["zero-heads", "text", "null", "list", "act-list", "huge-float", "5000-digits", "deep"])
def test_odd_hf_config_values_are_bad_input(tmp_path: Path, text: str) -> None:
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    problem = tmp_path / "p.yaml"
    problem.write_text("model: {hf_config: config.json}\ntraining: {seq_len: 4096, global_batch: 64}\n"
                       "hardware: {preset: h100-hgx, gpus: 8}\n", encoding="utf-8")
    result = run("explain", str(problem))
    assert result.exit_code == 2, result.output
    assert "config.json" in result.output and "Traceback" not in result.output


def test_a_file_an_earlier_command_read_is_not_an_input_of_the_next(tmp_path: Path) -> None:
    """The never-overwrite guard is per command: in one process (the API, a notebook, the test runner) a
    file read by an earlier command may be an output of a later one."""
    earlier = tmp_path / "earlier.yaml"
    earlier.write_text(Path(ASIC).read_text(encoding="utf-8"), encoding="utf-8")
    assert run("explain", str(earlier)).exit_code in (0, 1)
    refused = run("solve", str(earlier), "--time-limit", "0.2", "--rank-map", str(earlier))
    assert refused.exit_code == 2 and "is an input of this command" in refused.output
    allowed = run("solve", ASIC, "--time-limit", "0.2", "--rank-map", str(earlier))
    assert "is an input of this command" not in allowed.output


def _process(body: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run `body` (Python, with exit_without_teardown imported) in a fresh interpreter whose output is buffered
    (PYTHONUNBUFFERED dropped), so the flush is what writes it."""
    script = "import atexit, sys\nfrom parasol.solver.cli import exit_without_teardown\n" + body
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          check=False, env=env)


@pytest.mark.parametrize(("ending", "code", "stderr"), [("sys.exit(3)", 3, ""), ("sys.exit(None)", 0, ""),
                                                         ("None", 0, ""), ("sys.exit('no luck')", 1, "no luck")])
def test_process_exit_keeps_code_output_and_exit_handlers(tmp_path: Path, ending: str, code: int,
                                                          stderr: str) -> None:
    """A process entry point skips the interpreter's teardown, not what a normal exit does: the command's exit
    code (a message code prints and gives 1, as Python's own exit), all its buffered output, and the atexit
    handlers (multiprocessing's and Ray's are among them)."""
    body = ("atexit.register(lambda: open('handled', 'w').write('yes'))\n"
            "def command():\n    print('x' * 200_000)\n    " + ending + "\n"
            "exit_without_teardown(command)\n")
    proc = _process(body, tmp_path)
    assert proc.returncode == code
    assert proc.stdout == "x" * 200_000 + "\n"
    assert proc.stderr.strip() == stderr
    assert (tmp_path / "handled").read_text() == "yes"


def test_console_script_answers_through_the_fast_exit(tmp_path: Path) -> None:
    """`parasol solve` as a process: the table is printed whole and the exit code is the verdict's."""
    proc = subprocess.run([sys.executable, "-c", "from parasol.solver.cli import run; run()", "solve", V4],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "optimal" in proc.stdout and proc.stdout.endswith("\n")


def test_process_exit_with_unwritable_output_is_120(tmp_path: Path) -> None:
    """Output that cannot be flushed (its descriptor closed) ends the process with 120, as Python's own exit does,
    and the exit handlers still run."""
    body = ("import os\natexit.register(lambda: open('handled', 'w').write('yes'))\n"
            "def command():\n    print('x')\n    os.close(1)\n"
            "exit_without_teardown(command)\n")
    proc = _process(body, tmp_path)
    assert proc.returncode == 120
    assert (tmp_path / "handled").read_text() == "yes"
