"""HF-``generate``-style entry: ``echo_generate(model, input_ids, assistant_model=draft, ...)``.

Mirrors ``model.generate(input_ids, assistant_model=draft, do_sample=False, max_new_tokens=...)``:
the same arguments where they apply, a ``(B, prompt + new)`` LongTensor back (rows that stop early
are right-padded with ``pad_token_id``, as HF does), and with greedy decoding the same tokens as
``model.generate(..., do_sample=False)`` (up to floating-point near-ties in low precision).
Left-padded batches are accepted through ``attention_mask``; each row is decoded without its
padding. Drafting and verification run :class:`~icml26.echo.decode.SpeculativeDecoder` with an
ECHO policy under one batch budget ``k_max``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from icml26.echo.decode import GenerateOutput, SpeculativeDecoder
from icml26.echo.policies import Echo, Policy

__all__ = ["echo_generate", "check_tokenizers", "DEFAULT_POLICY"]

#: a moderate tree for interactive use (the claim calibrates its gates instead)
DEFAULT_POLICY = Echo(gate_depths=(2, 4), taus=(0.3, 0.5), depth=6, topk=4, total=24)


def _name(obj) -> str:
    return str(getattr(obj, "name_or_path", "") or type(obj).__name__)


def check_tokenizers(target_tokenizer, draft_tokenizer) -> None:
    """ValueError naming both tokenizers unless they map the same strings to the same ids
    (speculative decoding compares token ids: a draft must share the target's vocabulary)."""
    a, b = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if a != b:
        only_a = len(set(a.items()) - set(b.items()))
        only_b = len(set(b.items()) - set(a.items()))
        raise ValueError(
            f"draft tokenizer {_name(draft_tokenizer)!r} differs from the target tokenizer "
            f"{_name(target_tokenizer)!r} ({len(b)} vs {len(a)} entries; {only_b} draft and {only_a} target "
            "(token, id) pairs have no match): speculative decoding needs one shared vocabulary")


def _eos_set(model, eos_token_id) -> set[int] | None:
    if eos_token_id is None:
        eos_token_id = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos_token_id is None:
        return None
    return {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(x) for x in eos_token_id}


def _tensor(x) -> torch.Tensor:
    """``x`` as a tensor, a tensor left on its device (``torch.as_tensor`` would move it to the
    default device inside a ``torch.device`` context)."""
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x)


@torch.no_grad()
def echo_generate(model, input_ids: torch.Tensor, assistant_model=None, *, attention_mask: torch.Tensor | None = None,
                  max_new_tokens: int = 20, do_sample: bool = False, eos_token_id: int | Iterable[int] | None = None,
                  pad_token_id: int | None = None, policy: Policy | None = None, k_max: int | None = None,
                  exit_layer: int | None = None, tokenizer=None, assistant_tokenizer=None,
                  return_dict_in_generate: bool = False):
    """Greedy speculative generation with ECHO trees, called like HF ``generate``.

    input_ids : (B, T) int64, left-padded when ``attention_mask`` (B, T) marks padding with 0.
    assistant_model : the draft (an HF causal LM sharing the tokenizer); ``None`` with
        ``exit_layer=l`` drafts with the target's first ``l`` layers (self-draft).
    policy : default :data:`DEFAULT_POLICY`. k_max : batch verification budget (tokens, roots
        included); default ``B * (policy.total + 1)`` (no cross-request pressure).
    tokenizer, assistant_tokenizer : when both are given they are checked with
        :func:`check_tokenizers`.
    Returns ``(B, T + N)`` int64 on ``input_ids``' device (``N`` the longest row's new tokens), or, with
    ``return_dict_in_generate``, ``{"sequences": ..., "stats": GenerateOutput}`` (per-step log).
    """
    if do_sample:
        raise NotImplementedError("echo_generate implements greedy decoding only (do_sample=False)")
    if tokenizer is not None and assistant_tokenizer is not None:
        check_tokenizers(tokenizer, assistant_tokenizer)
    if assistant_model is None and exit_layer is None:
        raise ValueError("pass assistant_model=<draft model> or exit_layer=<l> (self-draft)")
    ids = _tensor(input_ids)
    if ids.dim() != 2:
        raise ValueError(f"input_ids must have shape (B, T); got {tuple(ids.shape)}")
    mask = torch.ones_like(ids, dtype=torch.bool) if attention_mask is None else _tensor(attention_mask).bool()
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask shape {tuple(mask.shape)} differs from input_ids {tuple(ids.shape)}")
    prompts = []
    for r in range(ids.shape[0]):
        keep = mask[r].nonzero().flatten()
        if keep.numel() == 0:
            raise ValueError(f"row {r} of attention_mask is all padding")
        if not bool(mask[r, int(keep[0]):].all()):
            raise ValueError(f"row {r}: echo_generate needs left padding (attention_mask 0s before the 1s)")
        prompts.append(ids[r, int(keep[0]):].tolist())
    policy = policy or DEFAULT_POLICY
    b = len(prompts)
    k_max = k_max or b * (getattr(policy, "total", 60) + 1)
    draft = assistant_model if assistant_model is not None else int(exit_layer)
    dec = SpeculativeDecoder(model, draft, policy, k_max, bucket=1)
    eos = _eos_set(model, eos_token_id)
    out: GenerateOutput = dec.generate(prompts, max_new_tokens, batch_size=b, eos_token_id=eos)
    if pad_token_id is None:
        pad_token_id = getattr(getattr(model, "generation_config", None), "pad_token_id", None)
        pad_token_id = pad_token_id if pad_token_id is not None else (min(eos) if eos else 0)
    n = max(len(t) for t in out.tokens)
    rows = [list(t) + [int(pad_token_id)] * (n - len(t)) for t in out.tokens]
    new = torch.tensor(rows, dtype=ids.dtype, device=ids.device)  # beside input_ids (GPU ids)
    seq = torch.cat([ids, new], 1)
    return {"sequences": seq, "stats": out} if return_dict_in_generate else seq
