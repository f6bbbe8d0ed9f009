"""Sparse decoding on a real model: perplexity of a continuation and passkey retrieval.

Both share one dense prefill per context across every method (as the claim's recall grid does):
the prefill's HF cache is kept, and each method continues from it

- perplexity: :func:`patch.sparse_replay` scores the whole continuation in one forward with a
  per-query selection (proven equal to step-by-step decode in the tests);
- passkey: :func:`patch.prime` builds a ``BinaryPCCache`` sharing the prefill's K/V with the
  codes the patched model's own prefill would have built (tested equal), then greedy decoding
  runs step by step through the patch on that cache, exactly as ``model.generate`` does with
  :func:`apply_binarypc`.

The dense prefill's cache is never changed by a sparse method (its K/V are shared, decoding
appends by concatenation); the dense arm crops it back after use.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from icml26.binarypc.methods import BinaryPCConfig
from icml26.binarypc.patch import apply_binarypc, prime, remove_binarypc, sparse_replay
from icml26.core.hfcache import cache_kw, output_cache
from icml26.core.torchutil import model_device

__all__ = ["perplexity_study", "passkey_prompt", "passkey_reserve", "passkey_study"]

PASSKEY_INTRO = (
    "There is a pass key hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the pass key.\n\n"
)
PASSKEY_QUESTION = "\n\nWhat is the pass key? The pass key is"


def _crop(past, n: int) -> None:
    extra = past.get_seq_length() - n
    if extra > 0:
        past.crop(-extra)


def _nll(logits: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    lp = torch.log_softmax(logits.double(), -1)
    return (-lp.gather(-1, targets.to(lp.device)[:, None]).squeeze(-1)).cpu().numpy()



@torch.no_grad()
def perplexity_study(model, sequences, prefix: int, variants: dict, progress=None) -> dict:
    """Per-token NLL of each sequence's continuation under dense and sparse decode.

    sequences: LongTensors of prefix + n + 1 tokens. The first ``prefix`` tokens are prefilled
    densely; the next n are decode steps (every query sparse, teacher-forced), each predicting the
    token after it. variants: label -> BinaryPCConfig. Returns label -> NLL array (all sequences
    concatenated), with "Dense" first.
    """
    out: dict[str, list] = {"Dense": []}
    for ids in sequences:
        ids = ids.reshape(1, -1).to(model_device(model))
        cont, tgt = ids[:, prefix:-1], ids[0, prefix + 1 :]
        past = output_cache(model(input_ids=ids[:, :prefix], use_cache=True))
        dense = model(input_ids=cont, **cache_kw(model, past), use_cache=True).logits[0]
        _crop(past, prefix)
        out["Dense"].append(_nll(dense, tgt))
        for label, cfg in variants.items():
            apply_binarypc(model, cfg)
            try:
                logits = sparse_replay(model, cont, prefix, past=past)[0]
            finally:
                remove_binarypc(model)
            out.setdefault(label, []).append(_nll(logits, tgt))
            if progress is not None:
                progress(1)
        del past
    return {k: np.concatenate(v) for k, v in out.items()}


def passkey_prompt(tok, filler: torch.Tensor, length: int, depth: float, key: str) -> list[int]:
    """Token ids of exactly ``length`` tokens: intro, filler with the needle at ``depth``, then the
    question ending in "The pass key is" (the answer is the next tokens)."""
    enc = lambda s: tok(s, add_special_tokens=False).input_ids  # noqa: E731
    intro = enc(PASSKEY_INTRO)
    needle = enc(f"\nThe pass key is {key}. Remember it. {key} is the pass key.\n")
    question = enc(PASSKEY_QUESTION)
    n_fill = length - len(intro) - len(needle) - len(question)
    if n_fill < 1 or filler.numel() < n_fill:
        raise ValueError(f"passkey length {length} needs {n_fill} filler tokens")
    f = filler[:n_fill].tolist()
    at = int(depth * n_fill)
    return intro + f[:at] + needle + f[at:] + question


def _greedy(model, past, first_logits, n: int) -> list[int]:
    toks, nxt = [], int(first_logits.argmax())
    device = model_device(model)
    for _ in range(n):
        toks.append(nxt)
        out = model(input_ids=torch.tensor([[nxt]], device=device), **cache_kw(model, past),
                    use_cache=True)
        nxt = int(out.logits[0, -1].argmax())
    return toks


@torch.no_grad()
def passkey_study(
    model,
    tok,
    filler: torch.Tensor,
    lengths,
    trials,
    variants: dict,
    depths=(0.1, 0.3, 0.5, 0.7, 0.9),
    seed: int = 0,
    max_new: int = 8,
    progress=None,
) -> list[dict]:
    """Passkey retrieval with dense and sparse decode from one shared dense prefill per trial.

    A trial of length L is a prompt of L - :func:`passkey_reserve` tokens, so the prompt, the
    greedy answer and the key replay all fit in L positions (L may equal the model's limit).
    Returns one dict per (length, trial, method): exact match (the key appears in the greedy
    answer), key log-likelihood (sum over the key's tokens, teacher-forced: the first from the
    dense prefill, the rest from sparse decode queries), depth and the answer text.
    """
    rng = random.Random(seed)
    recs = []
    for L, n in zip(lengths, trials, strict=True):
        for i in range(n):
            depth = depths[i % len(depths)]
            key = str(rng.randint(10000, 99999))
            key_ids = tok(" " + key, add_special_tokens=False).input_ids
            kt = torch.tensor([key_ids], device=model_device(model))
            # The whole trial fits in L positions: prompt + the greedy answer (max_new forwards)
            # and the teacher-forced key replay (len(key) - 1 tokens) both stay below L.
            P = L - passkey_reserve(max_new, len(key_ids))
            start = (i * 1009) % max(1, filler.numel() - P)
            ids = passkey_prompt(tok, filler[start:], P, depth, key)
            out = model(input_ids=torch.tensor([ids], device=model_device(model)), use_cache=True)
            past, last = output_cache(out), out.logits[0, -1]
            lp0 = float(torch.log_softmax(last.double(), -1)[key_ids[0]])
            for label, cfg in {"Dense": None, **variants}.items():
                if cfg is not None:
                    apply_binarypc(model, cfg)
                try:
                    cache = past if cfg is None else prime(model, past)
                    toks = _greedy(model, cache, last, max_new)
                    del cache
                    _crop(past, P)
                    if len(key_ids) > 1:
                        if cfg is None:
                            logits = model(
                                input_ids=kt[:, :-1], **cache_kw(model, past), use_cache=True
                            ).logits
                            _crop(past, P)
                        else:
                            logits = sparse_replay(model, kt[:, :-1], P, past=past)
                        rest = -_nll(logits[0], kt[0, 1:]).sum()
                    else:
                        rest = 0.0
                finally:
                    if cfg is not None:
                        remove_binarypc(model)
                answer = tok.decode(toks)
                recs.append(
                    {
                        "length": L,
                        "trial": i,
                        "depth": depth,
                        "method": label,
                        "exact": key in answer,
                        "key_loglik": lp0 + float(rest),
                        "answer": answer,
                    }
                )
            del past
            if progress is not None:
                progress(1)
    return recs


def passkey_reserve(max_new: int, key_tokens: int) -> int:
    """Positions a passkey trial of length L keeps free after its prompt of L - reserve tokens:
    the greedy answer feeds ``max_new`` tokens, the key replay ``key_tokens - 1``."""
    return max(max_new, key_tokens - 1)


def passkey_config(frac: float, **over) -> BinaryPCConfig:
    """The decode config of a passkey / perplexity variant at budget ``frac``."""
    return BinaryPCConfig(mask_out=1.0 - frac, min_remain=128, **over)
