"""The bundled model catalog: one YAML file per model in `parasol.problems.catalog`.

Each file is a ModelArchitecture with YAML comments citing its source (an entry of
reference/model-specs.yaml and that entry's primary source) and a `published:` block saying which
counting convention the vendor's rounded figures follow.
"""

from __future__ import annotations

import difflib
from functools import cache
from importlib.resources import files
from typing import Any

from parasol.errors import CatalogError
from parasol.files import bundled_yaml
from parasol.problems.model.architecture import ModelArchitecture, architecture_from_dict
from parasol.problems.model.params import ModelParams, model_params

MODELS_PACKAGE = "parasol.problems.catalog"
SUFFIX = ".yaml"


def catalog_names() -> list[str]:
    """Names of every bundled model, sorted (the YAML file names without the suffix)."""
    root = files(MODELS_PACKAGE)
    return sorted(p.name.removesuffix(SUFFIX) for p in root.iterdir() if p.name.endswith(SUFFIX))


def catalog_name(name: str) -> str | None:
    """The catalog name `name` means: itself, or the one name equal to it once both are lower-cased with a
    HuggingFace organisation prefix dropped (`meta-llama/Llama-3.1-70B`, `deepseek-ai/DeepSeek-V3`); None when
    there is none."""
    known = catalog_names()
    if name in known:
        return name
    bare = name.rsplit("/", 1)[-1].lower()
    return next((k for k in known if k.lower() == bare), None)


def _unknown(name: str) -> CatalogError:
    """The error for a name that is not in the catalog, with the closest names as a hint."""
    known = catalog_names()
    close = difflib.get_close_matches(name.rsplit("/", 1)[-1].lower(), known, n=3)
    use = f"use {' or '.join(close)}, or another catalog name" if close else "use a catalog name"
    return CatalogError(
        f"Unknown model {name!r}.", field="model", value=name,
        expected="one of " + ", ".join(known),
        fix=f"{use} (`parasol models` lists them), or give the architecture inline "
            "or as {hf_config: path/to/config.json}.",
    )


@cache
def load_model(name: str) -> ModelArchitecture:
    """Read and validate one catalog entry by name (catalog_name: a HuggingFace id of it too); unknown names raise
    CatalogError."""
    found = catalog_name(name)
    if found is None:
        raise _unknown(name)
    text = files(MODELS_PACKAGE).joinpath(found + SUFFIX).read_text(encoding="utf-8")
    return architecture_from_dict(bundled_yaml(text), where=f"{found}{SUFFIX}")


def published_total_error(model: ModelArchitecture, params: ModelParams) -> float | None:
    """Relative difference of the computed total from the vendor's figure, under the vendor's MTP convention."""
    pub = model.published
    if pub.total is None:
        return None
    computed = params.total_with_mtp if pub.total_includes_mtp else params.total
    return computed / pub.total - 1.0


def published_active(params: ModelParams, convention: str) -> int:
    """The computed active count under a vendor's convention (DeepSeek head_only, Qwen/Mistral with both)."""
    return {
        "with_embedding_and_head": params.active_with_embedding,
        "head_only": params.active_head_only,
        "no_embedding": params.active_no_embedding,
    }[convention]


def model_summary(model: ModelArchitecture) -> dict[str, Any]:
    """Block structure, computed counts under every convention and the published figures, for `parasol models`."""
    params = model_params(model)
    pub = model.published
    moe_blocks = model.num_moe_layers
    return {
        "name": model.name,
        "layers": model.num_layers,
        "dense_blocks": model.num_layers - moe_blocks,
        "moe_blocks": moe_blocks,
        "mtp_layers": model.mtp_layers,
        "layer_pattern": model.layer_pattern,
        "experts": model.moe.num_experts if model.moe else 0,
        "top_k": model.moe.top_k if model.moe else 0,
        "total": params.total,
        "total_with_mtp": params.total_with_mtp,
        "active_with_embedding": params.active_with_embedding,
        "active_head_only": params.active_head_only,
        "active_no_embedding": params.active_no_embedding,
        "published": {
            "total": pub.total,
            "active": pub.active,
            "total_includes_mtp": pub.total_includes_mtp,
            "active_convention": pub.active_convention,
            "source": pub.source,
            "computed_active": published_active(params, pub.active_convention),
            "total_error": published_total_error(model, params),
        },
    }
