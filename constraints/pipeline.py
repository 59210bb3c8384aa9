"""Pipeline layout rules: the stage cuts cover every block with PP·VPP virtual stages.

Source: Megatron-LM pipeline_parallel_layer_layout.py (stages % PP == 0, decoder count) and seed 000
§61 个块怎样分给流水线 (61 blocks cut unevenly over 8 stages).
"""

from __future__ import annotations

from parasol.constraints.base import Citation, Constraint, Facts, Family, MegatronStage


class LayoutCoversBlocks(Constraint):
    """The layout has PP·VPP entries summing to the number of blocks."""

    id = "layout-covers-blocks"
    family = Family.pipeline
    citation = Citation("Megatron-LM megatron/core/transformer/pipeline_parallel_layer_layout.py "
                        "(stage count % PP, count(t) == num_layers)", MegatronStage.model_build)
    pack = None
    unit = "blocks"
    summary = "len(layout) == PP·VPP and sum(layout) == num_layers"

    def slack(self, f: Facts) -> float:
        layout, m = f.derived.layout, f.mapping
        if len(layout) != m.pp * m.vpp:
            return -float(abs(len(layout) - m.pp * m.vpp))
        return -float(abs(sum(layout) - f.model.num_layers))

    def message(self, f: Facts) -> str:
        layout, m = f.derived.layout, f.mapping
        if len(layout) != m.pp * m.vpp:
            return f"layout has {len(layout)} stages; PP·VPP = {m.pp}·{m.vpp} = {m.pp * m.vpp} are needed"
        return f"layout places {sum(layout)} blocks; the model has {f.model.num_layers}"

    def post(self, model, v, enforce) -> None:
        stages = v.consts["layout_stages"]
        if v.consts["layout_blocks"] != v.consts["num_layers"]:
            model.AddBoolOr([enforce.Not()])
        model.Add(v.product("pp", "vpp") == stages).OnlyEnforceIf(enforce)
