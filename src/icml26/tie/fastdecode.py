"""The length sampler's fast path: :func:`decode_static` on the shared engine.

:func:`icml26.tie.sampling.sample_lengths` needs many completions per prompt, decoded in a pool
of rows that refills as completions end, with its own draw (one ``torch.Generator`` for the run,
inverse-CDF or multinomial; see :class:`~icml26.tie.sampling.SampleConfig`). That loop is
:func:`icml26.core.generate.generate` (a preallocated per-row KV cache written in place,
continuous refill, repacking onto live rows once the queue is empty); this module adapts its
hooks to the sampler's callbacks: ``sample`` becomes the engine's ``sampler``, ``on_step`` its
``on_token`` and ``record`` its ``on_finish``. ``tests/tie/test_tie_sampling.py`` checks every
step's logits against an HF forward over the full prompt + sampled prefix, through refills.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["supports_fast", "decode_static"]


def supports_fast(model) -> bool:
    """True for HF causal LMs the shared engine runs (any model whose ``generate`` works with a
    standard attention cache: Llama / SmolLM2, Qwen2, Gemma3, tiny_llama); others use the slow
    path."""
    can = getattr(model, "can_generate", None)
    return getattr(model, "config", None) is not None and callable(can) and bool(can())


def decode_static(model, pad_id: int, jobs: list[tuple[str, list[int]]], *, batch_size: int, cap: int,
                  eos: set[int], sample: Callable[[torch.Tensor], torch.Tensor],
                  record: Callable[[str, int, bool], None], refill_at: int | None = None,
                  margin: int = 256, attention: str = "auto", on_step: Callable | None = None,
                  tick: Callable[[], None] | None = None) -> None:
    """Run every job ``(key, prompt_ids)`` to EOS or ``cap`` new tokens; ``record(key, length,
    censored)`` on each finish (length counts the EOS token; censored: stopped at ``cap`` or the
    model's context without EOS). Refill when at most ``refill_at`` slots are live (default
    ``batch_size - max(1, batch_size // 8)``). ``sample(logits (R, V)) -> (R,)`` draws the
    tokens. ``on_step(job_idx, logits, tokens)`` (testing) sees every sampled token with the
    logits it was drawn from and the index of its job in ``jobs``; ``tick()`` runs before every
    forward (checkpointing).

    ``pad_id``, ``margin`` and ``attention`` belonged to the former hand-written loop (left
    padding, column shifts, per-slot attention) and are accepted for compatibility; the engine
    needs none of them (``attention`` is still checked)."""
    if attention not in ("auto", "batched", "rows"):
        raise ValueError(f"attention must be 'auto', 'batched' or 'rows'; got {attention!r}")
    if not jobs:
        return
    from icml26.core.generate import generate

    B = batch_size
    refill_at = B - max(1, B // 8) if refill_at is None else refill_at
    keys = [k for k, _ in jobs]

    def on_token(rows, logits, toks):
        if on_step is not None:
            on_step(rows, logits, toks)

    generate(
        model, None, [list(ids) for _, ids in jobs], max_new_tokens=cap, eos_token_ids=eos,
        batch_size=B, refill_every=max(1, B - refill_at), sampler=lambda lg, rows: sample(lg),
        on_token=on_token, before_forward=(lambda rows: tick()) if tick is not None else None,
        on_finish=lambda i, g: record(keys[i], len(g.token_ids), g.finish_reason != "eos"),
    )
