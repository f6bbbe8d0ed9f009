"""``icml26 restore eval``: VQA accuracy of a LLaVA model with / without reduction + RESTORE.

Data: JSONL, one ``{"image": PATH, "question": TEXT, "answers": [TEXT, ...]}`` per line (image
paths relative to the JSONL file). Two model kinds:

- any HF LLaVA / LLaVA-NeXT folder with a processor (e.g. llava-hf/llava-1.5-7b-hf downloaded by
  the user): greedy generation of a short answer, correct when its normalised text equals one of
  the normalised ``answers`` (GQA / POPE style exact match);
- the claim's scenes tiny LLaVA (a folder with ``restore-vocab.json``): questions are scenes
  prompts (``color circle``, ``cell top left`` ...), the answer is the argmax over the question
  type's answer set.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import torch

from icml26.core.errors import UserError

__all__ = ["read_vqa_jsonl", "write_scenes_jsonl", "load_vqa_model", "eval_loaded", "eval_vqa"]


def read_vqa_jsonl(path: str | Path) -> list[dict]:
    """Validated records with absolute ``image`` paths; errors name the line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such data file")
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{n}: not JSON ({exc.msg})") from None
        for key in ("image", "question", "answers"):
            if key not in rec:
                raise UserError(
                    f"{path}:{n}: missing field {key!r} (need image, question, answers)"
                )
        img = (path.parent / rec["image"]).resolve()
        if not img.is_file():
            raise UserError(f"{path}:{n}: image {rec['image']!r} not found (looked at {img})")
        answers = rec["answers"] if isinstance(rec["answers"], list) else [rec["answers"]]
        out.append(
            {"image": img, "question": str(rec["question"]), "answers": [str(a) for a in answers]}
        )
    if not out:
        raise UserError(f"{path}: no records")
    return out


def write_scenes_jsonl(folder: str | Path, n_scenes: int = 50, seed: int = 123) -> Path:
    """Write held-out scenes as PNGs + ``vqa.jsonl`` (for ``restore eval`` on the tiny model)."""
    from PIL import Image

    from icml26.restore import scenes

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    images, qs = scenes.make_dataset(n_scenes, seed=seed, per_scene=4)
    for i, img in enumerate(images):
        Image.fromarray(img).save(folder / f"scene{i:04d}.png")
    lines = [
        json.dumps(
            {
                "image": f"scene{q.scene:04d}.png",
                "question": " ".join(q.words),
                "answers": [q.answer],
            }
        )
        for q in qs
    ]
    from icml26.core.io import atomic_write_text

    return atomic_write_text(folder / "vqa.jsonl", "\n".join(lines) + "\n")


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", s.lower()).strip()


def load_vqa_model(model_path: str | Path, device="cpu", dtype=torch.float32):
    """``(model, processor_or_None)``; processor ``None`` for the scenes tiny LLaVA."""
    folder = Path(model_path)
    if not folder.is_dir():
        raise UserError(f"--model {folder}: not a folder")
    if (folder / "restore-vocab.json").is_file():
        from icml26.restore.train import load_tiny_llava

        return load_tiny_llava(folder, dtype=dtype, device=device), None
    from transformers import AutoModelForImageTextToText, AutoProcessor

    try:
        model = AutoModelForImageTextToText.from_pretrained(
            folder, dtype=dtype, attn_implementation="sdpa"
        )
        proc = AutoProcessor.from_pretrained(folder)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load a LLaVA model + processor from {folder}: {exc}") from exc
    return model.to(device).eval(), proc


@torch.no_grad()
def eval_loaded(
    model, proc, recs: list[dict], cfg=None, *, max_new_tokens: int = 8, progress=None
) -> dict:
    """Accuracy of an already loaded model (see :func:`load_vqa_model`) on validated records;
    the model is patched with ``cfg`` for the call and restored after."""
    from PIL import Image

    from icml26.restore.patch import apply_restore, remove_restore

    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    if cfg is not None:
        apply_restore(model, cfg)
    preds, correct = [], []
    it = progress.track(recs, total=len(recs), description="eval") if progress else recs
    try:
        for n, rec in enumerate(it, 1):
            img = Image.open(rec["image"]).convert("RGB")
            if proc is None:
                pred = _scenes_answer(model, img, rec["question"], n, device, dtype)
            else:
                prompt = (
                    f"USER: <image>\n{rec['question']}\nAnswer the question using a single word or "
                    "phrase. ASSISTANT:"
                )
                inputs = proc(images=img, text=prompt, return_tensors="pt").to(device)
                if "pixel_values" in inputs:
                    inputs["pixel_values"] = inputs["pixel_values"].to(dtype)
                out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
                pred = proc.batch_decode(
                    out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True
                )[0]
            preds.append(pred)
            correct.append(_norm(pred) in {_norm(a) for a in rec["answers"]})
    finally:
        if cfg is not None:
            remove_restore(model)
    return {
        "accuracy": float(np.mean(correct)),
        "n": len(correct),
        "predictions": preds,
        "correct": np.array(correct),
        "config": None if cfg is None else cfg.to_dict(),
    }


def _scenes_answer(model, img, question: str, n: int, device, dtype) -> str:
    from icml26.restore import scenes
    from icml26.restore.train import N_IMAGE_TOKENS

    words = tuple(question.split())
    if not words or words[0] not in scenes.ANSWER_SETS:
        raise UserError(f"record {n}: question {question!r} is not a scenes prompt")
    q = scenes.Question(0, words[0], words, "")
    arr = np.asarray(img.resize((scenes.IMAGE, scenes.IMAGE)))[None]
    ids = torch.tensor([scenes.encode(q, N_IMAGE_TOKENS)], device=device)
    logits = (
        model(
            input_ids=ids, pixel_values=scenes.pixel_values(arr).to(device, dtype), logits_to_keep=1
        )
        .logits[0, -1]
        .float()
    )
    cand = scenes.answer_ids(q.kind)
    return scenes.VOCAB[cand[int(torch.argmax(logits[cand]))]]


def eval_vqa(
    model_path: str | Path,
    data: str | Path,
    cfg=None,
    *,
    device="cpu",
    dtype=torch.float32,
    limit: int | None = None,
    max_new_tokens: int = 8,
    progress=None,
) -> dict:
    """Load the model at ``model_path`` and score it on ``data`` (see :func:`eval_loaded`)."""
    recs = read_vqa_jsonl(data)[:limit]
    model, proc = load_vqa_model(model_path, device, dtype)
    out = eval_loaded(model, proc, recs, cfg, max_new_tokens=max_new_tokens, progress=progress)
    out.pop("correct")
    return out
