"""Scoring a (patched or plain) LLaVA on the generated scenes QA, plus attention-mass records."""

from __future__ import annotations

import numpy as np
import torch

from icml26.restore import scenes
from icml26.restore.patch import RestoreConfig, apply_restore, remove_restore

__all__ = ["score_questions", "run_system"]


@torch.no_grad()
def score_questions(
    model,
    images: np.ndarray,
    questions: list,
    n_image_tokens: int,
    batch_size: int = 32,
    progress=None,
    record: dict | None = None,
    answers: np.ndarray | None = None,
) -> np.ndarray:
    """Correct (bool array, one per question): argmax of the next-token logits after ``answer``
    over the question type's answer set. Questions are batched by prompt length (no padding).
    When the model is patched and ``record`` is a dict, per-layer text->visual attention mass
    (B,) tensors are appended to ``record[layer]``. ``answers`` (an int array, one per question)
    receives each predicted answer's token id."""
    from icml26.restore.patch import is_patched

    extra = {"restore_record": record} if (is_patched(model) and record is not None) else {}
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    correct = np.zeros(len(questions), dtype=bool)
    by_len: dict[int, list[int]] = {}
    for i, q in enumerate(questions):
        by_len.setdefault(len(q.words), []).append(i)
    chunks = [
        idx[s : s + batch_size] for idx in by_len.values() for s in range(0, len(idx), batch_size)
    ]
    it = progress.track(chunks, total=len(chunks), description="score") if progress else chunks
    for chunk in it:
        ids = torch.tensor(
            [scenes.encode(questions[i], n_image_tokens) for i in chunk], device=device
        )
        px = scenes.pixel_values(images[[questions[i].scene for i in chunk]]).to(device, dtype)
        logits = (
            model(input_ids=ids, pixel_values=px, logits_to_keep=1, use_cache=False, **extra)
            .logits[:, -1]
            .float()
            .cpu()
        )
        for row, i in enumerate(chunk):
            q = questions[i]
            cand = scenes.answer_ids(q.kind)
            pred = cand[int(torch.argmax(logits[row, cand]))]
            correct[i] = pred == scenes.WORD[q.answer]
            if answers is not None:
                answers[i] = pred
    return correct


def run_system(
    model,
    cfg: RestoreConfig | None,
    images,
    questions,
    n_image_tokens,
    *,
    batch_size=32,
    progress=None,
    record: bool = False,
    answers: np.ndarray | None = None,
):
    """Correct array (and per-layer mean text->visual attention mass when ``record``) for one
    system; ``cfg=None`` is the unpatched model. ``answers``: see :func:`score_questions`."""
    rec = {} if record else None
    if cfg is None:
        if record:
            cfg = RestoreConfig(reducer="none", calibrate=False)  # same numbers, instrumented path
        else:
            return score_questions(
                model, images, questions, n_image_tokens, batch_size, progress, answers=answers
            ), None
    apply_restore(model, cfg)
    try:
        correct = score_questions(
            model, images, questions, n_image_tokens, batch_size, progress, rec, answers
        )
    finally:
        remove_restore(model)
    mass = None
    if rec:
        mass = np.array([float(torch.cat(rec[k]).mean()) for k in sorted(rec)])
    return correct, mass
