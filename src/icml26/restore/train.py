"""Build (once, cached) the claim's tiny LLaVA: a real ``LlavaForConditionalGeneration`` trained
on :mod:`scenes` in LLaVA's two-stage way.

CLIP vision tower 48x48 / patch 4 -> 144 patch tokens + CLS, 4 layers, width 64 (features from
layer -2, as LLaVA); MLP-GELU projector; a 3-layer Llama (hidden 128, 4 heads, head_dim 32, RoPE
base 1e4) with the scenes' word-level vocabulary.

1. :func:`pretrain_vision`: the tower alone learns per-token attribute labels (the colour, shape,
   digit and index of the grid cell a patch lies in), so its tokens carry what the questions ask.
2. :func:`train_qa`: the tower is frozen; projector + language model learn type-balanced QA
   (loss: cross-entropy of each answer token).

The folder is written with ``save_pretrained`` (safetensors + config) plus
``restore-vocab.json`` (vocabulary, steps, timings, loss curves); it reloads with
``LlavaForConditionalGeneration.from_pretrained``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from icml26.core.io import atomic_write_json
from icml26.restore import scenes
from icml26.restore.vlm import tiny_llava

__all__ = [
    "build_tiny_llava",
    "build_recipe",
    "smollm2_llava",
    "load_tiny_llava",
    "model_dir",
    "pretrain_vision",
    "train_qa",
    "text_hidden",
    "vision_features",
    "N_IMAGE_TOKENS",
]

N_IMAGE_TOKENS = 144  # 48x48 / patch 4
BUILD_VERSION = 3
VISION_STEPS = 600
QA_STEPS = 1200
CAPTION_FRAC = 0.0


def _autocast(flag: bool | None) -> bool:
    """bf16 autocast: as asked, or (``None``) the dtype policy: only where the CPU has native bf16
    (on an AVX2-only CPU bf16 is ~4x slower than float32)."""
    if flag is not None:
        return bool(flag)
    from icml26.core.lm import default_dtype

    return default_dtype("cpu") == torch.bfloat16


def _train_step(loss, opt, sched, params, ema: float | None) -> float:
    """One clipped (max-norm 1) optimizer + schedule step on ``loss``; returns the loss EMA (0.95)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()
    lv = float(loss.detach())
    return lv if ema is None else 0.95 * ema + 0.05 * lv


LMS = ("tiny", "smollm2")


def model_dir(
    root: Path | None = None, autocast: bool | None = None, seed: int = 0, lm: str = "tiny"
) -> Path:
    """The cached build's folder, keyed by training precision and build seed.

    The name carries the precision (``bf16`` autocast or ``fp32``, from the dtype policy unless
    ``autocast`` says): the two builds differ (at seed 0, full-token accuracy 0.64 with bf16
    autocast on an AMX CPU, see docs/restore.md), so a build made under one precision is never
    reused by a run under the other. Seed 0 keeps the historical name
    (``tiny-llava-scenes-v3-bf16``); other seeds add ``-seed{N}``, a SmolLM2 language model
    ``-smollm2``."""
    from icml26.core.lm import cache_root

    if int(seed) != seed or seed < 0:
        raise ValueError(f"build seed must be an integer >= 0; got {seed!r}")
    if lm not in LMS:
        raise ValueError(f"lm must be one of {LMS}; got {lm!r}")
    prec = "bf16" if _autocast(autocast) else "fp32"
    tail = ("" if lm == "tiny" else f"-{lm}") + ("" if seed == 0 else f"-seed{int(seed)}")
    return (root or cache_root() / "restore") / f"tiny-llava-scenes-v{BUILD_VERSION}-{prec}{tail}"


def _balanced(qs: list, rng, per_kind: int = 3) -> list:
    """Training questions of one scene, balanced by type: every colour / shape / digit question
    (there are few) plus ``per_kind`` random count and cell questions (there are 6 and 9)."""
    out = [q for q in qs if q.kind in ("color", "shape", "digit")]
    for kind in ("count", "cell"):
        sub = [q for q in qs if q.kind == kind]
        out += [sub[i] for i in rng.permutation(len(sub))[:per_kind]]
    return out


def _new_model(seed, vision_width, vision_layers, hidden, layers):
    model = tiny_llava(
        len(scenes.VOCAB),
        image_size=scenes.IMAGE,
        patch=4,
        vision_width=vision_width,
        vision_layers=vision_layers,
        hidden=hidden,
        layers=layers,
        heads=4,
        kv_heads=4,
        image_token_id=scenes.IMAGE_ID,
        seed=seed,
        max_len=512,
    )
    model.config.pad_token_id = scenes.WORD["<pad>"]
    return model


def smollm2_llava(seed: int = 0, vision_width: int = 64, vision_layers: int = 4):
    """A LLaVA whose language model is SmolLM2-135M-Instruct (30 layers, head_dim 64, RoPE base 1e5)
    on the scenes' word-level vocabulary: the transformer body is SmolLM2's; each word's embedding
    row (tied to the LM head) is the mean of SmolLM2's input embeddings of the word's tokens (with
    a leading space); ``<bos>`` takes SmolLM2's BOS embedding, ``<pad>`` / ``<image>`` zeros. The
    vision tower and projector are new (random, ``seed``)."""
    import copy

    from transformers import LlavaConfig, LlavaForConditionalGeneration

    from icml26.core.lm import load_lm
    from icml26.restore.vlm import _configs

    smol, tok = load_lm(dtype=torch.float32)
    vc, _ = _configs(
        len(scenes.VOCAB), scenes.IMAGE, 4, vision_width, vision_layers, 64, 1, 1, 1, 1e4, 512
    )
    tc = copy.deepcopy(smol.config)
    tc.vocab_size, tc.tie_word_embeddings = len(scenes.VOCAB), True
    tc.bos_token_id = tc.eos_token_id = scenes.WORD["<bos>"]
    tc.pad_token_id = scenes.WORD["<pad>"]
    cfg = LlavaConfig(
        vision_config=vc,
        text_config=tc,
        image_token_id=scenes.IMAGE_ID,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(cfg)
    body = {
        k.removeprefix("model."): v
        for k, v in smol.state_dict().items()
        if k.startswith("model.") and "embed_tokens" not in k
    }
    missing, unexpected = model.model.language_model.load_state_dict(body, strict=False)
    assert not unexpected and missing == ["embed_tokens.weight"], (missing, unexpected)
    src = smol.get_input_embeddings().weight.detach()
    rows = torch.zeros(len(scenes.VOCAB), src.shape[1])
    for i, w in enumerate(scenes.VOCAB):
        if w == "<bos>":
            rows[i] = src[tok.bos_token_id if tok.bos_token_id is not None else 0]
        elif not w.startswith("<"):
            rows[i] = src[tok(" " + w, add_special_tokens=False)["input_ids"]].mean(0)
    with torch.no_grad():
        model.model.language_model.embed_tokens.weight.copy_(rows)
    model.config.pad_token_id = scenes.WORD["<pad>"]
    return model.eval()


def _one_cycle(params, steps, lr):
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    return opt, torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=max(steps, 4), pct_start=max(0.05, 2 / max(steps, 4))
    )


def _vision_hidden(model, px):
    layer = model.config.vision_feature_layer
    return model.model.vision_tower(px, output_hidden_states=True).hidden_states[layer][:, 1:]


def pretrain_vision(
    model,
    images,
    layouts,
    *,
    steps: int,
    batch: int = 32,
    lr: float = 2e-3,
    seed: int = 0,
    autocast: bool | None = None,
    tick=lambda n=1: None,
    log=print,
) -> list[float]:
    """Stage 1: the CLIP tower learns per-token attribute labels. Linear heads on the selected
    layer (LLaVA's ``vision_feature_layer``, CLS dropped) predict, for every patch token, its
    grid cell's colour, shape, digit and cell index (:func:`scenes.token_targets`); sum of the
    four cross-entropies. Like CLIP's image embedding, the CLS token of the last layer
    (``pooler_output``) is trained too: a linear head predicts which colours, shapes and digit
    the scene holds (:func:`scenes.scene_targets`, binary cross-entropy), so CLS attention --
    VisionZip's ranking -- has something to look for. The heads are discarded. Returns the loss
    curve (EMA per step)."""
    tower = model.model.vision_tower
    width = model.config.vision_config.hidden_size
    sizes = list(scenes.ATTRIBUTES.values())
    torch.manual_seed(seed)
    head = torch.nn.Linear(width, sum(sizes))
    cls_head = torch.nn.Linear(width, 20)
    targets = scenes.token_targets(layouts)
    cls_targets = scenes.scene_targets(layouts)
    layer = model.config.vision_feature_layer
    params = list(tower.parameters()) + list(head.parameters()) + list(cls_head.parameters())
    opt, sched = _one_cycle(params, steps, lr)
    rng = np.random.default_rng(seed)
    tower.train()
    curve, ema, t0 = [], None, time.time()
    for step in range(steps):
        idx = rng.choice(len(images), size=batch, replace=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=_autocast(autocast)):
            out = tower(scenes.pixel_values(images[idx]), output_hidden_states=True)
            logits = head(out.hidden_states[layer][:, 1:]).float().split(sizes, dim=-1)
            cls_logits = cls_head(out.pooler_output).float()
        tg = targets[idx]
        loss = sum(
            torch.nn.functional.cross_entropy(lg.reshape(-1, k), tg[..., j].reshape(-1))
            for j, (lg, k) in enumerate(zip(logits, sizes, strict=True))
        )
        loss = loss + torch.nn.functional.binary_cross_entropy_with_logits(
            cls_logits, cls_targets[idx]
        )
        ema = _train_step(loss, opt, sched, params, ema)
        curve.append(ema)
        tick(1)
        if log and (step % 100 == 0 or step == steps - 1):
            log(f"vision step {step} loss {ema:.3f} ({time.time() - t0:.0f}s)")
    tower.eval()
    return curve


@torch.no_grad()
def vision_features(model, images, batch: int = 128) -> torch.Tensor:
    """The frozen tower's selected-layer patch features (S, N, width), in the model's dtype."""
    out = [
        _vision_hidden(model, scenes.pixel_values(images[s : s + batch]))
        for s in range(0, len(images), batch)
    ]
    return torch.cat(out)


def _qa_batch(by_scene, scenes_idx, rng, layouts=None, caption_frac: float = 0.0):
    """Per scene ``<bos> <image>*N`` then its balanced ``question ? answer A`` turns in random
    order, or (with probability ``caption_frac``, when ``layouts`` are given) the scene's dense
    caption (:func:`scenes.caption`); right-padded. Returns ids (B, L) and (row, position, target
    id) triples: the logits at ``position`` must predict the target (an answer, or the next
    caption attribute word)."""
    seqs, targets = [], []
    for row, s in enumerate(scenes_idx):
        ids = [scenes.WORD["<bos>"]] + [scenes.IMAGE_ID] * N_IMAGE_TOKENS
        if layouts is not None and rng.random() < caption_frac:
            for word, is_target in scenes.caption(layouts[s]):
                if is_target:
                    targets.append((row, len(ids) - 1, scenes.WORD[word]))
                ids.append(scenes.WORD[word])
            seqs.append(ids)
            continue
        qs = _balanced(by_scene[s], rng)
        for qi in rng.permutation(len(qs)):
            q = qs[qi]
            ids += [scenes.WORD[w] for w in q.words] + [scenes.WORD["?"], scenes.WORD["answer"]]
            targets.append((row, len(ids) - 1, scenes.WORD[q.answer]))
            ids.append(scenes.WORD[q.answer])
        seqs.append(ids)
    width = max(len(x) for x in seqs)
    pad = scenes.WORD["<pad>"]
    return torch.tensor([x + [pad] * (width - len(x)) for x in seqs]), torch.tensor(targets)


def text_hidden(model, ids: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
    """Language-model hidden states for ``ids`` whose ``<image>`` slots take the projected tower
    features ``feats`` (B, N, width): what ``LlavaModel.forward`` does, minus the tower."""
    lm = model.model.language_model
    emb = lm.embed_tokens(ids)
    img = model.model.multi_modal_projector(feats).to(emb.dtype)
    emb = emb.masked_scatter((ids == scenes.IMAGE_ID)[..., None].expand_as(emb), img)
    return lm(inputs_embeds=emb).last_hidden_state


def train_qa(
    model,
    feats,
    by_scene,
    *,
    steps: int,
    batch: int = 16,
    lr: float = 2e-3,
    seed: int = 0,
    layouts=None,
    caption_frac: float = 0.0,
    autocast: bool | None = None,
    tick=lambda n=1: None,
    log=print,
    train_lm: bool = True,
) -> list[float]:
    """Stage 2 (LLaVA's recipe with the tower frozen): the projector and the language model learn
    the QA from cached tower features; loss = cross-entropy of every answer token. The image
    embeddings are inserted exactly where ``LlavaModel`` puts them. Returns the loss curve."""
    lm, proj = model.model.language_model, model.model.multi_modal_projector
    params = (
        list(proj.parameters())
        + list(lm.parameters())
        + [p for p in model.lm_head.parameters() if all(p is not q for q in lm.parameters())]
    )
    if not train_lm:  # a frozen (pre-trained) language model: only the projector learns
        for p in params[len(list(proj.parameters())) :]:
            p.requires_grad_(False)
        params = list(proj.parameters())
    opt, sched = _one_cycle(params, steps, lr)
    rng = np.random.default_rng(seed)
    keys = sorted(by_scene)
    proj.train()
    lm.train()
    curve, ema, t0 = [], None, time.time()
    for step in range(steps):
        idx = rng.choice(keys, size=batch, replace=False)
        ids, tg = _qa_batch(by_scene, idx, rng, layouts, caption_frac)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=_autocast(autocast)):
            h = text_hidden(model, ids, feats[torch.as_tensor(idx)])
            logits = model.lm_head(h[tg[:, 0], tg[:, 1]])
        loss = torch.nn.functional.cross_entropy(logits.float(), tg[:, 2])
        ema = _train_step(loss, opt, sched, params, ema)
        curve.append(ema)
        tick(1)
        if log and (step % 100 == 0 or step == steps - 1):
            log(f"qa step {step} loss {ema:.3f} ({time.time() - t0:.0f}s)")
    model.eval()
    return curve


def build_tiny_llava(
    out: Path | None = None,
    *,
    vision_steps: int = VISION_STEPS,
    qa_steps: int = QA_STEPS,
    n_scenes: int = 4000,
    seed: int = 0,
    vision_width: int = 64,
    vision_layers: int = 4,
    hidden: int = 128,
    layers: int = 3,
    caption_frac: float = CAPTION_FRAC,
    qa_lr: float = 2e-3,
    autocast: bool | None = None,
    vision_from: Path | None = None,
    lm: str = "tiny",
    progress=None,
    log=print,
) -> Path:
    """Train and save the claim's model; returns its folder. Stage 1 pre-trains the vision tower
    on per-token attribute labels (:func:`pretrain_vision`), stage 2 freezes it and trains the
    projector and the language model on type-balanced scene QA plus a ``caption_frac`` share of
    dense captions (:func:`train_qa`). ``vision_from`` (a folder built with the same stage-1
    settings) copies its tower instead of running stage 1 again: stage 1 is deterministic, so the
    result is the same model, for experiments on stage 2 only. ``lm="smollm2"``: the language
    model is a frozen SmolLM2-135M (:func:`smollm2_llava`; ``hidden`` / ``layers`` ignored), only
    the projector learns in stage 2 -- 6.6-9 CPU-s per stage-2 step on one thread (measured),
    so 2.2-3 CPU-hours at the default 1,200 steps: off by default."""
    out = Path(out or model_dir(autocast=autocast, seed=seed, lm=lm))
    if lm not in LMS:
        raise ValueError(f"lm must be one of {LMS}; got {lm!r}")
    model = (
        _new_model(seed, vision_width, vision_layers, hidden, layers)
        if lm == "tiny"
        else smollm2_llava(seed, vision_width, vision_layers)
    )
    images, qs, layouts = scenes.make_dataset(
        n_scenes, seed=seed + 1000, dense=True, return_layouts=True
    )
    by_scene: dict[int, list] = {}
    for q in qs:
        by_scene.setdefault(q.scene, []).append(q)
    tick = (
        progress.task("train tiny LLaVA", total=vision_steps + qa_steps)
        if progress is not None
        else (lambda n=1: None)
    )
    t0 = time.time()
    if vision_from is None:
        v_curve = pretrain_vision(
            model,
            images,
            layouts,
            steps=vision_steps,
            seed=seed,
            autocast=autocast,
            tick=tick,
            log=log,
        )
    else:
        from transformers import LlavaForConditionalGeneration

        src = LlavaForConditionalGeneration.from_pretrained(vision_from, dtype=torch.float32)
        model.model.vision_tower.load_state_dict(src.model.vision_tower.state_dict())
        v_curve = json.loads((Path(vision_from) / "restore-vocab.json").read_text())["vision_loss"]
    t1 = time.time()
    feats = vision_features(model, images)
    q_curve = train_qa(
        model,
        feats,
        by_scene,
        steps=qa_steps,
        lr=qa_lr,
        seed=seed,
        layouts=layouts,
        caption_frac=caption_frac,
        autocast=autocast,
        tick=tick,
        log=log,
        train_lm=lm == "tiny",
    )
    t2 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    atomic_write_json(
        out / "restore-vocab.json",
        {
            "vocab": scenes.VOCAB,
            "lm": lm,
            "vision_steps": vision_steps,
            "qa_steps": qa_steps,
            "seed": seed,
            "caption_frac": caption_frac,
            "qa_lr": qa_lr,
            "autocast_bf16": _autocast(autocast),
            "vision_from": str(vision_from) if vision_from else None,
            "vision_seconds": t1 - t0,
            "qa_seconds": t2 - t1,
            "train_seconds": t2 - t0,
            "vision_loss": _every(v_curve, 25),
            "qa_loss": _every(q_curve, 25),
        },
    )
    return out


def _every(curve: list[float], k: int) -> list[float]:
    """Every ``k``-th value of a loss curve, and the last."""
    return [round(v, 4) for v in curve[::k] + ([curve[-1]] if (len(curve) - 1) % k else [])]


def build_recipe(
    out: Path | None = None, *, seed: int = 0, lm: str = "tiny", progress=None, log=print
) -> Path:
    """The claim's model with the default recipe and build ``seed`` (model init, training data
    and batch order all follow it), saved to ``out`` (default :func:`model_dir` of that seed)."""
    return build_tiny_llava(
        out or model_dir(seed=seed, lm=lm), seed=seed, lm=lm, progress=progress, log=log
    )


def load_tiny_llava(folder: Path | None = None, dtype=torch.float32, device="cpu"):
    """The cached model (``None`` if not built) and its vocabulary."""
    from transformers import LlavaForConditionalGeneration

    folder = Path(folder or model_dir())
    if not (folder / "restore-vocab.json").is_file():
        return None
    vocab = json.loads((folder / "restore-vocab.json").read_text())["vocab"]
    if vocab != scenes.VOCAB:
        raise ValueError(
            f"{folder}: vocabulary differs from this version's scenes.VOCAB; rebuild it"
        )
    model = LlavaForConditionalGeneration.from_pretrained(
        folder, dtype=dtype, attn_implementation="sdpa"
    )
    return model.to(device).eval()
