"""CAT (concentration-alignment transforms for W4A4): device path against the CPU, and its cost.

Checks (tiny float64 Llama, 2 blocks, hidden 32, d_ff 64; the same weights on both devices):

- calibration covariances ``Sigma = X^T X / N`` of every input group collected from the device
  model equal the CPU's, and layer 0's q/k/v ``Sigma`` equals one recomputed from the RMSNorm
  output (independent reference);
- the CAT block transform is function-preserving (online ``T x``, ``W T^-1``, no quantization):
  logits equal the float model's;
- ``fake_quantize`` accepts the transforms ``build_transforms`` returns (float64 blocks on the CPU)
  for a model on the device, the path ``benchmarks/cat.py --device cuda`` takes; where it does
  not, the rest runs with the blocks moved to the device and the failure stays recorded;
- W4 weight codes (``Q(W T^-1)``, quantized on the device in float64) bit-exact vs the CPU;
  the activation quantizer bit-exact on one float32 tensor that holds exact rounding ties
  (round-half-even on both) and against a brute-force reference;
- every ``QuantLinear`` (online T + A4 + W4) gives the CPU's output on the *same* input (float64:
  no rounding decision can differ); end to end, the W4A4 logits match the CPU's within float32
  accuracy (transformers computes RMSNorm and RoPE in float32 even in a float64 model, so inputs
  to the activation quantizer differ by ~1e-7 relative between devices, and a code may flip where
  a value sits on a rounding tie: such flips are counted, each must be a tie, and only then is the
  logits comparison left to the per-layer check); W4-only float32 logits within float32 accuracy.

Timings (``paper``: a Llama-3-8B-shaped decoder stack, 2 blocks, random bf16 weights built on the
device, no LM head; ``tiny``: the float32 tiny model), ms, median of interleaved rounds:

- calibration statistics (``collect_covariances``: float64 accumulation on the CPU by design) for
  block 0's four input groups vs a plain forward over the same 512 tokens;
- transform construction for block 0 (``build_transforms``, CPU float64 by design): CAT-b64 vs the
  randomized Hadamard (data-free); the per-model figure is x32 blocks;
- W4A4 fake-quant forward of the stack over 8 x 2048 tokens: CAT-b64 online transforms vs RTN
  (target <= 1.15, as benchmarks/cat.py), and the dense online Hadamard vs RTN.

Paper memory (bf16): embeddings 1.05 GB + 2 blocks x 0.44 GB = 1.9 GB per copy; base + 3 arms
7.7 GB; activations at 16k tokens: the float32 fake-quant temporaries of the 16k x 14336 MLP input
(0.9 GB each, a few alive) and the dense Hadamard's 14336^2 float64 inverse (1.6 GB) -> < 20 GiB.
CPU side: block 0's down_proj covariance and Hadamard are 14336^2 float64 (1.6 GB each); the CAT
Gram ``sum W^T W`` of block 0 costs ~3 TFLOP float64 on the CPU (a few seconds on 16 cores).
"""

from __future__ import annotations

import copy
import math
import re

import torch

WEIGHT = 2.0

EPS32 = float(torch.finfo(torch.float32).eps)
EPS64 = float(torch.finfo(torch.float64).eps)

#: Llama-3-8B's shapes; only ``layers`` of its 32 blocks are built
LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                 num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                 rms_norm_eps=1e-5, tie_word_embeddings=False)


def llama8b(layers: int, device, dtype, *, head: bool = True):
    """A random-weight Llama-3-8B-shaped model of ``layers`` blocks built directly on ``device``
    in ``dtype``: ``LlamaForCausalLM`` (``head``) or the bare ``LlamaModel``. A block holds 218M
    parameters (0.44 GB in bf16); the embeddings and the head 525M each (1.05 GB)."""
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel

    cfg = LlamaConfig(num_hidden_layers=layers, **LLAMA3_8B)
    cls = LlamaForCausalLM if head else LlamaModel
    with torch.device(device):
        try:
            model = cls._from_config(cfg, dtype=dtype)
        except TypeError:  # older transformers spell it torch_dtype
            model = cls._from_config(cfg, torch_dtype=dtype)
    return model.eval().requires_grad_(False)


def fp32_tol(scale: float, width: int, depth: int) -> float:
    """Float32 accuracy of a ``depth``-block forward with reductions of length ``width``."""
    return 64 * EPS32 * math.sqrt(width) * depth * scale


# -- small helpers ---------------------------------------------------------------------------
def _tiny(dtype):
    from icml26.core.lm import tiny_llama

    model, _ = tiny_llama(hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=0, dtype=dtype)
    return model


def _ids(shape, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=g)


def _on(transforms: dict, device) -> dict:
    """The same transforms with their blocks on ``device`` (shared objects stay shared)."""
    from icml26.cat.transforms import BlockTransform

    moved: dict[int, BlockTransform] = {}
    out = {}
    for name, t in transforms.items():
        if t is None:
            out[name] = None
            continue
        if id(t) not in moved:
            moved[id(t)] = BlockTransform(t.blocks.to(device), kind=t.kind)
        out[name] = moved[id(t)]
    return out


def _spread(block0: dict, model) -> dict:
    """Block 0's transforms reused for every block (same shapes; timing only)."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and "layers." in name:
            key = re.sub(r"layers\.\d+\.", "layers.0.", name)
            if key in block0:
                out[name] = block0[key]
    return out


def _quant_inputs(model, ids) -> tuple[dict, torch.Tensor]:
    """Forward ``ids``; returns ({QuantLinear name: its input on the CPU}, logits on the CPU)."""
    from icml26.cat.quant import QuantLinear

    seen: dict[str, torch.Tensor] = {}
    hooks = [m.register_forward_pre_hook(
        lambda mod, args, n=n: seen.__setitem__(n, args[0].detach().cpu()))
        for n, m in model.named_modules() if isinstance(m, QuantLinear)]
    try:
        with torch.no_grad():
            logits = model(input_ids=ids.to(next(model.buffers()).device)).logits.cpu()
    finally:
        for h in hooks:
            h.remove()
    return seen, logits


def _codes(v: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token symmetric codes of ``v`` (..., d) as quantize_sym forms them, and ``v / scale``."""
    qmax = 2 ** (bits - 1) - 1
    scale = (v.abs().amax(-1, keepdim=True) / qmax).clamp_min(torch.finfo(v.dtype).tiny)
    ratio = v / scale
    return torch.clamp(torch.round(ratio), -qmax, qmax), ratio


# -- correctness ---------------------------------------------------------------------------
def _check_stats(ctx, m_cpu, m_dev, calib):
    from icml26.cat.model import collect_covariances

    g_cpu = collect_covariances(m_cpu, calib)
    g_dev = collect_covariances(m_dev, calib)
    ctx.check("input groups found on the device (linear names, in order)",
              [g.names for g in g_dev] == [g.names for g in g_cpu],
              note=f"{len(g_cpu)} groups")
    scale = max(float(g.sigma.abs().max()) for g in g_cpu)
    width = max(g.dim for g in g_cpu)
    ctx.close("calibration Sigma of every input group, device vs CPU",
              torch.cat([g.sigma.flatten() for g in g_dev]),
              torch.cat([g.sigma.flatten() for g in g_cpu]),
              atol=fp32_tol(scale, width, 2),
              note="float64 model, float32 RMSNorm/RoPE inside transformers")
    # independent: Sigma of layer 0's q/k/v input from the RMSNorm output, float64 on the CPU
    with torch.no_grad():
        inner = m_cpu.model
        x = torch.cat([inner.layers[0].input_layernorm(inner.embed_tokens(b)).reshape(-1, 32)
                       for b in calib]).double()
    ref = x.T @ x / x.shape[0]
    ctx.close("layer-0 q/k/v Sigma vs X^T X / N from the RMSNorm output (CPU, float64)",
              g_cpu[0].sigma, ref, atol=8 * EPS64 * x.shape[0] * float(ref.abs().max()))
    return g_cpu


def _check_quantizer(ctx):
    """quantize_sym bit-exact on the device, with exact ties, vs a brute-force reference."""
    from icml26.cat.quant import quantize_sym

    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 64, generator=g)
    # rows 0-3: amax exactly 7 -> scale 1, and exact ties k + 1/2 (round half to even)
    x[:4] = torch.tensor([0.5, 1.5, 2.5, -2.5, -3.5, 6.5, -0.5, 3.49]).repeat(4, 8)
    x[:4, 0] = 7.0
    got = quantize_sym(x.to(ctx.device), 4, "token")
    ref = torch.empty_like(x)
    for r in range(x.shape[0]):  # brute force, Python's round() is round-half-even too
        s = max(float(v) for v in x[r].abs()) / 7
        ref[r] = torch.tensor([max(-7, min(7, round(float(v) / s))) * s for v in x[r]])
    ctx.equal("A4 per-token quantizer on the device vs the CPU (float32, exact ties)",
              got, quantize_sym(x, 4, "token"))
    ctx.close("A4 per-token quantizer vs brute force (Python round-half-even)", got, ref,
              atol=4 * EPS32 * 7, note="ties in rows 0-3")


def _check_quantized(ctx, m_cpu, m_dev, transforms, ids):
    """W4A4 with CAT: weight codes, per-layer outputs, end-to-end logits (see module doc)."""
    from icml26.cat.model import fake_quantize
    from icml26.cat.quant import QuantLinear, quantize_sym

    q_cpu = fake_quantize(copy.deepcopy(m_cpu), 4, 4, transforms=transforms)
    q_dev = copy.deepcopy(m_dev)
    try:
        fake_quantize(q_dev, 4, 4, transforms=transforms)
        ctx.check(f"fake_quantize with build_transforms' CPU blocks on a {ctx.device.type} model",
                  True)
    except Exception as exc:  # noqa: BLE001 - the recorded failure is the finding
        ctx.check(f"fake_quantize with build_transforms' CPU blocks on a {ctx.device.type} model",
                  False, note=f"{type(exc).__name__}: {str(exc)[:160]}; rest of the section "
                              "moves the blocks to the device")
        q_dev = fake_quantize(copy.deepcopy(m_dev), 4, 4, transforms=_on(transforms, ctx.device))
    names = [n for n, m in q_cpu.named_modules() if isinstance(m, QuantLinear)]
    wc = [_codes(q_cpu.get_submodule(n).weight, 4)[0].flatten() for n in names]
    wd = [_codes(q_dev.get_submodule(n).weight.cpu(), 4)[0].flatten() for n in names]
    ctx.equal(f"W4 codes of Q(W T^-1), {len(names)} layers, device vs CPU",
              torch.cat(wd).to(torch.int8), torch.cat(wc).to(torch.int8))
    # every QuantLinear on the *same* input: float64 throughout, identical codes expected
    inputs, logits_cpu = _quant_inputs(q_cpu, ids)
    worst = 0.0
    for n in names:
        mc, md = q_cpu.get_submodule(n), q_dev.get_submodule(n)
        x = inputs[n]
        with torch.no_grad():
            ref = mc(x)
            got = md(x.to(ctx.device)).cpu()
            xq = quantize_sym(mc.transform_input(x), 4, "token")
            bound = float((xq.abs() @ mc.weight.abs().T).max())
        worst = max(worst, float((got - ref).abs().max()) / (8 * mc.in_features * EPS64 * bound))
    ctx.check("W4A4 QuantLinear (online CAT-b16) output on the same input, device vs CPU",
              worst <= 1.0, err=worst, tol=1.0,
              note="max |Δ| / (8 K ε64 max(|Q(Tx)| |Q(W T^-1)|^T)) over layers, float64")
    # end to end: count activation codes that differ; each must sit on a rounding tie
    inputs_dev, logits_dev = _quant_inputs(q_dev, ids)
    flips, ties, total = 0, 0, 0
    for n in names:
        mc = q_cpu.get_submodule(n)
        with torch.no_grad():
            cc, ratio = _codes(mc.transform_input(inputs[n]), 4)
            cd, _ = _codes(mc.transform_input(inputs_dev[n]), 4)
        diff = cc != cd
        flips += int(diff.sum())
        ties += int((diff & ((ratio - ratio.floor() - 0.5).abs() < 1e-4)).sum())
        total += cc.numel()
    ctx.check("A4 codes end to end: every device/CPU difference is a rounding tie",
              ties == flips, err=float(flips), tol=float(ties),
              note=f"{flips} of {total} codes differ ({ties} within 1e-4 of a tie)")
    scale = float(logits_cpu.abs().max())
    if flips == 0:
        ctx.close("W4A4 CAT-b16 logits, device vs CPU", logits_dev, logits_cpu,
                  atol=fp32_tol(scale, 64, 2), note="no code differs; float32-accurate forward")
    else:
        ctx.note(f"W4A4 logits not compared: {flips} activation code(s) flipped at rounding ties "
                 "(legitimate); the per-layer check covers the path")


def _check_function(ctx, m_cpu, m32_cpu, m32_dev, transforms, ids):
    """Transform without quantization = the float model; W4-only float32 logits dev vs CPU."""
    from icml26.cat.model import apply_transform, fake_quantize

    with torch.no_grad():
        base = m_cpu(input_ids=ids).logits
        got = apply_transform(copy.deepcopy(m_cpu), transforms)(input_ids=ids).logits
    ctx.close("CAT transform without quantization = float model (logits, CPU)", got, base,
              atol=fp32_tol(float(base.abs().max()), 64, 2),
              note="function preservation; float32 RMSNorm inside transformers")
    tr_dev = _on(transforms, ctx.device)
    q32_cpu = fake_quantize(copy.deepcopy(m32_cpu), 4, None, transforms=transforms)
    q32_dev = fake_quantize(copy.deepcopy(m32_dev), 4, None, transforms=tr_dev)
    with torch.no_grad():
        ref = q32_cpu(input_ids=ids).logits
        out = q32_dev(input_ids=ids.to(ctx.device)).logits
    ctx.close("W4 (weights only) CAT-b16 logits, float32, device vs CPU", out, ref,
              atol=fp32_tol(float(ref.abs().max()), 64, 2))


# -- timing --------------------------------------------------------------------------------
def _timings(ctx, model, calib, ids, block: int, paper: bool):
    """Statistics, transform construction and W4A4 forward timings on ``model`` (a LlamaModel)."""
    from icml26.cat.model import build_transforms, collect_covariances, fake_quantize, find_groups
    from icml26.cat.transforms import hadamard_transform

    warm, iters = (0, 2) if paper else (1, 2)
    groups = [g for g in find_groups(model, calib[0][:1, :16].to(ctx.device), skip=())
              if g.names[0].startswith("layers.0.")]
    tokens = sum(b.numel() for b in calib)
    dev_calib = [b.to(ctx.device) for b in calib]

    def plain():
        with torch.no_grad():
            for b in dev_calib:
                model(input_ids=b, use_cache=False)

    row = ctx.compare(f"calibration Sigma, block 0's {len(groups)} input groups ({tokens} tokens)",
                      "plain forward", plain,
                      lambda: collect_covariances(model, calib, groups=groups, skip=()),
                      warmup=warm, iters=iters, note="Sigma accumulated in float64 on the CPU")
    flop = sum(2 * tokens * g.dim**2 for g in groups)
    rate = flop / max(row.method_ms - row.baseline_ms, 1e-3) * 1e3  # CPU float64 flop/s
    ctx.value("CPU float64 rate of the Sigma accumulation", f"{rate / 1e9:.1f} GFLOP/s")
    # the CAT Gram sum_i W_i^T W_i of every group is a d x d float64 product on the CPU
    gram = sum(2 * sum(model.get_submodule(n).weight.shape[0] for n in g.names) * g.dim**2
               for g in groups)
    est = gram / rate + (4 if paper else 0.2)  # + eigh of every block, the Hadamards
    made: dict[str, dict] = {}
    if ctx.enough(est + (8 if paper else 0.3)):
        def had():
            made["hadamard"] = build_transforms(model, groups, "hadamard")

        def cat():
            made["cat"] = build_transforms(model, groups, "cat", block=block)

        row = ctx.compare(f"transform construction, block 0 (CAT-b{block} vs Hadamard)",
                          "randomized Hadamard", had, cat, warmup=0, iters=1,
                          note="CPU float64 by design (build_transforms)")
        ctx.value(f"CAT-b{block} transforms for a 32-block model (x32 block 0)",
                  f"{32 * row.method_ms / 1e3:.1f} s")
    else:
        ctx.note(f"transform construction not timed (estimated {est:.0f} s from the CPU rate; "
                 f"share too short): the CAT arm uses a randomized-Hadamard b{block} block "
                 "transform of the same shape and cost, the Hadamard arm power-of-two blocks")
        made["cat"] = {n: hadamard_transform(g.dim, block) for g in groups for n in g.names}
        made["hadamard"] = {n: hadamard_transform(g.dim, g.dim & -g.dim) for g in groups
                            for n in g.names}
    arms = {"rtn": fake_quantize(copy.deepcopy(model), 4, 4, skip=())}
    for arm in ("cat", "hadamard"):
        if not ctx.enough(8 if paper else 0.3):
            ctx.note(f"W4A4 {arm} arm skipped (share spent)")
            continue
        tr = _on(_spread(made[arm], model), ctx.device)
        arms[arm] = fake_quantize(copy.deepcopy(model), 4, 4, transforms=tr, skip=())
    x = ids.to(ctx.device)

    def fwd(m):
        def f():
            with torch.no_grad():
                m(input_ids=x, use_cache=False)
        return f

    shape = "x".join(map(str, ids.shape))
    if "cat" in arms:
        ctx.compare(f"W4A4 forward {shape} tokens, CAT-b{block} online", "RTN (no transform)",
                    fwd(arms["rtn"]), fwd(arms["cat"]), target=1.15,
                    warmup=1 if not paper else 2, iters=2 if not paper else 5)
    if "hadamard" in arms:
        ctx.compare(f"W4A4 forward {shape} tokens, dense online Hadamard", "RTN (no transform)",
                    fwd(arms["rtn"]), fwd(arms["hadamard"]),
                    warmup=1 if not paper else 2, iters=2 if not paper else 5,
                    note="Hadamard as a dense matmul (no fast WHT kernel), as in the method")


def run(ctx) -> None:
    from icml26.cat.model import build_transforms

    m64 = _tiny(torch.float64)
    calib = [_ids((2, 24), 259, seed=1)]
    ids = _ids((1, 8), 259, seed=2)
    with ctx.exact():
        m64_dev = copy.deepcopy(m64).to(ctx.device)
        groups = _check_stats(ctx, m64, m64_dev, calib)
        transforms = build_transforms(m64, groups, "cat", block=16)
        _check_quantizer(ctx)
        _check_quantized(ctx, m64, m64_dev, transforms, ids)
        m32 = copy.deepcopy(m64).to(torch.float32)
        _check_function(ctx, m64, m32, copy.deepcopy(m32).to(ctx.device), transforms, ids)
        del m64_dev
    paper = ctx.scale == "paper"
    if paper and not ctx.is_cuda:
        ctx.note("paper shapes need a GPU (8B-shaped blocks, 16k tokens): timings skipped on CPU")
        return
    if paper:
        model = llama8b(2, ctx.device, ctx.dtype, head=False)
        calib_t, ids_t, block = [_ids((1, 512), 128256, 4)], _ids((8, 2048), 128256, 5), 64
        ctx.value("timed stack", "Llama-3-8B-shaped LlamaModel, 2 blocks, random bf16 weights")
    else:
        model = m32.model.to(ctx.device)
        calib_t, ids_t, block = calib, _ids((1, 16), 259, 5), 16
    _timings(ctx, model, calib_t, ids_t, block, paper)
