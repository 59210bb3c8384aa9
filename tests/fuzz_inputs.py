"""Seeded fuzz cases for the command line: mutated problem files and command lines, run in-process by
click's CliRunner. Run as a script (`python tests/fuzz_inputs.py SEED COUNT FOLDER`) it prints one JSON
line per case: the arguments, the exit code, the seconds taken, and whether a traceback was printed;
tests/test_fuzz.py runs it in a child process with an address-space limit and checks every line."""

from __future__ import annotations

import copy
import json
import random
import sys
import time
from pathlib import Path

import yaml
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
BASES = ("deepseek-v4-pro-1024.yaml", "5t-moe-asic-64.yaml", "deepseek-v4-pro-gb200-nvl72.yaml")
SMALL = """name: fuzz-small
model:
  name: small-moe
  hidden_size: 1024
  vocab_size: 32000
  num_layers: 8
  attention: {kind: gqa, num_heads: 8, num_kv_heads: 4, head_dim: 128}
  moe: {num_experts: 8, top_k: 2, expert_intermediate_size: 1024}
training: {seq_len: 4096, global_batch: 64}
hardware: {preset: h100-hgx, gpus: 16}
mapping: {tp: 2, pp: 2, ep: 4}
"""
"""A problem small enough that `solve` with a short time limit finishes quickly."""

NUMBERS = (0, -1, 1, 2, 3, 7, 1023, 65536, 2**31, 2**53, 2**63, 10**21, 9007199254740992, 1.5, -0.0, 1e15,
           1e308, "nan", "inf", "-inf", "1e15", "9" * 5000, 4096, 1048577, 2**20)
ODDITIES = (None, True, False, "", "x", [], {}, [1, 2], {"a": 1}, "tp <= 8", "🙂", "\x00", [[[[[]]]]],
            "-" * 300, "(" * 3000, "a: b")
SET_KEYS = ("gpus", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "gbs", "seq_len", "recompute", "layout",
            "rank_order", "bogus")
FLAGS = ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--micro-batch-size",
         "--global-batch-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
         "--expert-model-parallel-size", "--num-experts", "--moe-layer-freq", "--ffn-hidden-size",
         "--pipeline-model-parallel-layout", "--context-parallel-size", "--moe-router-topk",
         "--num-layers-per-virtual-pipeline-stage", "--max-position-embeddings", "--num-query-groups")


def _value(rng: random.Random) -> object:
    """A value to drop somewhere: an extreme number, a wrong type, or deep nesting."""
    if rng.random() < 0.6:
        return rng.choice(NUMBERS)
    if rng.random() < 0.1:
        depth = rng.choice((10, 100, 2000))
        return json.loads("[" * depth + "]" * depth) if depth < 500 else "[" * depth
    return copy.deepcopy(rng.choice(ODDITIES))  # a fresh copy: a shared list set inside itself would cycle


def _paths(data: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a nested dict/list."""
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, (*prefix, i))
    return out


def _set(data: dict, path: tuple, value: object) -> None:
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def mutated_problem(rng: random.Random) -> str:
    """A bundled (or a small) problem with one to three values replaced, keys dropped or added, or its
    text cut or spliced."""
    text = SMALL if rng.random() < 0.3 else (ROOT / "problems" / rng.choice(BASES)).read_text(encoding="utf-8")
    if rng.random() < 0.15:
        cut = rng.randrange(len(text))
        return text[:cut] + rng.choice(("", ":", "\t", "  - ", "{", "\n  x: [", "&a x\n*a", "\xff"))[:5] + text[cut + 1:]
    data = yaml.safe_load(text)
    for _ in range(rng.randint(1, 3)):
        paths = _paths(data)
        path = rng.choice(paths)
        roll = rng.random()
        if roll < 0.7:
            _set(data, path, _value(rng))
        elif roll < 0.85 and isinstance(data, dict) and len(path) == 1:
            data.pop(path[0], None)
        else:
            section = rng.choice(("model", "training", "hardware", "mapping", "search", "contract", "framework"))
            if isinstance(data.get(section), dict):
                data[section][rng.choice(("num_experts", "num_layers", "gpus", "tp", "ep", "zzz", "capacity_factor",
                                          "seq_len", "global_batch", "vpp", "mbs"))] = _value(rng)
            else:
                data[section] = _value(rng)
    if rng.random() < 0.1:
        data["restrictions"] = [rng.choice(("tp <= 8", "ep * etp <= 64", "(" * 200 + "tp" + ")" * 200 + " < 2",
                                            "tp ** 9", "__import__('os')", "pp in (4, 8)", "x" * 600))
                                for _ in range(rng.choice((1, 5, 1001)))]
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False, width=10**6)


def command_line(rng: random.Random, problem: str, folder: Path) -> list[str]:
    """One `parasol` command line with odd options around a valid or mutated problem."""
    kind = rng.choice(("explain", "explain", "launch", "solve", "sweep", "file"))
    if kind == "explain":
        sets = []
        for key in rng.sample(SET_KEYS, rng.randint(1, 3)):
            sets += ["--set", f"{key}={_value(rng) if rng.random() < 0.7 else rng.choice((1, 2, 4, 8, 16))}"]
        return ["explain", problem, *sets]
    if kind == "launch":
        flags = ["--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "8", "--seq-length",
                 "4096", "--micro-batch-size", "1", "--global-batch-size", "64"]
        for flag in rng.sample(FLAGS, rng.randint(1, 3)):
            value = rng.choice((str(rng.choice(NUMBERS)), "Et*999999999|L", "(" * 3000, "([0]*3+[1]*5)", "E|t*8|L",
                                "1", "4", "-3", "x"))
            flags += [flag, value]
        return ["explain", "--hardware", "h100-hgx", "--gpus", str(rng.choice((8, 16, 0, 2**40))),
                "--megatron-args", " ".join(flags)]
    if kind == "solve":
        limit = rng.choice(("0.3", "0.5", "nan", "inf", "-1", "0", "1e400", "x"))
        out = rng.choice(([], ["--rank-map", problem], ["--out", "/proc/x"], ["--rank-map", str(folder / "r.csv")],
                          ["--top", "0"], ["--pick", "7", "--rank-map", str(folder / "r.csv")]))
        return ["solve", problem, "--time-limit", limit, *out]
    if kind == "sweep":
        sizes = rng.choice(("1_..8", "9" * 5000, "1..100000000+1", "8,16", "16..8", "0", "8..64x1", "8..16+0",
                            "2097152", "16,,32", "16x2", "8..128x2"))
        return ["sweep", problem, "--gpus", sizes, "--backend", "serial", "--time-limit", "0.3"]
    target = rng.choice(("/dev/zero", "/dev/null", str(folder), str(folder / "missing.yaml"), "/proc/self/mem"))
    return rng.choice((["explain", target], ["calibrate", target, "--out", str(folder / "c")],
                       ["explain", problem, "--megatron-args-file", target], ["solve", target]))


def cases(seed: int, count: int, folder: Path) -> list[list[str]]:
    """`count` command lines from `seed`: about half explain a mutated problem, the rest odd commands."""
    rng = random.Random(seed)
    small = folder / "small.yaml"
    small.write_text(SMALL, encoding="utf-8")
    out = []
    for i in range(count):
        if rng.random() < 0.5:
            path = folder / f"p{i}.yaml"
            path.write_text(mutated_problem(rng), encoding="utf-8")
            out.append(["explain", str(path)] if rng.random() < 0.8 else ["solve", str(path), "--time-limit", "0.3"])
        else:
            problem = str(small) if rng.random() < 0.6 else str(ROOT / "problems" / rng.choice(BASES))
            out.append(command_line(rng, problem, folder))
    return out


def main(seed: int, count: int, folder: Path) -> None:
    """Run every case in this process and print one JSON line per case."""
    from parasol.solver.cli import main as cli

    runner = CliRunner()
    for args in cases(seed, count, folder):
        start = time.perf_counter()
        result = runner.invoke(cli, args, catch_exceptions=True)
        seconds = time.perf_counter() - start
        text = result.output + (result.stderr if result.stderr_bytes is not None else "")
        code = result.exit_code if result.exception is None or isinstance(result.exception, SystemExit) else -1
        print(json.dumps({"args": [a[:80] for a in args], "exit": code, "seconds": round(seconds, 2),
                          "traceback": "Traceback" in text or code == -1,
                          "tail": text.strip().splitlines()[-1][:300] if text.strip() else ""}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
