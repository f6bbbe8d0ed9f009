"""Integer export: a quantized model as a compressed-tensors ``pack-quantized`` checkpoint.

The folder holds ``config.json`` (the base config plus a ``quantization_config`` with
``quant_method: "compressed-tensors"``, ``format: "pack-quantized"``) and ``model.safetensors``:
every quantized linear as ``weight_packed`` (int32, ``32 / bits`` codes per word along the input,
code + 2^(bits-1) as an unsigned field, lowest bits first), ``weight_scale`` (out, groups) and
``weight_shape`` (int64 [out, in]); every other tensor (embeddings, norms with any fused
smoothing, the LM head) dense. The dequantized weight is ``code * scale``, the codes and scales
of :class:`icml26.cat.quant.QuantLinear` exactly (RTN or GPTQ).

Online input transforms (CAT's block matrices, Hadamards, SmoothQuant's o_proj scales) are
written as compressed-tensors ``random-matrix`` transforms at location ``input``, one transform
group per input group, with the matrix itself stored in the checkpoint under
``<linear>.<group>_input.weight`` (``x -> x V``, ``V = T^T``, the dense block-diagonal T). The
library creates those modules with random weights and the checkpoint overwrites them; a stack
that ignores ``transform_config`` computes a different function, so the manifest says which
linears need one (``icml26_online_transforms``).

Activation quantization is written as compressed-tensors' dynamic per-token INT scheme. Its
grid is not ours: compressed-tensors uses ``scale = max|x| / (2^(b-1) - 1/2)`` and codes in
``[-2^(b-1), 2^(b-1) - 1]`` (INT4: /7.5, -8..7) where icml26 uses ``/ q_max`` and ``[-q_max,
q_max]`` (/7, -7..7); weights are stored exactly, activations are re-quantized on that grid by a
stack that reads the file. Weight-only exports (``a_bits=None``) reload bit-for-bit up to the
scale's dtype.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from torch import nn

from icml26.cat.quant import QuantLinear

__all__ = ["pack_codes", "unpack_codes", "export_compressed_tensors", "EXPORT_BITS"]

EXPORT_BITS = (4, 8)


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack signed integer ``codes`` (m, d) in ``[-2^(b-1), 2^(b-1) - 1]`` into int32 (m,
    d * bits / 32): value ``code + 2^(b-1)`` at bit ``(j * bits) % 32`` of word
    ``j * bits // 32`` (compressed-tensors' pack-quantized layout for 4 and 8 bits)."""
    if bits not in EXPORT_BITS:
        raise ValueError(f"pack_codes supports bits in {EXPORT_BITS}; got {bits}")
    per = 32 // bits
    m, d = codes.shape
    if d % per:
        raise ValueError(
            f"the input width {d} must be a multiple of {per} to pack {bits}-bit codes"
        )
    u = (codes.to(torch.int64) + (1 << (bits - 1))).reshape(m, d // per, per)  # (m, words, per)
    if bool((u < 0).any()) or bool((u >= (1 << bits)).any()):
        raise ValueError(f"codes outside the signed {bits}-bit range")
    shifts = torch.arange(per, dtype=torch.int64) * bits
    words = (u << shifts).sum(-1)  # unsigned 32-bit value in an int64
    words = torch.where(words >= 2**31, words - 2**32, words)  # two's complement
    return words.to(torch.int32)


def unpack_codes(packed: torch.Tensor, bits: int, d: int) -> torch.Tensor:
    """The inverse of :func:`pack_codes`: (m, d) int8 codes."""
    per = 32 // bits
    w = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(per, dtype=torch.int64) * bits
    u = (w[..., None] >> shifts) & ((1 << bits) - 1)  # (m, words, per)
    return (u.reshape(packed.shape[0], -1)[:, :d] - (1 << (bits - 1))).to(torch.int8)


def _scheme(cfg, with_activations: bool) -> dict:
    w = {
        "num_bits": cfg.w_bits,
        "type": "int",
        "symmetric": True,
        "dynamic": False,
        "strategy": "channel" if cfg.w_gran == "channel" else "group",
    }
    if cfg.w_gran == "group":
        w["group_size"] = cfg.w_group_size
    a = None
    if with_activations and cfg.a_bits is not None:
        a = {
            "num_bits": cfg.a_bits,
            "type": "int",
            "symmetric": True,
            "dynamic": True,
            "strategy": "token" if cfg.a_gran == "token" else "tensor",
        }
    return {
        "weights": w,
        "input_activations": a,
        "output_activations": None,
        "format": "pack-quantized",
    }


@torch.no_grad()
def export_compressed_tensors(
    model: nn.Module,
    out: str | Path,
    arm: str,
    *,
    tokenizer=None,
    scale_dtype: torch.dtype = torch.float32,
    overwrite: bool = False,
) -> Path:
    """Write ``model`` (quantized by :func:`icml26.cat.model.fake_quantize` /
    ``quantize_model_``, in memory) to the folder ``out`` in compressed-tensors'
    ``pack-quantized`` format (module docstring); ``tokenizer`` is saved beside it if given.

    Raises ValueError naming ``arm`` when the model has no integer form: no quantized linear,
    weights not quantized (activation-only fake quantization), weight bits not in
    ``EXPORT_BITS``, per-tensor weight scales, or a linear whose integer codes are not in
    memory (a model reloaded by :func:`icml26.cat.model.load_quantized` keeps only its
    dequantized weights).
    """
    from safetensors.torch import save_file

    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True")
    qlins = {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear)}
    if not qlins:
        raise ValueError(f"arm {arm!r} has no quantized linear to export: quantize the model first")
    configs = {
        (c.w_bits, c.w_gran, c.w_group_size, c.a_bits, c.a_gran)
        for c in (m.config for m in qlins.values())
    }
    if len(configs) != 1:
        raise ValueError(f"arm {arm!r}: linears are quantized with different settings {configs}")
    cfg = next(iter(qlins.values())).config
    for name, m in qlins.items():
        if m.config.w_bits is None:
            raise ValueError(
                f"arm {arm!r} has no integer form: {name} keeps full-precision weights "
                "(activation-only fake quantization); quantize the weights to export"
            )
        if m.config.w_bits not in EXPORT_BITS or m.config.w_gran == "tensor":
            raise ValueError(
                f"arm {arm!r}: {name} has W{m.config.w_bits} {m.config.w_gran} weights; "
                f"pack-quantized export supports bits {EXPORT_BITS}, per channel or group"
            )
        if m.w_codes is None:
            raise ValueError(
                f"arm {arm!r}: {name} has no integer codes in memory (fake-quant weights only, "
                "e.g. a model reloaded from a cat-manifest folder); re-quantize to export"
            )
    tensors: dict[str, torch.Tensor] = {}
    transform_groups: dict[str, dict] = {}
    seen_blocks: dict[int, str] = {}
    online: list[str] = []
    for name, m in qlins.items():
        tensors[f"{name}.weight_packed"] = pack_codes(m.w_codes, m.config.w_bits)
        tensors[f"{name}.weight_scale"] = m.w_scales.to(scale_dtype).contiguous()
        tensors[f"{name}.weight_shape"] = torch.tensor([m.out_features, m.in_features])
        if m.bias is not None:
            tensors[f"{name}.bias"] = m.bias.detach().cpu().contiguous()
        if m.blocks is not None:
            online.append(name)
            # one transform group per distinct online matrix (linears of one input group share)
            dense = torch.block_diag(*m.blocks.detach().to("cpu", torch.float32))
            key = hashlib.sha1(dense.numpy().tobytes()).hexdigest()
            group = seen_blocks.setdefault(key, f"t{len(seen_blocks)}")
            transform_groups.setdefault(
                group,
                {
                    "type": "random-matrix",
                    "randomize": False,
                    "requires_grad": False,
                    "head_dim": None,
                    "precision": "float32",
                    "apply": [{"targets": [], "location": "input", "inverse": False, "ignore": []}],
                },
            )["apply"][0]["targets"].append(name)
            tensors[f"{name}.{group}_input.weight"] = dense.T.contiguous()  # x V, V = T^T
    qnames = set(qlins)
    head = getattr(model, "lm_head", None)
    embed = model.get_input_embeddings()
    tied = head is not None and head.weight is embed.weight
    for key, t in model.state_dict().items():
        owner = key.rpartition(".")[0]
        if owner in qnames:
            continue
        if tied and key == "lm_head.weight":
            continue
        tensors[key] = t.detach().cpu().contiguous()
    out.mkdir(parents=True, exist_ok=overwrite)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    conf = model.config.to_dict()
    conf["tie_word_embeddings"] = bool(tied)
    conf.pop("quantization_config", None)
    conf["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"], **_scheme(cfg, True)}},
        "ignore": sorted(
            n for n, mod in model.named_modules() if isinstance(mod, nn.Linear) and n not in qnames
        ),
        "kv_cache_scheme": None,
        "sparsity_config": {},
        "transform_config": {"config_groups": transform_groups} if transform_groups else {},
    }
    conf["icml26_arm"] = arm
    conf["icml26_online_transforms"] = online
    (out / "config.json").write_text(json.dumps(conf, indent=1, default=str))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))
    return out
