"""The Megatron-LM coverage audit (constraints/rules/megatron_coverage.yaml) and the rule registry agree:
every rule the table names exists, every rule that cites Megatron-LM code appears in the table, and every
audited check is either mapped to rules or says why it is not modelled."""

from __future__ import annotations

from pathlib import Path

import yaml

from parasol.constraints.rules.registry import builtin_constraints

TABLE = yaml.safe_load((Path(__file__).resolve().parents[1] / "constraints" / "rules" / "megatron_coverage.yaml")
                       .read_text())
RULES = {rule.id: rule for rule in builtin_constraints()}


def table_rule_ids() -> set[str]:
    """Every rule id the table names, in the checks and in the list of rules citing other code."""
    named = {rid for entries in TABLE["checks"].values() for e in entries for rid in e.get("rules", ())}
    return named | set(TABLE["rules_citing_other_megatron_code"])


def test_every_named_rule_exists() -> None:
    assert table_rule_ids() - set(RULES) == set()


def test_every_megatron_citing_rule_is_in_the_table() -> None:
    citing = {rid for rid, rule in RULES.items() if rule.citation.source.startswith("Megatron-LM")}
    assert citing - table_rule_ids() == set()


def test_every_check_is_mapped_or_explained() -> None:
    """One of `rules` (non-empty) or `not_modelled` (a reason) per check, never both."""
    for where, entries in TABLE["checks"].items():
        branch, _, path = where.partition(":")
        assert branch in TABLE["commits"] and path.startswith("megatron/"), where
        for e in entries:
            assert ("rules" in e) != ("not_modelled" in e), (where, e)
            assert e.get("rules") or len(e.get("not_modelled", "")) > 20, (where, e)


def test_mapped_rules_cite_the_checked_file() -> None:
    """A rule mapped to a check cites that check's file (the table was joined on the citations)."""
    for where, entries in TABLE["checks"].items():
        path = where.partition(":")[2]
        for e in entries:
            for rid in e.get("rules", ()):
                assert path in RULES[rid].citation.source or path.rsplit("/", 1)[-1] in RULES[rid].citation.source, \
                    (where, e["line"], rid)


def test_audit_covers_the_issue_files() -> None:
    """validate_args, the microbatch calculator, the config objects, initialize_model_parallel, GPT and the
    DeepSeek-V4 hybrid model construction are all audited, with the commits they were read from."""
    audited = " ".join(TABLE["audited"])
    for name in ("validate_args", "ConstantNumMicroBatchesCalculator", "TransformerConfig.__post_init__",
                 "MLATransformerConfig.__post_init__", "initialize_model_parallel", "GPTModel.__init__",
                 "get_num_layers_to_build", "HybridModel.__init__", "DSv4HybridAttention.__init__"):
        assert name in audited, name
    assert all("@" in commit for commit in TABLE["commits"].values())
