"""Plain-PyTorch online selection: encoding, collation, window selection, a training loop and
held-out evaluation. Device and dtype follow the model.

Budget semantics: each optimizer step draws ``candidates`` examples (the selection window),
scores them, keeps ``k = round(budget * candidates)`` and takes one optimizer step on those;
``scope="step"`` selects over the whole window (default), ``scope="micro_batch"`` keeps
``budget`` of every micro-batch separately (the official code's behaviour).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from icml26.core.errors import UserError
from icml26.uds.selectors import Selector, check_k, top_k


@dataclass(frozen=True)
class SFTExample:
    """One instruction pair. ``source``: task family; ``noisy``: label corrupted (generated data)."""

    prompt: str
    response: str
    source: str = "user"
    noisy: bool = False


def read_jsonl(path: str | Path) -> list[SFTExample]:
    """Lines with ``prompt``/``response`` or ``messages`` (user turns -> prompt, last assistant
    turn -> response). A bad line raises UserError naming file and line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{i}: not JSON ({exc.msg})") from None
            if "messages" in rec:
                msgs = rec["messages"]
                resp = [m.get("content", "") for m in msgs if m.get("role") == "assistant"]
                if not resp:
                    raise UserError(f"{path}:{i}: 'messages' has no assistant turn")
                prompt = "\n".join(
                    m.get("content", "") for m in msgs if m.get("role") != "assistant"
                )
                out.append(SFTExample(prompt, resp[-1], rec.get("source", "user")))
            elif "prompt" in rec and "response" in rec:
                out.append(
                    SFTExample(str(rec["prompt"]), str(rec["response"]), rec.get("source", "user"))
                )
            else:
                raise UserError(
                    f"{path}:{i}: expected fields 'prompt' and 'response', or 'messages'; got {sorted(rec)}"
                )
    if not out:
        raise UserError(f"{path}: no examples")
    return out


@dataclass(frozen=True)
class Encoded:
    input_ids: list[int]
    labels: list[int]


def encode(
    tok, examples: list[SFTExample], max_len: int, train_on_inputs: bool = False
) -> tuple[list[Encoded], int]:
    """bos + prompt + response + eos, truncated to ``max_len``; labels -100 on the prompt unless
    ``train_on_inputs``. Returns (encoded, skipped): examples whose response is empty after
    truncation are skipped and counted."""
    enc, skipped = [], 0
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    for ex in examples:
        p = bos + tok.encode(ex.prompt, add_special_tokens=False)
        r = tok.encode(ex.response, add_special_tokens=False) + eos
        ids = (p + r)[:max_len]
        n_resp = len(ids) - len(p)
        if n_resp <= 0:
            skipped += 1
            continue
        labels = list(ids) if train_on_inputs else [-100] * len(p) + ids[len(p) :]
        labels[0] = -100  # nothing predicts the first token
        enc.append(Encoded(ids, labels))
    return enc, skipped


def collate(items: list[Encoded], pad_id: int) -> dict:
    """Right-padded batch dict: input_ids, attention_mask, labels (B, T) long."""
    t = max(len(e.input_ids) for e in items)
    ids = torch.full((len(items), t), pad_id, dtype=torch.long)
    lab = torch.full((len(items), t), -100, dtype=torch.long)
    att = torch.zeros((len(items), t), dtype=torch.long)
    for i, e in enumerate(items):
        n = len(e.input_ids)
        ids[i, :n] = torch.tensor(e.input_ids)
        lab[i, :n] = torch.tensor(e.labels)
        att[i, :n] = 1
    return {"input_ids": ids, "attention_mask": att, "labels": lab}


def select_batch(model, batch: dict, selector: Selector, k: int) -> tuple[dict, torch.LongTensor]:
    """Keep k of the batch's rows: returns (sub-batch, indices)."""
    idx = selector.select(model, batch, k)
    return {key: v[idx] if torch.is_tensor(v) else v for key, v in batch.items()}, idx


def select_window(
    model, micro_batches: list[dict], selector: Selector, k: int, scope: str = "step"
) -> list[torch.LongTensor]:
    """Select among the micro-batches of one optimizer step; returns per-micro-batch indices.

    ``scope="step"``: global top-k over the window; ``"micro_batch"``: ``k`` is per micro-batch.
    """
    if scope == "micro_batch":
        return [
            selector.select(model, mb, min(k, mb["input_ids"].shape[0])) for mb in micro_batches
        ]
    if scope != "step":
        raise ValueError(f"scope must be 'step' or 'micro_batch'; got {scope!r}")
    scores = torch.cat([selector.scores(model, mb) for mb in micro_batches])
    check_k(k, scores.numel())
    chosen = top_k(scores, k)
    selector.observe(chosen)
    sizes = [mb["input_ids"].shape[0] for mb in micro_batches]
    out, start = [], 0
    for n in sizes:
        out.append(chosen[(chosen >= start) & (chosen < start + n)] - start)
        start += n
    return out


def budget_k(budget: float, candidates: int) -> int:
    """k = round(budget * b); budget must be in (0, 1] and b * budget >= 1."""
    if not 0 < budget <= 1:
        raise ValueError(f"budget must be in (0, 1]; got {budget}")
    if candidates * budget < 1 - 1e-9:
        raise ValueError(f"candidates * budget must be >= 1; got {candidates} * {budget}")
    return max(1, int(round(budget * candidates)))


@dataclass(frozen=True)
class TrainConfig:
    """lr: AdamW peak learning rate (linear warmup ``warmup`` fraction, then linear decay to 0);
    candidates: b, examples scored per optimizer step; budget: K/b; epochs over the pool."""

    lr: float = 1e-3
    candidates: int = 32
    budget: float = 0.25
    epochs: int = 1
    weight_decay: float = 0.0
    warmup: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self):
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0; got {self.lr}")
        if self.candidates < 1 or self.epochs < 1:
            raise ValueError(
                f"candidates and epochs must be >= 1; got {self.candidates}, {self.epochs}"
            )
        budget_k(self.budget, self.candidates)


@dataclass
class TrainLog:
    selected: list[int] = field(default_factory=list)  # pool indices trained on, in order
    train_loss: list[float] = field(default_factory=list)
    time_scoring_s: float = 0.0
    time_training_s: float = 0.0
    steps: int = 0


def _lm_loss(model, batch: dict) -> torch.Tensor:
    device = next(model.parameters()).device
    logits = model(
        input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)
    ).logits
    labels = batch["labels"].to(device)
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
    )


def train_online(
    model,
    pool: list[Encoded],
    selector: Selector | None,
    cfg: TrainConfig,
    pad_id: int,
    progress=None,
) -> TrainLog:
    """Train ``model`` in place for ``cfg.epochs`` over ``pool`` (shuffled per epoch from
    ``cfg.seed``). ``selector=None`` trains on every candidate (full data)."""
    g = torch.Generator().manual_seed(cfg.seed)
    k = budget_k(cfg.budget, cfg.candidates) if selector is not None else cfg.candidates
    steps_per_epoch = math.ceil(len(pool) / cfg.candidates)
    total = steps_per_epoch * cfg.epochs
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay
    )
    warm = max(1, int(cfg.warmup * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm)))
    )
    log = TrainLog()
    advance = progress.task("train", total=total) if progress is not None else None
    for _ in range(cfg.epochs):
        order = (
            torch.randperm(len(pool), generator=g).tolist()
            if cfg.shuffle
            else list(range(len(pool)))
        )
        for start in range(0, len(order), cfg.candidates):
            ids = order[start : start + cfg.candidates]
            batch = collate([pool[i] for i in ids], pad_id)
            t0 = time.perf_counter()
            if selector is not None:  # a short last window keeps the budget fraction
                kk = k if len(ids) == cfg.candidates else max(1, round(cfg.budget * len(ids)))
                _, idx = select_batch(model, batch, selector, kk)
                ids = [ids[i] for i in idx.tolist()]
                batch = collate([pool[i] for i in ids], pad_id)  # re-pad to the picks' length
            t1 = time.perf_counter()
            model.train()
            loss = _lm_loss(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            t2 = time.perf_counter()
            log.time_scoring_s += t1 - t0
            log.time_training_s += t2 - t1
            log.selected += ids
            log.train_loss.append(float(loss.detach()))
            log.steps += 1
            if advance is not None:
                advance(1)
    model.eval()
    return log


@dataclass(frozen=True)
class EvalResult:
    loss: float  # mean NLL per trained token (nats)
    exact_match: float  # fraction of examples whose every response token is the argmax
    per_example_loss: tuple[float, ...]
    per_example_match: tuple[bool, ...] = ()  # per example: every *answer* token is the argmax
    answer_match: float = float("nan")  # mean of per_example_match


@torch.no_grad()
def evaluate(
    model,
    data: list[Encoded],
    pad_id: int,
    batch_size: int = 32,
    answer_labels: list[list[int]] | None = None,
) -> EvalResult:
    """Held-out token loss and teacher-forced exact match over the labelled tokens.

    ``answer_labels`` (optional, one list per example, same length as its ``labels``): a second
    label mask marking only the verifiable answer (e.g. the final number of a worked solution);
    ``answer_match`` is then the teacher-forced exact match over those tokens, from the same
    forward pass."""
    if answer_labels is not None and (
        len(answer_labels) != len(data)
        or any(len(a) != len(e.labels) for a, e in zip(answer_labels, data, strict=False))
    ):
        raise ValueError("answer_labels must hold one label list per example, of equal lengths")
    device = next(model.parameters()).device
    model.eval()
    # batches of similar length (less padding); per-example results go back to input order
    order = sorted(range(len(data)), key=lambda i: len(data[i].input_ids))
    if answer_labels is not None:
        answer_labels = [answer_labels[i] for i in order]
    data = [data[i] for i in order]
    tot, n_tok, em, per, match = 0.0, 0, 0, [], []
    for start in range(0, len(data), batch_size):
        items = data[start : start + batch_size]
        b = collate(items, pad_id)
        logits = (
            model(
                input_ids=b["input_ids"].to(device), attention_mask=b["attention_mask"].to(device)
            )
            .logits[:, :-1]
            .float()
        )
        lab = b["labels"][:, 1:].to(device)
        m = lab != -100
        nll = (
            torch.nn.functional.cross_entropy(
                logits.transpose(1, 2), lab.clamp_min(0), reduction="none"
            )
            * m
        )
        pred = logits.argmax(-1)
        ok = ((pred == lab) | ~m).all(-1)
        tot += float(nll.sum())
        n_tok += int(m.sum())
        em += int(ok.sum())
        per += (nll.sum(-1) / m.sum(-1).clamp_min(1)).tolist()
        if answer_labels is not None:
            ans = collate(
                [
                    Encoded(e.input_ids, a)
                    for e, a in zip(items, answer_labels[start:], strict=False)
                ],
                pad_id,
            )["labels"][:, 1:].to(device)
            am = ans != -100
            match += ((pred == ans) | ~am).all(-1).tolist()
    back = sorted(range(len(order)), key=order.__getitem__)  # inverse permutation
    per = [per[j] for j in back]
    match = [match[j] for j in back] if match else []
    return EvalResult(
        tot / max(n_tok, 1),
        em / max(len(data), 1),
        tuple(per),
        tuple(match),
        sum(match) / len(match) if match else float("nan"),
    )
