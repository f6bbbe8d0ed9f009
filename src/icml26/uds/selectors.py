"""Online batch selectors: the ``Selector`` protocol, UDS and the baselines the paper names.

A *batch* is a dict of tensors ``input_ids`` (B, T) long, ``attention_mask`` (B, T) and
``labels`` (B, T) long with -100 on positions that are not trained (prompt, padding), as HF
causal-LM collators produce. Scores use the logits rows that predict a trained label
(``labels[:, t + 1] != -100``) from a real position (``attention_mask[:, t] == 1``), so padding,
and by default the prompt, are never scored, on either padding side: with left padding and a
labelled first token the pad row in front of it predicts that token and is *not* scored (the
official code scores it). Position ids follow the attention mask (``cumsum - 1``) so a
left-padded row gets the logits of its unpadded self. With ``train_on_inputs=True`` data (labels
on the prompt too) the prompt is scored, as in the official run. Scoring runs one forward under
``torch.no_grad()`` and never a backward, in eval mode by default (``score_mode="train"`` keeps
dropout on, as the official code does, which scores in the trainer's train mode).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from icml26.uds.scores import (
    DEFAULT_CHUNK,
    EmbeddingFIFO,
    FJLTProjector,
    all_gather_rows,
    token_loss_and_gradnorm,
    uds_terms,
)

SCORE_MODES = ("eval", "train")

SELECTORS = (
    "random",
    "maxloss",
    "gradnorm",
    "uds",
    "uds-intra",
    "uds-inter",
    "uds-lennorm",
    "rholoss",
)


@runtime_checkable
class Selector(Protocol):
    """Scores candidates and picks k of them; ``observe`` tells it which were trained on."""

    def scores(self, model, batch: dict) -> torch.Tensor:
        """(B,) float64 scores, higher = keep."""

    def observe(self, chosen: torch.Tensor) -> None:
        """Indices (into the candidates scored since the last ``observe``) that were selected."""

    def select(self, model, batch: dict, k: int) -> torch.LongTensor:
        """Top-k indices of ``scores`` (then ``observe``)."""


@dataclass
class ScoredRows:
    """Per-sample scored logits rows (n_i, V), targets (n_i,), optional LM-head inputs (n_i, H)."""

    logits: list[torch.Tensor]
    targets: list[torch.Tensor]
    hidden: list[torch.Tensor] | None = None


def check_score_mode(score_mode: str) -> str:
    if score_mode not in SCORE_MODES:
        raise ValueError(f"score_mode must be one of {SCORE_MODES}; got {score_mode!r}")
    return score_mode


def _takes_position_ids(model) -> bool:
    try:
        return "position_ids" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return False


def _forward(model, batch: dict, *, need_hidden: bool, score_mode: str):
    """One no-grad forward -> (logits (B, T, V), scored mask (B, T) bool, labels (B, T), LM-head
    inputs (B, T, H) or None)."""
    check_score_mode(score_mode)
    for key in ("input_ids", "labels"):
        if key not in batch:
            raise ValueError(f"batch is missing {key!r}; got keys {sorted(batch)}")
    captured: list[torch.Tensor] = []
    hook = None
    if need_hidden:
        head = model.get_output_embeddings()
        if head is None:
            raise ValueError("GradNorm needs a model with an output embedding (LM head)")
        hook = head.register_forward_hook(lambda _m, inp, _out: captured.append(inp[0].detach()))
    device = next(model.parameters()).device
    was_training = model.training
    attn = batch.get("attention_mask", torch.ones_like(batch["input_ids"])).to(device)
    kwargs = {}
    if _takes_position_ids(model):  # positions of real tokens, whatever the padding side
        kwargs["position_ids"] = (attn.long().cumsum(-1) - 1).clamp_min(0)
    try:
        model.train(score_mode == "train")
        with torch.no_grad():
            out = model(input_ids=batch["input_ids"].to(device), attention_mask=attn, **kwargs)
    finally:
        if hook is not None:
            hook.remove()
        model.train(was_training)
    logits = getattr(out, "logits", None)
    if logits is None:
        raise ValueError("the model returned no logits; UDS needs a causal LM head")
    labels = batch["labels"].to(device)
    vocab = logits.shape[-1]
    if int(labels.max()) >= vocab:
        raise ValueError(
            f"labels hold id {int(labels.max())} >= model vocabulary {vocab}: vocabulary mismatch"
        )
    mask = torch.zeros_like(labels, dtype=torch.bool)
    mask[:, :-1] = (labels[:, 1:] != -100) & (attn[:, :-1] != 0)
    return logits, mask, labels, (captured[0] if need_hidden else None)


def scored_rows(
    model, batch: dict, *, need_hidden: bool = False, score_mode: str = "eval"
) -> ScoredRows:
    """One no-grad forward; the logits rows (and LM-head inputs) that predict trained labels.

    A row ``t`` is scored when ``labels[t + 1] != -100`` and ``attention_mask[t] == 1``.
    ``score_mode``: ``"eval"`` (dropout off; default) or ``"train"`` (the module's train mode,
    dropout on, as the official scorer); the model's own mode is restored afterwards.
    """
    logits, mask, labels, hidden = _forward(
        model, batch, need_hidden=need_hidden, score_mode=score_mode
    )
    rows = ScoredRows([], [], [] if need_hidden else None)
    for i in range(labels.shape[0]):
        pos = torch.nonzero(mask[i]).squeeze(1)
        rows.logits.append(logits[i, pos])
        rows.targets.append(labels[i, pos + 1])
        if need_hidden:
            rows.hidden.append(hidden[i, pos])
    return rows


class _Base:
    def observe(self, chosen: torch.Tensor) -> None:  # stateless selectors
        pass

    def select(self, model, batch: dict, k: int) -> torch.LongTensor:
        s = self.scores(model, batch)
        check_k(k, s.numel())
        chosen = top_k(s, k)
        self.observe(chosen)
        return chosen


def check_k(k: int, b: int) -> None:
    if not 1 <= k <= b:
        raise ValueError(f"k must be in [1, {b}] (the candidates); got {k}")


def top_k(scores: torch.Tensor, k: int) -> torch.LongTensor:
    """Indices of the k largest scores, ties broken by the lower index, sorted ascending."""
    order = torch.argsort(scores.double().cpu(), descending=True, stable=True)
    return order[:k].sort().values


class RandomSelector(_Base):
    """Uniform selection without replacement (the paper's Random baseline); seeded."""

    def __init__(self, seed: int = 0):
        self.generator = torch.Generator().manual_seed(seed)

    def scores(self, model, batch: dict) -> torch.Tensor:
        return torch.rand(
            batch["input_ids"].shape[0], generator=self.generator, dtype=torch.float64
        )


class MaxLossSelector(_Base):
    """Keep the samples with the highest mean token loss (utility-only baseline)."""

    def __init__(self, chunk: int = DEFAULT_CHUNK, *, score_mode: str = "eval"):
        self.chunk = chunk
        self.score_mode = check_score_mode(score_mode)

    def scores(self, model, batch: dict) -> torch.Tensor:
        rows = scored_rows(model, batch, score_mode=self.score_mode)
        return torch.stack(
            [
                token_loss_and_gradnorm(lg, tg, chunk=self.chunk)[0].cpu()
                for lg, tg in zip(rows.logits, rows.targets, strict=True)
            ]
        )


class GradNormSelector(_Base):
    """Keep the samples with the largest LM-head gradient norm of their mean token loss
    (closed form from softmax - onehot and the LM-head inputs; the paper's MaxGrad baseline)."""

    def __init__(self, chunk: int = DEFAULT_CHUNK, *, score_mode: str = "eval"):
        self.chunk = chunk
        self.score_mode = check_score_mode(score_mode)

    def scores(self, model, batch: dict) -> torch.Tensor:
        rows = scored_rows(model, batch, need_hidden=True, score_mode=self.score_mode)
        return torch.stack(
            [
                token_loss_and_gradnorm(lg, tg, h, chunk=self.chunk)[1].cpu()
                for lg, tg, h in zip(rows.logits, rows.targets, rows.hidden, strict=True)
            ]
        )


class RHOLossSelector(_Base):
    """RHO-Loss: training loss minus the loss under a reference (holdout-trained) model."""

    def __init__(self, reference_model, chunk: int = DEFAULT_CHUNK, *, score_mode: str = "eval"):
        self.reference = reference_model
        self._loss = MaxLossSelector(chunk, score_mode=score_mode)

    def scores(self, model, batch: dict) -> torch.Tensor:
        return self._loss.scores(model, batch) - self._loss.scores(self.reference, batch)


@dataclass
class UDSStats:
    """Per-candidate terms of every scoring call, to log both terms' spreads and pick lengths."""

    intra: list[float] = field(default_factory=list)
    inter: list[float] = field(default_factory=list)
    n_tokens: list[int] = field(default_factory=list)


class UDSSelector(_Base):
    """UDS: ``s = ||L||_* + alpha * mean_dist(FJLT(L), FIFO of past picks)``; top-k.

    Args:
        alpha: weight of the inter-sample term (official default 2.5e-3; the MMLU script 1.5e-3).
        queue_size: FIFO length (1024). r_time, r_vocab: FJLT sizes (8, 128).
        max_len: T, the time length embeddings are zero-padded to (the training cutoff).
        seed: draws the FJLT signs and frequencies.
        length_norm: None (paper) or "tokens" (divide the nuclear norm by scored tokens).
        use_intra, use_inter: ablations (UDS intra-only / inter-only).
        chunk: vocabulary chunk for the Gram and projection accumulations.
        score_mode: "eval" (default; dropout off) or "train" (dropout on, the official scorer).
        sync_fifo: under an initialised ``torch.distributed``, all-gather every rank's picks into
            every rank's FIFO (default True: the novelty term sees the global history).

    Scoring math is batched over the candidates (:func:`~icml26.uds.scores.uds_terms`: padded,
    masked (B, N, chunk) blocks, no Python loop over candidates); the FJLT runs in the logits'
    dtype, the Gram in float32 products with float64 (N, N) sums.
    """

    def __init__(
        self,
        alpha: float = 2.5e-3,
        queue_size: int = 1024,
        r_time: int = 8,
        r_vocab: int = 128,
        max_len: int = 512,
        seed: int = 0,
        *,
        length_norm: str | None = None,
        use_intra: bool = True,
        use_inter: bool = True,
        chunk: int = DEFAULT_CHUNK,
        score_mode: str = "eval",
        sync_fifo: bool = True,
    ):
        self.score_mode = check_score_mode(score_mode)
        if not alpha >= 0:
            raise ValueError(f"alpha must be >= 0; got {alpha}")
        if length_norm not in (None, "tokens"):
            raise ValueError(f"length_norm must be None or 'tokens'; got {length_norm!r}")
        if not (use_intra or use_inter):
            raise ValueError("at least one of use_intra, use_inter must be True")
        self.alpha, self.max_len, self.seed = alpha, max_len, seed
        self.r_time, self.r_vocab, self.length_norm = r_time, r_vocab, length_norm
        self.use_intra, self.use_inter, self.chunk = use_intra, use_inter, chunk
        self.sync_fifo = sync_fifo
        self.fifo = EmbeddingFIFO(queue_size)
        self.projector: FJLTProjector | None = None
        self.stats = UDSStats()
        self._pending: list[torch.Tensor] = []

    def _projector(self, vocab: int, device) -> FJLTProjector:
        if self.projector is None:
            self.projector = FJLTProjector(
                vocab,
                self.max_len,
                min(self.r_time, self.max_len),
                min(self.r_vocab, vocab),
                seed=self.seed,
                device=device,
            )
        elif self.projector.vocab != vocab:
            raise ValueError(f"vocabulary changed from {self.projector.vocab} to {vocab}")
        return self.projector

    def terms(self, model, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(intra (B,), inter (B,), embeddings (B, r_time * r_vocab)); no state change."""
        logits, mask, _, _ = _forward(model, batch, need_hidden=False, score_mode=self.score_mode)
        intra, emb, lengths = self.terms_from_logits(logits, mask)
        inter = self.fifo.mean_distance(emb).cpu()
        self.stats.n_tokens += lengths.tolist()
        return intra, inter, emb

    def terms_from_logits(
        self, logits: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The batched math on a forward's (B, T, V) logits and its (B, T) scored-row mask
        (:func:`~icml26.uds.scores.uds_terms`: no loop over candidates): (intra (B,) float64 on
        CPU, embeddings (B, r_time * r_vocab), scored rows per candidate (B,) long)."""
        proj = self._projector(logits.shape[-1], logits.device)
        intra, emb, lengths = uds_terms(logits, mask, proj, self.chunk)
        intra = intra.cpu()
        if self.length_norm == "tokens":
            intra = intra / lengths.cpu().clamp_min(1)
        return intra, emb, lengths

    def scores(self, model, batch: dict) -> torch.Tensor:
        intra, inter, emb = self.terms(model, batch)
        self.stats.intra += intra.tolist()
        self.stats.inter += inter.tolist()
        self._pending.append(emb)
        s = torch.zeros_like(intra)
        if self.use_intra:
            s = s + intra
        if self.use_inter:
            s = s + self.alpha * inter if self.use_intra else s + inter
        return s

    def observe(self, chosen: torch.Tensor) -> None:
        """Push the chosen candidates' embeddings to the FIFO. Under an initialised
        ``torch.distributed`` (and ``sync_fifo``) every rank's picks are all-gathered first and
        pushed in rank order, so all ranks keep the same, global FIFO (a collective: every rank
        must call ``observe`` once per selection; a rank with nothing scored still takes part)."""
        if not self._pending:
            if self.sync_fifo and _distributed():
                items = self.fifo.items
                empty = torch.zeros((0, 0 if items is None else items.shape[1]),
                                    dtype=torch.float32 if items is None else items.dtype,
                                    device=None if items is None else items.device)
                got = all_gather_rows(empty)
                if got.shape[0]:
                    self.fifo.push(got)
            return
        emb = torch.cat(self._pending)
        self._pending = []
        picked = emb[chosen.to(emb.device)]
        self.fifo.push(all_gather_rows(picked) if self.sync_fifo else picked)


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def make_selector(
    name: str,
    *,
    seed: int = 0,
    max_len: int = 512,
    reference_model=None,
    score_mode: str = "eval",
    **uds_kwargs,
) -> Selector:
    """Factory: one of :data:`SELECTORS`; unknown names raise ValueError listing the choices.
    ``score_mode`` ("eval" | "train") goes to every selector that runs the model."""
    check_score_mode(score_mode)
    if name == "random":
        return RandomSelector(seed)
    if name == "maxloss":
        return MaxLossSelector(score_mode=score_mode)
    if name == "gradnorm":
        return GradNormSelector(score_mode=score_mode)
    if name == "rholoss":
        if reference_model is None:
            raise ValueError("selector 'rholoss' needs reference_model")
        return RHOLossSelector(reference_model, score_mode=score_mode)
    if name == "uds-lennorm":  # nuclear norm per scored token (not in the paper)
        uds_kwargs.setdefault("length_norm", "tokens")
        name = "uds"
    if name in ("uds", "uds-intra", "uds-inter"):
        return UDSSelector(
            max_len=max_len,
            seed=seed,
            use_intra=name != "uds-inter",
            use_inter=name != "uds-intra",
            score_mode=score_mode,
            **uds_kwargs,
        )
    raise ValueError(f"unknown selector {name!r}; choose one of {', '.join(SELECTORS)}")
