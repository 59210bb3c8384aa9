"""Seeded fuzzing of the command line (tests/fuzz_inputs.py): mutated problem files and odd command lines
must each end with exit 0, 1 or 2, print no traceback, and stay within a time and memory bound. The cases
run in one child process under an address-space limit, so a runaway allocation fails the case instead of
the machine. Sources: issue 13 (the reproductions table; a few hundred cases per run, more when slow)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("fuzz_inputs.py")
MEMORY_BYTES = 6 << 30
"""Address space the child process may use (every case in it together)."""
CASE_SECONDS = 30.0
"""Longest one case may take (its solves run with time limits of 0.3 s, sweeps of a few sizes)."""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def run_fuzz(seed: int, count: int, folder: Path, timeout_s: float) -> list[dict]:
    """Every case's JSON line from one child process run of the driver."""
    done = subprocess.run([sys.executable, str(DRIVER), str(seed), str(count), str(folder)], capture_output=True,
                          text=True, timeout=timeout_s, preexec_fn=_limit_memory, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def check(rows: list[dict], count: int) -> None:
    """Every case ran, ended with 0, 1 or 2, printed no traceback and finished in time."""
    assert len(rows) == count
    bad = [r for r in rows if r["exit"] not in (0, 1, 2) or r["traceback"] or r["seconds"] > CASE_SECONDS]
    assert bad == [], json.dumps(bad[:5], indent=1)
    assert any(r["exit"] == 2 for r in rows) and any(r["exit"] in (0, 1) for r in rows)


def test_fuzzed_inputs_end_cleanly(tmp_path: Path) -> None:
    """Two hundred seeded cases: bad input is exit 2 with one paragraph, the rest a verdict."""
    check(run_fuzz(2026, 200, tmp_path, timeout_s=600), 200)


@pytest.mark.slow
def test_more_fuzzed_inputs_end_cleanly(tmp_path: Path) -> None:
    """Five hundred more cases from another seed, run with the slow tests."""
    check(run_fuzz(11, 500, tmp_path, timeout_s=1800), 500)
