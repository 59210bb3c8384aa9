"""The model a launch line describes: Megatron's model flags read with Megatron's defaults, or compared
with a problem file's model."""

from __future__ import annotations

from parasol.errors import InputError
from parasol.problems.megatron.context import Context, LaunchWarning
from parasol.problems.megatron.flags import Flags, flag_error
from parasol.problems.megatron.patterns import ListExpr, leading_dense, moe_pattern, parse_layer_freq
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.model.architecture import (
    BlockKind,
    DSV4Attention,
    MLAAttention,
    ModelArchitecture,
    architecture_from_dict,
)
from parasol.problems.model.catalog import catalog_name, load_model

ARGS = "Megatron-LM megatron/training/arguments.py"
CONFIG = "Megatron-LM megatron/core/transformer/transformer_config.py"


_REQUIRED_MODEL = ("--num-layers", "--hidden-size", "--num-attention-heads")
OLDER_LINEAR_ATTENTION_FLAG = "--linear-attention-type"
"""The earlier name of --experimental-attention-variant for linear attention, which main's parser no longer takes
(dev@d48bd6be still reads it as a deprecated alias, transformer_config.py:1555-1561): scripts written for it, such as
Megatron-MoE-ModelZoo's Qwen3-Next config, still carry it."""


MODEL_FLAGS = (
    *_REQUIRED_MODEL, "--ffn-hidden-size", "--kv-channels", "--group-query-attention", "--num-query-groups",
    "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq", "--moe-router-enable-expert-bias", "--multi-latent-attention", "--q-lora-rank",
    "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--qk-layernorm", "--swiglu",
    "--squared-relu", "--quick-geglu", "--disable-bias-linear", "--add-qkv-bias", "--untie-embeddings-and-output-weights",
    "--normalization", "--padded-vocab-size", "--vocab-size", "--make-vocab-size-divisible-by",
    "--mtp-num-layers", "--mtp-use-repeated-layer", "--max-position-embeddings", "--position-embedding-type", "--window-size",
    "--window-attn-skip-freq", "--mamba-num-heads", "--mamba-head-dim", "--mamba-num-groups", "--mamba-state-dim",
    "--experimental-attention-variant", OLDER_LINEAR_ATTENTION_FLAG, "--linear-attention-freq", "--linear-num-key-heads",
    "--linear-num-value-heads", "--linear-key-head-dim", "--linear-value-head-dim", "--linear-conv-kernel-dim",
    "--moe-latent-size", "--moe-shared-expert-gate", "--o-groups", "--o-lora-rank", "--csa-window-size",
    "--csa-compress-ratios", "--dsa-indexer-n-heads", "--dsa-indexer-head-dim", "--dsa-indexer-topk",
    "--moe-n-hash-layers", "--enable-hyper-connections", "--num-residual-streams",
)
"""Flags that describe the model; with a problem file they are compared with its model, not used."""
DEFAULT_VOCAB = 50257


def activation_flag(f: Flags) -> str:
    """MLP activation: --swiglu, --squared-relu, --quick-geglu, else GeLU (arguments.py:2444-2455)."""
    if f.switch("--swiglu"):
        return "swiglu"
    if f.switch("--squared-relu"):
        return "squared_relu"
    if f.switch("--quick-geglu"):
        return "geglu"
    return "gelu"


def _ffn_size(f: Flags, hidden: int, activation: str) -> int:
    """--ffn-hidden-size, default 4h, or int(8h/3 /64)·64 with SwiGLU (arguments.py:1320-1329)."""
    given = f.integer("--ffn-hidden-size")
    if given is not None:
        return given
    return int((4 * hidden * 2 / 3) / 64) * 64 if activation == "swiglu" else 4 * hidden


def _vocab(c: Context, tp: int) -> int:
    """--padded-vocab-size, else --vocab-size (or a catalog tokenizer's, _tokenizer_vocab) padded to a multiple of
    128·TP (build_tokenizer.py:133-146)."""
    f = c.flags
    padded = f.integer("--padded-vocab-size")
    if padded is not None:
        return padded
    vocab = f.integer("--vocab-size")
    if vocab is None and c.reference is None:
        vocab = _tokenizer_vocab(c)
        if vocab is None:
            c.warnings.append(LaunchWarning(
                "--vocab-size", f"no --padded-vocab-size or --vocab-size: assumed the GPT-2 BPE vocabulary "
                f"({DEFAULT_VOCAB:,} tokens) that Megatron's default tokenizer uses; pass the real size",
                "Megatron-LM megatron/core/tokenizers/utils/build_tokenizer.py:133-152", MegatronStage.not_megatron))
    multiple = (f.integer("--make-vocab-size-divisible-by") or 128) * tp
    return -(-(vocab or DEFAULT_VOCAB) // multiple) * multiple


HF_TOKENIZER = "HuggingFaceTokenizer"
"""The --tokenizer-type that loads --tokenizer-model from the HuggingFace hub (build_tokenizer.py)."""


def _tokenizer_vocab(c: Context) -> int | None:
    """The vocabulary of a HuggingFace tokenizer that names a catalog model (catalog.catalog_name: `unsloth/DeepSeek-V3`,
    `Qwen/Qwen3-235B-A22B`): the model's vocab_size (its config.json, the embedding's rows), noted. Megatron pads the
    tokenizer's own count, len(tokenizer) (huggingface_tokenizer.py:343-345), which is at most that, so the padded
    vocabulary is the same or one multiple less (build_tokenizer.py:133-146): never under. None for other tokenizers."""
    f = c.flags
    name = f.one("--tokenizer-model")
    if f.one("--tokenizer-type") != HF_TOKENIZER or name is None:
        return None
    known = catalog_name(name)
    if known is None:
        return None
    vocab = load_model(known).vocab_size
    c.notes.append(f"--tokenizer-model {name}: the vocabulary of the catalog's {known} ({vocab:,} tokens, its "
                   "config.json vocab_size), padded as Megatron pads the tokenizer's own count, which is at most that")
    return vocab


def _attention(c: Context, hidden: int, heads: int, variant: str | None) -> dict:
    """GQA/MHA, MLA or DeepSeek-V4 hybrid attention from the attention flags, with Megatron's defaults."""
    f = c.flags
    if variant == DSV4_VARIANT:
        return _dsv4_attention(c, heads)
    if f.switch("--multi-latent-attention"):
        if f.given("--group-query-attention"):
            c.notes.append("--group-query-attention with --multi-latent-attention: Megatron rejects the "
                           "pair (rule mla-excludes-gqa); parasol used MLA")
        q_rank = f.integer("--q-lora-rank")
        return {"kind": "mla", "num_heads": heads, "q_lora_rank": q_rank,
                "kv_lora_rank": f.integer("--kv-lora-rank") or 32,
                "qk_nope_head_dim": f.integer("--qk-head-dim") or 128,
                "qk_rope_head_dim": f.integer("--qk-pos-emb-head-dim") or 64,
                "v_head_dim": f.integer("--v-head-dim") or 128,
                "indexer": _dsa_indexer(c) if variant == DSA_VARIANT else None}
    if variant == DSA_VARIANT:
        raise InputError(f"--experimental-attention-variant {DSA_VARIANT} needs --multi-latent-attention: Megatron "
                         "builds DSA on MLA alone ('Currently only MLA supports sparse attention', "
                         "experimental_attention_variant_module_specs.py:101).", field="--experimental-attention-variant",
                         value=DSA_VARIANT, fix="add --multi-latent-attention with its MLA flags, or drop the variant.")
    groups = f.integer("--num-query-groups")
    kv_heads = heads
    if f.switch("--group-query-attention"):
        kv_heads = groups or 1
    elif groups is not None:
        c.notes.append("--num-query-groups without --group-query-attention: Megatron ignores it "
                       "(argument_utils.py:330-333) and uses one KV head per query head")
    head_dim = f.integer("--kv-channels")
    if head_dim is None:
        head_dim = max(1, hidden // heads)
        if hidden % heads:
            c.notes.append(f"--hidden-size {hidden} is not a multiple of --num-attention-heads {heads} and no "
                           f"--kv-channels: Megatron stops at validate_args (rule hidden-divisible-by-heads); "
                           f"parasol accounted head_dim {head_dim}")
    return {"kind": "gqa", "num_heads": heads, "num_kv_heads": kv_heads, "head_dim": head_dim,
            "qk_norm": f.switch("--qk-layernorm"), "bias": not f.given("--disable-bias-linear"),
            "qkv_bias": f.switch("--add-qkv-bias"), **_window(c)}


def _required(f: Flags, flag: str, variant: str, why: str, example: str) -> int:
    """A dimension of an attention variant Megatron has no usable default for: its value, or an InputError naming
    the flag."""
    value = f.integer(flag)
    if value is None:
        raise InputError(f"--experimental-attention-variant {variant} needs {flag}: {why}.", field=flag,
                         expected="a whole number >= 1", fix=f"pass {flag} N ({example}).")
    return value


DSA_VARIANT = "dsa"
"""--experimental-attention-variant of DeepSeek sparse attention (DeepSeek-V3.2; transformer_config.py:301)."""
DSA_INDEXER_FLAGS = {"n_heads": "--dsa-indexer-n-heads", "head_dim": "--dsa-indexer-head-dim",
                     "topk": "--dsa-indexer-topk"}
"""DSA's indexer shape by flag: no defaults (transformer_config.py:317-324), the indexer needs all three
(dsa.py:1123-1125)."""


def _dsa_indexer(c: Context) -> dict:
    """DSA's indexer from its flags; the sparse attention is priced as dense MLA, which is noted."""
    shape = {key: _required(c.flags, flag, DSA_VARIANT, "the indexer's shape has no default "
                            "(transformer_config.py:317-324)", "DeepSeek-V3.2: 64 heads of 128, top-k 2048")
             for key, flag in DSA_INDEXER_FLAGS.items()}
    c.notes.append(f"--experimental-attention-variant {DSA_VARIANT}: the indexer's weights are counted; its scoring, "
                   "the top-k selection and the sparse attention (Megatron's own unfused DSAttention) are priced as "
                   "dense MLA attention")
    return shape


DSV4_VARIANT = "dsv4_hybrid"
"""--experimental-attention-variant of DeepSeek-V4's hybrid attention (dev@d48bd6be transformer_config.py:307)."""
DSV4_SOURCE = "Megatron-LM dev@d48bd6be"
"""The Megatron-LM tree whose V4 flags parasol reads (main has none): the file:line citations of the V4 readers
below are to it."""
INDEXER_WHY = "the CSA indexer's shape, which TransformerConfig leaves unset (transformer_config.py:325-332)"
V4_EXAMPLE = "the DeepSeek-V4 configs give it"


def _dsv4_head_dim(c: Context) -> int:
    """The V4 head width: --v-head-dim (default 128, arguments.py:4893), which sizes the queries, the one latent KV
    head and the output (deepseek_v4_hybrid_attention.py:101-106); --kv-channels is not read there."""
    f = c.flags
    head_dim = f.integer("--v-head-dim") or 128
    kv_channels = f.integer("--kv-channels")
    if kv_channels is not None and kv_channels != head_dim:
        c.notes.append(f"--kv-channels {kv_channels} differs from --v-head-dim {head_dim}: Megatron's V4 attention "
                       f"sizes its heads by --v-head-dim ({DSV4_SOURCE} deepseek_v4_hybrid_attention.py:101-106), "
                       "and so does parasol")
    return head_dim


def _dsv4_attention(c: Context, heads: int) -> dict:
    """DeepSeek-V4 hybrid attention from dev@d48bd6be's flags: q_lora_rank and the indexer have no default
    (arguments.py:4869-4873, transformer_config.py:325-332; the indexer reads them, csa.py:1469-1471); o_groups 8,
    o_lora_rank 1024 (arguments.py:4916-4927), rope dim 64 (4886-4891), window 128 (transformer_config.py:369)."""
    f = c.flags
    if not f.switch("--multi-latent-attention"):
        c.notes.append(f"--experimental-attention-variant {DSV4_VARIANT} without --multi-latent-attention: Megatron "
                       f"stops at TransformerConfig ({DSV4_SOURCE} transformer_config.py:1744, 'DSv4 Hybrid requires "
                       "multi_latent_attention'); parasol built the V4 attention")
    return {"kind": DSV4_VARIANT, "num_heads": heads, "head_dim": _dsv4_head_dim(c),
            "q_lora_rank": _required(f, "--q-lora-rank", DSV4_VARIANT, "the query's low-rank width (no default, "
                                     "arguments.py:4869-4873)", V4_EXAMPLE),
            "o_groups": f.integer("--o-groups") or 8, "o_lora_rank": f.integer("--o-lora-rank") or 1024,
            "qk_rope_head_dim": f.integer("--qk-pos-emb-head-dim") or 64,
            "sliding_window": f.integer("--csa-window-size") or 128,
            **{f"index_{key}": _required(f, flag, DSV4_VARIANT, INDEXER_WHY, V4_EXAMPLE)
               for key, flag in DSA_INDEXER_FLAGS.items()},
            "compress_ratios": _compress_ratios(f)}


def _compress_ratios(f: Flags) -> tuple[int, ...]:
    """--csa-compress-ratios, a list expression (arguments.py:351-363): one ratio per block, then per MTP block
    (deepseek_v4_hybrid_attention.py:119-121); Megatron requires it (transformer_config.py:1745)."""
    text = f.one("--csa-compress-ratios")
    if text is None:
        raise InputError(f"--experimental-attention-variant {DSV4_VARIANT} needs --csa-compress-ratios "
                         f"({DSV4_SOURCE} transformer_config.py:1745, 'csa_compress_ratios must be set').",
                         field="--csa-compress-ratios", expected="one ratio (0, 4 or 128) per block and MTP block",
                         fix="pass --csa-compress-ratios such as '([0,0,4]+[128,4]*20+[0])'.")
    value = ListExpr(text, "--csa-compress-ratios").parse()
    if isinstance(value, int):
        raise flag_error("--csa-compress-ratios", text, "a list such as ([0,0,4]+[128,4]*20+[0]), one ratio per block "
                         "and MTP block (arguments.py:351-363)")
    return tuple(value)


def _check_ratio_count(ratios: tuple[int, ...], layers: int, mtp: int) -> None:
    """At least one ratio per block and MTP block (transformer_config.py:1746-1756)."""
    if len(ratios) < layers + mtp:
        raise InputError(f"csa_compress_ratios length ({len(ratios)}) must be at least num_layers + mtp_num_layers "
                         f"({layers} + {mtp} = {layers + mtp}) ({DSV4_SOURCE} transformer_config.py:1746-1756).",
                         field="--csa-compress-ratios", value=len(ratios), expected=f"{layers + mtp} ratios or more",
                         fix="give one ratio per --num-layers block, then one per --mtp-num-layers block.")


def _hc_mult(c: Context) -> int:
    """mHC residual streams: --num-residual-streams (default 4) under --enable-hyper-connections, else one plain
    residual (dev@d48bd6be transformer_config.py:1212-1216)."""
    f = c.flags
    streams = f.integer("--num-residual-streams") or 4
    if f.switch("--enable-hyper-connections"):
        return streams
    if f.given("--num-residual-streams"):
        c.notes.append("--num-residual-streams without --enable-hyper-connections: Megatron keeps one residual "
                       f"stream ({DSV4_SOURCE} transformer_config.py:1212-1216)")
    return 1


def _window(c: Context) -> dict:
    """Sliding-window attention: --window-size L,R (keys L + 1 with R 0; -1 is unbounded,
    transformer_config.py:247-249) and --window-attn-skip-freq (an int N or a 0/1 list, 1 local,
    arguments.py:2384-2393)."""
    f = c.flags
    text = f.one("--window-size")
    if text is None:
        return {}
    parts = [p.strip() for p in text.strip("()[] ").split(",")]
    if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
        raise flag_error("--window-size", text, "two integers 'left,right' such as 4095,0")
    left, right = (int(p) for p in parts)
    if left < 0:
        return {}
    if right != 0:
        c.notes.append(f"--window-size {text}: parasol prices the causal part of the window ({left + 1} keys)")
    out: dict = {"sliding_window": left + 1}
    freq = f.one("--window-attn-skip-freq")
    if freq is not None:
        value = ListExpr(freq, "--window-attn-skip-freq").parse()
        out["window_skip_freq"] = value if isinstance(value, int) else tuple(value)
    return out


def _mamba(f: Flags, hidden: int) -> dict:
    """Mamba-2 mixer from --mamba-* flags with Megatron's defaults (transformer_config.py:1259-1269; heads
    default to 2·hidden / head dim, mamba_mixer.py:245-251)."""
    head_dim = f.integer("--mamba-head-dim") or 64
    return {"num_heads": f.integer("--mamba-num-heads") or 2 * hidden // head_dim, "head_dim": head_dim,
            "state_size": f.integer("--mamba-state-dim") or 128, "num_groups": f.integer("--mamba-num-groups") or 8}


def _gdn(f: Flags) -> dict:
    """Gated DeltaNet from --linear-* flags with Megatron's defaults (transformer_config.py:370-383)."""
    return {"num_key_heads": f.integer("--linear-num-key-heads") or 16,
            "num_value_heads": f.integer("--linear-num-value-heads") or 32,
            "key_head_dim": f.integer("--linear-key-head-dim") or 128,
            "value_head_dim": f.integer("--linear-value-head-dim") or 128,
            "conv_kernel": f.integer("--linear-conv-kernel-dim") or 4}


def _attention_variant(c: Context) -> str | None:
    """--experimental-attention-variant, or OLDER_LINEAR_ATTENTION_FLAG read as its earlier name and noted."""
    variant = c.flags.one("--experimental-attention-variant")
    older = c.flags.one(OLDER_LINEAR_ATTENTION_FLAG)
    if older is not None:
        c.notes.append(f"{OLDER_LINEAR_ATTENTION_FLAG} {older}: Megatron-LM main does not take this earlier flag and "
                       "stops at parsing (unrecognized arguments; dev@d48bd6be reads it as a deprecated alias); judged "
                       f"as --experimental-attention-variant {older}, its name now")
    return variant if variant is not None else older


def _linear_freq(c: Context, variant: str | None) -> int | tuple[int, ...] | None:
    """--linear-attention-freq with a gated DeltaNet variant (experimental_attention_variant_module_specs.py:
    459-476); None for other models."""
    f = c.flags
    if variant not in ("gdn", "gated_delta_net"):
        return None
    text = f.one("--linear-attention-freq")
    if text is None:
        raise InputError("--experimental-attention-variant gated_delta_net needs --linear-attention-freq "
                         "(transformer_config.py:1472-1477).", field="--linear-attention-freq",
                         fix="pass --linear-attention-freq N (N−1 linear layers per softmax layer) or a 0/1 list.")
    value = ListExpr(text, "--linear-attention-freq").parse()
    return value if isinstance(value, int) else tuple(value)


def _blocks_mlp(c: Context, num_layers: int) -> list[int]:
    """MoE (1) / dense (0) per block, from the hybrid pattern or --moe-layer-freq."""
    if c.pattern is not None and c.pattern.layers is not None:
        return [1] * num_layers
    if c.pattern is not None:
        return [1 if k is BlockKind.moe else 0 for k in c.pattern.mlp]
    text = c.flags.one("--moe-layer-freq")
    freq = parse_layer_freq(text) if text is not None else 1
    return moe_pattern(freq, num_layers)


def _moe(c: Context, hidden: int, ffn: int, activation: str, num_layers: int) -> tuple[dict | None, int]:
    """The MoE section and the number of leading dense blocks. Blocks numbered up to --moe-n-hash-layers (default 0,
    dev@d48bd6be transformer_config.py:874) route by token hash (router.py:202-206): the MoE blocks among them."""
    f = c.flags
    experts = f.integer("--num-experts", minimum=0)
    if not experts:
        return None, 0
    shared = f.integer("--moe-shared-expert-intermediate-size")
    moe = {"num_experts": experts, "top_k": f.integer("--moe-router-topk") or 2,
           "expert_intermediate_size": f.integer("--moe-ffn-hidden-size") or ffn,
           "num_shared_experts": 1 if shared else 0, "shared_intermediate_size": shared,
           "activation": activation, "router_bias": f.switch("--moe-router-enable-expert-bias"),
           "latent_size": f.integer("--moe-latent-size"),
           "shared_expert_gate": bool(shared) and f.switch("--moe-shared-expert-gate")}
    flag = "--hybrid-layer-pattern" if c.pattern is not None else "--moe-layer-freq"
    first_dense = leading_dense(_blocks_mlp(c, num_layers), flag)
    moe["num_hash_layers"] = max(0, (f.integer("--moe-n-hash-layers", minimum=0) or 0) - first_dense)
    return moe, first_dense


def _max_positions(c: Context) -> int | None:
    """--max-position-embeddings (required by Megatron, arguments.py:1314-1317); --seq-length stands in."""
    f = c.flags
    given = f.integer("--max-position-embeddings")
    if given is None and f.given("--seq-length"):
        c.notes.append("--max-position-embeddings is missing (Megatron requires it); parasol used --seq-length")
        return f.integer("--seq-length")
    return given


def model_gaps(c: Context) -> str | None:
    """Why the line does not describe a model parasol can build, or None when it does."""
    f = c.flags
    if c.pattern is not None and c.pattern.dsv4:
        return ("the hybrid pattern uses DeepSeek-V4 attention (C/H/W): parasol builds a V4 model from "
                f"--experimental-attention-variant {DSV4_VARIANT} with --csa-compress-ratios, not from the pattern")
    needed = [n for n in _REQUIRED_MODEL if not f.given(n) and not (n == "--num-layers" and c.pattern)]
    if len(needed) == len(_REQUIRED_MODEL):
        return "the launch line has no model flags (" + ", ".join(_REQUIRED_MODEL) + ")"
    if needed:
        return "the launch line lacks " + ", ".join(needed)
    return None


def model_from_flags(c: Context, tp: int) -> ModelArchitecture | None:
    """The architecture the flags describe, with Megatron's defaults (None when flags are missing)."""
    f = c.flags
    hidden = f.integer("--hidden-size")
    heads = f.integer("--num-attention-heads")
    layers = f.integer("--num-layers")
    if c.pattern is not None:
        if layers is not None and layers != len(c.pattern.mlp):
            c.notes.append(f"--num-layers {layers} differs from the {len(c.pattern.mlp)} blocks of "
                           "--hybrid-layer-pattern; Megatron derives the layers from the pattern")
        layers = len(c.pattern.mlp)
    assert hidden is not None and heads is not None and layers is not None
    activation = activation_flag(f)
    ffn = _ffn_size(f, hidden, activation)
    bias = not f.switch("--disable-bias-linear")
    moe, first_dense = _moe(c, hidden, ffn, activation, layers)
    position = f.choice("--position-embedding-type", ("learned_absolute", "rope", "yarn", "mrope", "relative", "none"))
    max_positions = _max_positions(c)
    learned = position in (None, "learned_absolute")
    if learned and max_positions is None:
        raise InputError("Learned absolute position embeddings (Megatron's default) need "
                         "--max-position-embeddings.", field="--max-position-embeddings",
                         fix="pass --max-position-embeddings, or --position-embedding-type rope.")
    mtp = f.integer("--mtp-num-layers", minimum=0) or 0
    if c.pattern is not None and c.pattern.mtp_depth and not mtp:
        mtp = c.pattern.mtp_depth
    layer_wise = c.pattern is not None and c.pattern.layers is not None
    dense = moe is None or first_dense or (layer_wise and "-" in (c.pattern.layers or ""))
    variant = _attention_variant(c)
    freq = _linear_freq(c, variant)
    attention = _attention(c, hidden, heads, variant)
    if variant == DSV4_VARIANT:
        _check_ratio_count(attention["compress_ratios"], layers, mtp)
    data = {
        "name": "megatron-args",
        "hidden_size": hidden,
        "vocab_size": _vocab(c, tp),
        "num_layers": layers,
        "attention": attention,
        "dense_mlp": {"intermediate_size": ffn, "activation": activation, "bias": bias} if dense else None,
        "moe": moe,
        "first_dense_layers": first_dense,
        "norm": {"RMSNorm": "rmsnorm", "LayerNorm": "layernorm"}[
            f.choice("--normalization", ("LayerNorm", "RMSNorm")) or "LayerNorm"],
        "tied_embeddings": not f.switch("--untie-embeddings-and-output-weights"),
        "learned_position_embeddings": max_positions if learned and max_positions else 0,
        "mtp_layers": mtp,
        "mtp_repeated": bool(mtp) and f.switch("--mtp-use-repeated-layer"),
        "hc_mult": _hc_mult(c),
        "max_context": max_positions,
        "notes": "built from a Megatron-LM launch line",
    }
    if layer_wise:
        data["layer_pattern"] = c.pattern.layers if c.pattern else None
        data["mamba"] = _mamba(f, hidden) if "M" in (c.pattern.layers if c.pattern else "") else None
    if freq is not None or (layer_wise and "G" in (c.pattern.layers if c.pattern else "")):
        data["linear_attention"] = _gdn(f)
        data["linear_attention_freq"] = freq
    try:
        return architecture_from_dict(data, where=LAUNCH_MODEL)
    except InputError as exc:
        raise as_flag_error(exc) from None


CATALOG_HINT = " Complete examples are in problems/catalog/."
"""The schema errors' hint for problem files, dropped for a launch line."""
LAUNCH_MODEL = "launch-model"
"""The place name of the launch line's model while it is validated (replaced by the flag in errors)."""
FIELD_FLAGS = {
    "num_layers": "--num-layers", "hidden_size": "--hidden-size", "vocab_size": "--padded-vocab-size",
    "attention.num_heads": "--num-attention-heads", "attention.num_kv_heads": "--num-query-groups",
    "attention.head_dim": "--kv-channels", "attention.q_lora_rank": "--q-lora-rank",
    "attention.kv_lora_rank": "--kv-lora-rank", "attention.qk_nope_head_dim": "--qk-head-dim",
    "attention.qk_rope_head_dim": "--qk-pos-emb-head-dim", "attention.v_head_dim": "--v-head-dim",
    "dense_mlp.intermediate_size": "--ffn-hidden-size", "moe.num_experts": "--num-experts",
    "moe.top_k": "--moe-router-topk", "moe.expert_intermediate_size": "--moe-ffn-hidden-size",
    "moe.shared_intermediate_size": "--moe-shared-expert-intermediate-size", "mtp_layers": "--mtp-num-layers",
    "max_context": "--max-position-embeddings", "learned_position_embeddings": "--max-position-embeddings",
    "layer_pattern": "--hybrid-layer-pattern", "attention.sliding_window": "--window-size",
    "attention.window_skip_freq": "--window-attn-skip-freq", "mamba.num_heads": "--mamba-num-heads",
    "mamba.head_dim": "--mamba-head-dim", "mamba.num_groups": "--mamba-num-groups",
    "mamba.state_size": "--mamba-state-dim", "linear_attention_freq": "--linear-attention-freq",
    "linear_attention.num_key_heads": "--linear-num-key-heads",
    "linear_attention.num_value_heads": "--linear-num-value-heads",
    "linear_attention.key_head_dim": "--linear-key-head-dim",
    "linear_attention.value_head_dim": "--linear-value-head-dim",
    "linear_attention.conv_kernel": "--linear-conv-kernel-dim", "moe.latent_size": "--moe-latent-size",
    "attention.o_groups": "--o-groups", "attention.o_lora_rank": "--o-lora-rank",
    "attention.index_n_heads": "--dsa-indexer-n-heads", "attention.index_head_dim": "--dsa-indexer-head-dim",
    "attention.index_topk": "--dsa-indexer-topk", "attention.compress_ratios": "--csa-compress-ratios",
    "moe.num_hash_layers": "--moe-n-hash-layers", "hc_mult": "--num-residual-streams",
    "attention.indexer.n_heads": "--dsa-indexer-n-heads", "attention.indexer.head_dim": "--dsa-indexer-head-dim",
    "attention.indexer.topk": "--dsa-indexer-topk",
}
"""The launch flag that sets each architecture field (errors name the flag the user wrote)."""


def as_flag_error(exc: InputError) -> InputError:
    """A schema error on the launch line's model, reworded to name the flag instead of the field."""
    field = exc.field or ""
    inner = field.removeprefix(LAUNCH_MODEL + ".")
    flag = FIELD_FLAGS.get(inner, f"the launch line's model ({inner})")
    def reword(text: str | None) -> str | None:
        if text is None:
            return None
        return text.replace(f"`{field}`", f"`{flag}`").replace(field, flag).replace(CATALOG_HINT, "")
    return InputError(reword(exc.detail) or "", field=flag, value=exc.value, expected=exc.expected,
                      fix=reword(exc.fix))


def compare_reference(c: Context) -> None:
    """Notes where the launch line's model flags disagree with the problem's model (which is used)."""
    ref, f = c.reference, c.flags
    assert ref is not None
    checks: dict[str, int | None] = {
        "--num-layers": ref.num_layers, "--hidden-size": ref.hidden_size,
        "--num-attention-heads": ref.attention.num_heads,
        "--num-experts": ref.moe.num_experts if ref.moe else 0,
        "--moe-router-topk": ref.moe.top_k if ref.moe else None,
        "--mtp-num-layers": ref.mtp_layers,
    }
    _note_differences(c, checks)
    freq = f.one("--moe-layer-freq")
    if freq is not None and ref.moe is not None and c.pattern is None:
        pattern = moe_pattern(parse_layer_freq(freq), ref.num_layers)
        if pattern != [b.mlp is BlockKind.moe for b in ref.blocks]:
            c.notes.append("--moe-layer-freq differs from the problem model's dense/MoE blocks; the problem's "
                           "model is used")
    if c.pattern is not None and c.pattern.layers is not None and c.pattern.layers != ref.layer_pattern:
        c.notes.append("--hybrid-layer-pattern's layers differ from the problem model's layer_pattern; the "
                       "problem's model is used")
    if c.pattern is not None and isinstance(ref.attention, DSV4Attention):
        ratios = tuple(ref.attention.compress_ratios[:ref.num_layers])
        if c.pattern.dsv4 and tuple(c.pattern.ratios) != ratios:
            c.notes.append("--hybrid-layer-pattern's C/H/W sequence differs from the problem model's "
                           "compress ratios; the problem's model is used")
    _compare_dsv4(c)
    _compare_dsa(c)


def _note_differences(c: Context, checks: dict[str, int | None]) -> None:
    """A note for each given whole-number flag whose value differs from the problem's model's."""
    ref, f = c.reference, c.flags
    assert ref is not None
    for flag, expected in checks.items():
        value = f.integer(flag, minimum=0) if f.given(flag) else None
        if value is not None and expected is not None and value != expected:
            c.notes.append(f"{flag} {value} differs from the problem's model ({ref.name}: {expected}); "
                           "the problem's model is used")


def _compare_dsa(c: Context) -> None:
    """The DSA flags of a dsa line against the problem's model: its indexer's shape, or its lack of one."""
    ref, f = c.reference, c.flags
    assert ref is not None
    if f.one("--experimental-attention-variant") != DSA_VARIANT:
        return
    indexer = ref.attention.indexer if isinstance(ref.attention, MLAAttention) else None
    if indexer is None:
        c.notes.append(f"--experimental-attention-variant {DSA_VARIANT} differs from the problem's model ({ref.name}: no "
                       "DSA indexer); the problem's model is used")
        return
    _note_differences(c, {flag: getattr(indexer, key) for key, flag in DSA_INDEXER_FLAGS.items()})


def _compare_dsv4(c: Context) -> None:
    """The V4 flags of a dsv4_hybrid line against the problem's model (read as _dsv4_attention reads them)."""
    ref, f = c.reference, c.flags
    assert ref is not None
    if f.one("--experimental-attention-variant") != DSV4_VARIANT:
        return
    att = ref.attention
    if not isinstance(att, DSV4Attention):
        c.notes.append(f"--experimental-attention-variant {DSV4_VARIANT} differs from the problem's model "
                       f"({ref.name}: {att.kind} attention); the problem's model is used")
        return
    moe = ref.moe
    _note_differences(c, {
        "--v-head-dim": att.head_dim, "--q-lora-rank": att.q_lora_rank, "--o-groups": att.o_groups,
        "--o-lora-rank": att.o_lora_rank, "--qk-pos-emb-head-dim": att.qk_rope_head_dim,
        "--csa-window-size": att.sliding_window, "--dsa-indexer-n-heads": att.index_n_heads,
        "--dsa-indexer-head-dim": att.index_head_dim, "--dsa-indexer-topk": att.index_topk,
        "--moe-n-hash-layers": moe.num_hash_layers + ref.first_dense_layers if moe and moe.num_hash_layers else 0,
    })
    streams = _hc_mult(c)
    if streams != ref.hc_mult:
        c.notes.append(f"mHC with {streams} residual stream(s) (--enable-hyper-connections, --num-residual-streams) "
                       f"differs from the problem's model ({ref.name}: hc_mult {ref.hc_mult}); the problem's model is used")
    if f.given("--csa-compress-ratios"):
        blocks = ref.num_layers + ref.mtp_layers
        if _compress_ratios(f)[:blocks] != att.compress_ratios[:blocks]:
            c.notes.append(f"--csa-compress-ratios differs from the problem model's compress ratios ({ref.name}); the "
                           "problem's model is used")
