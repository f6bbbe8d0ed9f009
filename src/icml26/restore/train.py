"""Build (once, cached) the claim's tiny LLaVA: a real ``LlavaForConditionalGeneration`` trained
end to end on :mod:`scenes` QA.

CLIP vision tower 64x64 / patch 4 -> 256 patch tokens + CLS, 4 layers, width 192; MLP-GELU
projector; a 4-layer Llama (hidden 256, 4 heads, head_dim 64, RoPE base 1e4) with the scenes'
word-level vocabulary. Loss: cross-entropy of the answer token. The folder is written with
``save_pretrained`` (safetensors + config) plus ``restore-vocab.json``; it reloads with
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

__all__ = ["build_tiny_llava", "load_tiny_llava", "model_dir", "N_IMAGE_TOKENS"]

N_IMAGE_TOKENS = 144  # 48x48 / patch 4
BUILD_VERSION = 1


def model_dir(root: Path | None = None) -> Path:
    from icml26.core.lm import cache_root

    return (root or cache_root() / "restore") / f"tiny-llava-scenes-v{BUILD_VERSION}"


def _batch(images, by_scene, scenes_idx, rng, max_q: int = 16):
    """Training batch: per scene, ``<bos> <image>*N`` then 1..max_q ``question ? answer A``
    turns (right-padded). Returns ids (B, L), pixel values, and (row, position, answer id) targets
    where the logits at ``position`` (the ``answer`` token) must predict the answer."""
    seqs, targets = [], []
    for row, s in enumerate(scenes_idx):
        qs = by_scene[s]
        k = min(max_q, len(qs)) if rng.random() < 0.75 else int(rng.integers(1, 4))
        ids = scenes.encode(qs[0], N_IMAGE_TOKENS)[: 1 + N_IMAGE_TOKENS]
        for qi in rng.permutation(len(qs))[:k]:
            q = qs[qi]
            ids += [scenes.WORD[w] for w in q.words] + [scenes.WORD["?"], scenes.WORD["answer"]]
            targets.append((row, len(ids) - 1, scenes.WORD[q.answer]))
            ids.append(scenes.WORD[q.answer])
        seqs.append(ids)
    width = max(len(x) for x in seqs)
    pad = scenes.WORD["<pad>"]
    ids = torch.tensor([x + [pad] * (width - len(x)) for x in seqs])
    px = scenes.pixel_values(images[list(scenes_idx)])
    return ids, px, torch.tensor(targets)


def build_tiny_llava(out: Path | None = None, *, steps: int = 700, batch: int = 16, lr: float = 2e-3,
                     n_scenes: int = 4000, seed: int = 0, vision_width: int = 64, vision_layers: int = 2,
                     hidden: int = 128, layers: int = 3, autocast: bool = True, progress=None,
                     log=print, init: Path | None = None) -> Path:
    """Train and save the model; returns its folder. Each step sees ``batch`` scenes with up to
    16 questions each (one forward pass per scene; the loss is on every answer token)."""
    out = Path(out or model_dir())
    torch.manual_seed(seed)
    model = tiny_llava(len(scenes.VOCAB), image_size=scenes.IMAGE, patch=4, vision_width=vision_width,
                       vision_layers=vision_layers, hidden=hidden, layers=layers, heads=4, kv_heads=4,
                       image_token_id=scenes.IMAGE_ID, seed=seed, max_len=512)
    model.config.pad_token_id = scenes.WORD["<pad>"]
    if init is not None:  # continue from a saved build (a second one-cycle phase)
        from transformers import LlavaForConditionalGeneration

        model = LlavaForConditionalGeneration.from_pretrained(init, dtype=torch.float32,
                                                              attn_implementation="sdpa")
    model.train()
    images, qs = scenes.make_dataset(n_scenes, seed=seed + 1000, dense=True)
    by_scene: dict[int, list] = {}
    for q in qs:
        by_scene.setdefault(q.scene, []).append(q)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    rng = np.random.default_rng(seed)
    t0 = time.time()
    tick = progress.task("train tiny LLaVA", total=steps) if progress is not None else (lambda n=1: None)
    ema = None
    for step in range(steps):
        ids, px, tg = _batch(images, by_scene, rng.choice(n_scenes, size=batch, replace=False), rng)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=ids, pixel_values=px).logits
        loss = torch.nn.functional.cross_entropy(logits[tg[:, 0], tg[:, 1]].float(), tg[:, 2])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        lv = float(loss.detach())
        ema = lv if ema is None else 0.95 * ema + 0.05 * lv
        tick(1)
        if log and (step % 50 == 0 or step == steps - 1):
            log(f"step {step} loss {ema:.3f} ({time.time() - t0:.0f}s)")
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    atomic_write_json(out / "restore-vocab.json", {"vocab": scenes.VOCAB, "steps": steps,
                                                    "train_seconds": time.time() - t0, "seed": seed})
    return out


def build_recipe(out: Path | None = None, *, phases=((700, 0), (600, 1)), progress=None, log=print) -> Path:
    """The claim's model: one-cycle phases of ``(steps, seed)``, each continuing the previous
    (the first from scratch). Returns the final folder."""
    import shutil
    import tempfile

    out = Path(out or model_dir())
    prev = None
    with tempfile.TemporaryDirectory() as tmp:
        for i, (steps, seed) in enumerate(phases):
            dst = out if i == len(phases) - 1 else Path(tmp) / f"phase{i}"
            build_tiny_llava(dst, steps=steps, seed=seed, init=prev, progress=progress, log=log)
            if prev is not None and prev != out:
                shutil.rmtree(prev, ignore_errors=True)
            prev = dst
    return out


def load_tiny_llava(folder: Path | None = None, dtype=torch.float32, device="cpu"):
    """The cached model (``None`` if not built) and its vocabulary."""
    from transformers import LlavaForConditionalGeneration

    folder = Path(folder or model_dir())
    if not (folder / "restore-vocab.json").is_file():
        return None
    vocab = json.loads((folder / "restore-vocab.json").read_text())["vocab"]
    if vocab != scenes.VOCAB:
        raise ValueError(f"{folder}: vocabulary differs from this version's scenes.VOCAB; rebuild it")
    model = LlavaForConditionalGeneration.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa")
    return model.to(device).eval()
