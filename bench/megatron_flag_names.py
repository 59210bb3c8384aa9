"""Regenerate problems/megatron/megatron_flags.txt from a Megatron-LM checkout: every quoted `--flag`
literal in megatron/ and the top-level scripts, and `--name`, `--no-name`, `--disable-name` for every
dataclass field there (Megatron's ArgumentGroupFactory builds flags from config dataclasses).

Usage: python bench/megatron_flag_names.py /path/to/Megatron-LM > problems/megatron/megatron_flags.txt
(then restore the three header lines naming the commit). Over-inclusion is harmless: the list only
decides which unread flags are typos."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

FLAG = re.compile(r"""['"](--[a-z0-9][a-z0-9_-]*)['"]""")


def git_text(repo: str, path: str) -> str:
    """One file at HEAD of a git checkout."""
    return subprocess.run(["git", "-C", repo, "show", f"HEAD:{path}"], capture_output=True, text=True,
                          check=True).stdout


def dataclass_flags(text: str) -> set[str]:
    """The flags ArgumentGroupFactory may build from the dataclasses of one source file."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    name = item.target.id.replace("_", "-")
                    out |= {f"--{name}", f"--no-{name}", f"--disable-{name}"}
    return out


def flag_names(repo: str) -> set[str]:
    """Every flag name found in the checkout's megatron/ package and top-level scripts."""
    files = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "HEAD", "--name-only"], capture_output=True,
                           text=True, check=True).stdout.split()
    flags: set[str] = set()
    for path in files:
        if path.endswith(".py") and (path.startswith("megatron/") or "/" not in path):
            text = git_text(repo, path)
            flags |= set(FLAG.findall(text)) | dataclass_flags(text)
    return flags


if __name__ == "__main__":
    print("\n".join(sorted(flag_names(sys.argv[1]))))
