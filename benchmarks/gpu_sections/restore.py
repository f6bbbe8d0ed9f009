"""RESTORE: the reduction on the device equals the CPU's; prefill time with vs without reduction.

Checked (a tiny float32 LLaVA, ``restore.vlm.tiny_llava``: 64 visual tokens per image, a 2-layer
Llama text model of hidden 64; batch 2 with one left-padded row; RESTORE keep 16 = 8 DivPrune
tokens + 8 distinctive anchors):

- the reduction of every image (``Reduction.groups``, ``kept``, ``sizes``) and the retained
  rotary positions on the device == the CPU's, bit-exact;
- the merged states (the reduced ``inputs_embeds`` the language model receives) and the last
  text logits on the device close to the CPU's (float32, a few hundred terms per sum);
- the FlexAttention backend (``backend="flex"``, the default on CUDA) == the SDPA float-bias
  backend, on CUDA only (noted when FlexAttention is absent; on a CPU eager flex is ~1 s a call);
- independent references: ``Reduction.merge`` vs float64 group means of the features, and the
  patch with ``reducer="none"`` and no calibration vs the unpatched model.

Timed (ms per prefill ``model(input_ids, pixel_values, logits_to_keep=1)``, median, CUDA
events) on a random LLaVA-1.5-7B-shaped model: text model hidden 4096, 32 heads (MHA), FFN 11,008,
vocabulary 32,064, **4 decoder layers** (of 32); vision tower CLIP-L/14-336 shaped (width 1,024,
16 heads, 336 px, patch 14 -> 576 visual tokens) with **2 layers** (of 24; its cost is the same
with and without reduction); bf16, batch 8, 5 + 576 + 35 tokens per row. Rows: RESTORE at keep
64 vs the full 576 (issue 14's target: >= 3x faster at 32 layers), RESTORE vs plain reduction
(DivPrune, re-indexed, no calibration; target <= 1.10x), FlexAttention vs SDPA bias. Values: the
language model alone at 616 vs 104 tokens, per layer, and the prefill ratio extrapolated to 32
layers from it. Memory: weights ~2.2 GB, activations < 1 GB (the float bias 8·616²·8 B = 24 MB).
"""

from __future__ import annotations

import copy
import time
import warnings

import torch
from transformers import (
    CLIPVisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
)

from icml26.restore.anchors import anchor_scores, distinctive_anchors
from icml26.restore.attention import flex_available
from icml26.restore.patch import RestoreConfig, apply_restore, remove_restore, restore_state
from icml26.restore.vlm import tiny_llava

WEIGHT = 2.0

#: visual tokens kept per image (RESTORE as the claim runs it: half DivPrune, half distinctive
#: anchors, retained positions, calibration)
KEEP_TINY, KEEP_PAPER = 16, 64


def run(ctx) -> None:
    with ctx.exact():
        _check_reduction(ctx)
    _time_prefill(ctx)


# -- correctness ---------------------------------------------------------------------------------
def _tiny_inputs(model, batch=2, text=(3, 5), seed=0):
    """input_ids (B, 3 + N + 5) with the image placeholders, a left-padded row 0, pixels."""
    cfg = model.config
    n_vis = (cfg.vision_config.image_size // cfg.vision_config.patch_size) ** 2
    g = torch.Generator().manual_seed(seed)
    img = cfg.image_token_id
    rows = [torch.cat([torch.randint(1, img, (text[0],), generator=g),
                       torch.full((n_vis,), img),
                       torch.randint(1, img, (text[1],), generator=g)]) for _ in range(batch)]
    ids = torch.stack(rows)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # row 0: two padding tokens on the left
    size = cfg.vision_config.image_size
    px = torch.randn(batch, 3, size, size, generator=g)
    return ids, mask, px


def _run(model, cfg, ids, mask, px):
    """(last 5 text logits, reduced inputs_embeds, RestoreState) of one patched prefill."""
    seen = {}
    lm = model.model.language_model

    def hook(_mod, _args, kwargs):
        seen["embeds"] = kwargs.get("inputs_embeds")

    handle = lm.register_forward_pre_hook(hook, with_kwargs=True)
    apply_restore(model, cfg)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # flex without torch.compile warns once
            out = model(input_ids=ids, pixel_values=px, attention_mask=mask)
    finally:
        remove_restore(model)
        handle.remove()
    return out.logits[:, -5:].float(), seen["embeds"], restore_state(out)


@torch.no_grad()
def _check_reduction(ctx) -> None:
    cpu_model = tiny_llava(seed=0)  # float32, 64 visual tokens per image
    dev_model = copy.deepcopy(cpu_model).to(ctx.device)
    ids, mask, px = _tiny_inputs(cpu_model)
    cfg = RestoreConfig(reducer="divprune", keep=KEEP_TINY, backend="sdpa")
    lg_c, emb_c, st_c = _run(cpu_model, cfg, ids, mask, px)
    lg_d, emb_d, st_d = _run(dev_model, cfg, ids.to(ctx.device), mask.to(ctx.device),
                             px.to(ctx.device))
    for what in ("groups", "kept", "sizes"):
        ctx.equal(f"reduction {what} (2 images, keep {KEEP_TINY} of 64): device == CPU",
                  torch.cat([getattr(r, what) for r in st_d.reductions]),
                  torch.cat([getattr(r, what) for r in st_c.reductions]))
    ctx.equal("retained rotary positions: device == CPU", st_d.pos, st_c.pos)
    # float32 features through a 2-layer CLIP and the projector: sums of ~256 terms
    eps = torch.finfo(torch.float32).eps
    scale = float(emb_c.abs().max())
    ctx.close("merged states (reduced inputs_embeds): device vs CPU", emb_d, emb_c,
              atol=64 * eps * scale, note=f"(B, L', D) = {tuple(emb_c.shape)}")
    ctx.close("last 5 text logits (RESTORE, SDPA bias): device vs CPU", lg_d, lg_c,
              atol=256 * eps * float(lg_c.abs().max()))
    _check_flex(ctx, dev_model, ids.to(ctx.device), mask.to(ctx.device), px.to(ctx.device), lg_d)
    _check_merge(ctx, st_c, cpu_model, px)
    _check_identity(ctx, dev_model, ids.to(ctx.device), mask.to(ctx.device), px.to(ctx.device))


def _check_flex(ctx, model, ids, mask, px, ref) -> None:
    if not ctx.is_cuda:
        ctx.note("FlexAttention not run on the CPU: \"auto\" picks SDPA there, eager "
                 "flex_attention takes ~1 s per tiny call on a CPU, and tests/restore checks "
                 "flex == SDPA on the CPU; on CUDA it is checked and timed")
        return
    if not flex_available():
        ctx.note("FlexAttention absent (torch.nn.attention.flex_attention does not import): "
                 "only the SDPA float-bias backend was checked")
        return
    try:
        cfg = RestoreConfig(reducer="divprune", keep=KEEP_TINY, backend="flex")
        lg, _, st = _run(model, cfg, ids, mask, px)
    except Exception as exc:  # noqa: BLE001 - a failing optional backend is recorded
        ctx.check("FlexAttention backend runs", False, note=f"{type(exc).__name__}: {exc}"[:200])
        return
    ctx.close("FlexAttention backend == SDPA bias backend (device, float32)", lg, ref,
              atol=256 * torch.finfo(torch.float32).eps * float(ref.abs().max()),
              note=f"backend {st.backend}; flex_attention called without torch.compile")


def _check_merge(ctx, st, model, px) -> None:
    """Reduction.merge (and the anchor scores) vs float64 brute force on the vision features."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(48, 16, generator=g, dtype=torch.float64)
    red = distinctive_anchors(x, 6)
    ref = torch.stack([x[red.groups == j].mean(0) for j in range(red.n)])
    ctx.close("Reduction.merge vs float64 group means", red.merge(x), ref, atol=1e-12)
    xs = x / x.norm(dim=1, keepdim=True)
    c = xs @ xs.T
    r = c.sum(1)
    brute = []
    for i in range(48):
        denser = [float(c[i, j]) for j in range(48) if r[j] > r[i]]
        brute.append(float(r[i]) * (1.0 - (max(denser) if denser else 0.0)))
    ctx.close("anchor_scores vs the density-peak definition (float64)", anchor_scores(x),
              torch.tensor(brute, dtype=torch.float64), atol=1e-12)


def _check_identity(ctx, model, ids, mask, px) -> None:
    """reducer "none", no calibration: the patched path equals the unpatched model."""
    ref = model(input_ids=ids, pixel_values=px, attention_mask=mask).logits[:, -5:].float()
    cfg = RestoreConfig(reducer="none", gamma=None, calibrate=False, backend="sdpa")
    got, _, _ = _run(model, cfg, ids, mask, px)
    ctx.close("patch with no reduction, no calibration == unpatched model (device)", got, ref,
              atol=256 * torch.finfo(torch.float32).eps * float(ref.abs().max()))


# -- timing --------------------------------------------------------------------------------------
def _model(ctx):
    """A random LLaVA of the paper's shapes (cut in depth) built on the device, or a tiny one."""
    if ctx.scale == "paper":
        vis = dict(image_size=336, patch_size=14, hidden_size=1024, intermediate_size=4096,
                   num_hidden_layers=2, num_attention_heads=16)
        txt = dict(vocab_size=32064, hidden_size=4096, intermediate_size=11008,
                   num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=32)
    else:
        vis = dict(image_size=32, patch_size=4, hidden_size=64, intermediate_size=256,
                   num_hidden_layers=2, num_attention_heads=2)
        txt = dict(vocab_size=64, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=4)
    cfg = LlavaConfig(vision_config=CLIPVisionConfig(projection_dim=vis["hidden_size"], **vis),
                      text_config=LlamaConfig(max_position_embeddings=4096, **txt),
                      image_token_id=txt["vocab_size"] - 1, vision_feature_layer=-2,
                      vision_feature_select_strategy="default", projector_hidden_act="gelu")
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with ctx.device:
        model = LlavaForConditionalGeneration(cfg)
    return model.to(ctx.dtype).eval()


@torch.no_grad()
def _time_prefill(ctx) -> None:
    t0 = time.perf_counter()
    model = _model(ctx)
    ctx.sync()
    ctx.value("model build (on the device)", f"{time.perf_counter() - t0:.1f} s")
    B, keep = ctx.pick(tiny=(2, KEEP_TINY), paper=(8, KEEP_PAPER))
    vc = model.config.vision_config
    n_vis = (vc.image_size // vc.patch_size) ** 2
    img = model.config.image_token_id
    g = torch.Generator().manual_seed(1)
    ids = torch.cat([torch.randint(1, img, (B, 5), generator=g), torch.full((B, n_vis), img),
                     torch.randint(1, img, (B, 35), generator=g)], 1).to(ctx.device)
    px = torch.randn(B, 3, vc.image_size, vc.image_size, generator=g).to(ctx.device, ctx.dtype)
    it = ctx.pick(tiny=dict(warmup=1, iters=2), paper=dict(warmup=1, iters=3))

    def prefill():
        return model(input_ids=ids, pixel_values=px, logits_to_keep=1)

    def patched(cfg):
        def fn():
            apply_restore(model, cfg)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return prefill()
            finally:
                remove_restore(model)
        return fn

    restore = RestoreConfig(reducer="divprune", keep=keep, backend="sdpa")
    plain = RestoreConfig(reducer="divprune", keep=keep, gamma=None, positions="reindexed",
                          calibrate=False, backend="sdpa")
    n_layers = model.config.text_config.num_hidden_layers
    shape = f"B {B}, {ids.shape[1]} tokens ({n_vis} visual), {n_layers} LM layers"
    full_row = ctx.compare(f"prefill, RESTORE keep {keep} vs full {n_vis}", f"full {n_vis} tokens",
                           prefill, patched(restore),
                           note=f"ms; {shape}; issue 14's target (<= 1/3) is for 32 layers: see "
                                "the extrapolated value", **it)
    ctx.compare(f"prefill, RESTORE vs plain reduction (keep {keep})",
                "DivPrune, re-indexed, no calibration", patched(plain), patched(restore),
                target=1.10, note=f"ms; {shape}", **it)
    if ctx.is_cuda and flex_available() and ctx.enough(8.0):
        try:
            ctx.compare(f"prefill, RESTORE FlexAttention vs SDPA bias (keep {keep})",
                        "RESTORE, SDPA float bias",
                        patched(restore), patched(RestoreConfig(reducer="divprune", keep=keep,
                                                                backend="flex")),
                        note=f"ms; {shape}; flex_attention is called without torch.compile "
                             "(unfused)", **it)
        except Exception as exc:  # noqa: BLE001 - an optional backend failing is information
            ctx.note(f"FlexAttention timing failed: {type(exc).__name__}: {exc}"[:300])
    elif ctx.is_cuda and not flex_available():
        ctx.note("FlexAttention absent: no flex timing")
    _extrapolate(ctx, model, B, ids.shape[1], keep + 40, full_row, it)


def _extrapolate(ctx, model, B, n_full, n_red, full_row, it) -> None:
    """The language model alone at the full and the reduced length (per layer), and the
    prefill ratio at 32 layers: fixed part (tower, reduction, embedding) + 32 x per-layer."""
    lm = model.model.language_model
    n_layers = model.config.text_config.num_hidden_layers
    hid = model.config.text_config.hidden_size
    g = torch.Generator(device=ctx.device).manual_seed(2)
    x = {n: torch.randn(B, n, hid, generator=g, device=ctx.device, dtype=ctx.dtype)
         for n in (n_full, n_red)}
    # the reduced run attends with RESTORE's float bias (no flash kernel): an additive causal
    # mask (B, 1, n, n) in the model dtype reproduces that kernel choice
    neg = torch.finfo(ctx.dtype).min
    bias = torch.full((n_red, n_red), neg, device=ctx.device, dtype=ctx.dtype).triu(1)
    masks = {n_full: None, n_red: bias.expand(B, 1, n_red, n_red).contiguous()}
    t = {n: ctx.time(lambda n=n: lm(inputs_embeds=x[n], attention_mask=masks[n],
                                    use_cache=False), **it) / n_layers
         for n in x}
    fixed_full = full_row.baseline_ms - n_layers * t[n_full]
    fixed_red = full_row.method_ms - n_layers * t[n_red]
    est = (fixed_red + 32 * t[n_red]) / (fixed_full + 32 * t[n_full])
    ctx.value("LM ms per layer at the full / reduced length",
              f"{t[n_full]:.3f} / {t[n_red]:.3f} ({n_full} / {n_red} tokens, batch {B})")
    ctx.value("fixed ms (tower, reduction, embedding; prefill minus LM layers) full / RESTORE",
              f"{fixed_full:.2f} / {fixed_red:.2f}")
    ctx.value("RESTORE / full prefill extrapolated to 32 LM layers (target <= 0.333)",
              f"{est:.3f}x")
