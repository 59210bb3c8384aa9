"""Print every option string Megatron-LM's own argument parser defines (megatron/training/arguments.py
add_megatron_arguments, which pretrain_gpt.py and pretrain_hybrid.py parse with): the exact set a launch line may
use, unlike problems/megatron/megatron_flags.txt, which over-includes dataclass field names on purpose (it only
tells a typo from a known flag). problems/megatron/megatron_parser_flags.txt holds its output for the commit the rules
cite; tests/test_emit.py holds every flag the emitter writes to it.

Usage (Megatron-LM and torch importable, e.g. the Megatron oracle's environment):
    python bench/megatron_parser_flags.py /path/to/Megatron-LM > problems/megatron/megatron_parser_flags.txt
then restore the header lines naming the commit."""

from __future__ import annotations

import argparse
import sys
import typing


def parser_flags(checkout: str) -> list[str]:
    """The sorted long option strings of Megatron-LM's parser, built as parse_args builds it (no extra provider:
    the entry scripts add only NVIDIA ModelOpt's flags, when it is installed)."""
    if not hasattr(typing, "override"):
        import typing_extensions  # Python 3.11: the checkout imports typing.override

        typing.override = typing_extensions.override
    sys.path.insert(0, checkout)
    from megatron.training.arguments import add_megatron_arguments

    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_megatron_arguments(parser)
    return sorted(option for option in parser._option_string_actions if option.startswith("--"))


if __name__ == "__main__":
    print("\n".join(parser_flags(sys.argv[1])))
