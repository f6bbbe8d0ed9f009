"""Fast steered scoring of one-token multiple-choice answers on the prompt-prefix KV cache.

With a one-token answer (MMLU-style letters), CorrSteer's hook only ever touches the last prompt
position: the prefix ``ids[:-1]`` is the same for every steering system. :func:`score_item` runs
the prefix once, repeats its KV cache over a batch of systems, and forwards only the last token,
with row ``b`` steered by ``deltas[L][b]``; the prediction is the arg-max over the item's letter
tokens (a logits processor restricting the answer to valid letters). Residuals entering the
requested layers at that position are returned for the correlation stage.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch

from icml26.core.errors import UserError
from icml26.core.hfcache import cache_kw, output_cache
from icml26.corrsteer.steer import Steerer
from icml26.corrsteer.train import blocks

__all__ = ["letter_token_ids", "answer_groups", "grouped_logits", "predict", "encode_items", "score_item",
           "full_forward_logits"]

#: first-token texts (stripped) that parse as letter K, as ``str.format`` patterns
PARSE_FORMS = ("{}", "{}.", "{})", "({}", "({})", "{}:")


def letter_token_ids(tok, n: int) -> list[int]:
    """Token ids of ``" A"``, ``" B"``, … (the answer after ``Answer:``); each must be one token."""
    from icml26.core.mcq import LETTERS

    out = []
    for i in range(n):
        ids = tok(" " + LETTERS[i], add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise UserError(f"the tokenizer splits ' {LETTERS[i]}' into {len(ids)} tokens; "
                            "one-token letter answers are needed")
        out.append(ids[0])
    return out


def answer_groups(tok, n: int) -> torch.Tensor:
    """For the unrestricted first token (the official default): ``(V,)`` long, the letter index
    ``k < n`` a vocabulary token parses to (its text, stripped, is ``K``, ``K.``, ``K)``, ``(K``,
    ``(K)`` or ``K:``, upper case), else ``n`` (no letter: an EOS, a word, a newline, …)."""
    from icml26.core.mcq import LETTERS

    forms = {f.format(LETTERS[k]): k for k in range(n) for f in PARSE_FORMS}
    size = max(len(tok), int(getattr(tok, "vocab_size", 0) or 0))
    groups = torch.full((size,), n, dtype=torch.long)
    for t in range(len(tok)):
        k = forms.get(tok.decode([t]).strip())
        if k is not None:
            groups[t] = k
    if not all((groups == k).any() for k in range(n)):
        raise UserError(f"the tokenizer has no token for some of the letters A..{LETTERS[n - 1]}")
    return groups


def grouped_logits(logits: torch.Tensor, groups: torch.Tensor, n: int) -> torch.Tensor:
    """``(B, V)`` logits -> ``(B, n + 1)``: the best logit of the tokens that parse to each letter,
    then the best of all other tokens (column ``n``). Vocabulary rows beyond ``groups`` (padding
    rows of an LM head) count as "other"."""
    V = logits.shape[-1]
    g = groups[:V].to(logits.device) if groups.numel() >= V else torch.cat(
        [groups.to(logits.device), torch.full((V - groups.numel(),), n, dtype=torch.long, device=logits.device)])
    out = torch.full((logits.shape[0], n + 1), float("-inf"), dtype=logits.dtype, device=logits.device)
    return out.scatter_reduce(1, g.expand(logits.shape[0], V), logits, reduce="amax", include_self=True)


def predict(logits: torch.Tensor, n_choices: int, unrestricted: bool) -> np.ndarray:
    """Predicted letter index per row, ``-1`` for "no letter".

    Restricted (``select_token=1``): arg-max over the item's ``n_choices`` letter columns. Unrestricted
    (``select_token=0``, ``logits`` from :func:`grouped_logits`): arg-max over the item's letters and
    one "other" column that folds every other token, letters past the item's choices included.
    """
    if not unrestricted:
        return logits[:, :n_choices].argmax(-1).cpu().numpy()
    other = logits[:, n_choices:].max(-1, keepdim=True).values
    pred = torch.cat([logits[:, :n_choices], other], dim=-1).argmax(-1).cpu().numpy()
    return np.where(pred == n_choices, -1, pred)


def encode_items(tok, items) -> list[torch.Tensor]:
    """Letter prompts (:func:`icml26.core.mcq.letter_prompt`) as 1-D LongTensors."""
    from icml26.core.mcq import letter_prompt

    return [torch.tensor(tok(letter_prompt(it))["input_ids"], dtype=torch.long) for it in items]


@torch.no_grad()
def score_item(model, ids: torch.Tensor, letters: Sequence[int],
               deltas: dict[int, torch.Tensor] | None = None, n_rows: int = 1,
               capture: Sequence[int] = (), prefix_cache=None, return_cache: bool = False,
               groups: torch.Tensor | None = None):
    """Letter logits of one prompt under ``n_rows`` steering systems.

    ``ids`` ``(T,)``; ``deltas`` ``{layer: (n_rows, d)}`` added at the last position (row b to
    system b; zero rows are unsteered). Returns ``(logits (n_rows, len(letters)) float32,
    {L: (d,) float32 residual entering block L at the last position, unsteered row 0})`` —
    ``capture`` layers are read before any steering of the same layer is added. With ``groups``
    (:func:`answer_groups`, the unrestricted first token) the logits are
    :func:`grouped_logits`, ``(n_rows, len(letters) + 1)``.

    ``prefix_cache``: the KV cache of ``ids[:-1]`` from an earlier call with ``return_cache=True``
    (then a third value); it is copied, never modified, so one prefix serves many calls.
    """
    if ids.ndim != 1 or ids.numel() < 2:
        raise UserError(f"a prompt needs at least 2 tokens; got shape {tuple(ids.shape)}")
    device = next(model.parameters()).device
    ids = ids.to(device)
    if prefix_cache is None:
        out = model(input_ids=ids[None, :-1], use_cache=True, **_keep_last(model))
        prefix_cache = output_cache(out)
        kept = copy.deepcopy(prefix_cache) if return_cache else None
        cache = prefix_cache
    else:
        kept = prefix_cache
        cache = copy.deepcopy(prefix_cache)
    if n_rows > 1:
        cache.batch_repeat_interleave(n_rows)
    got: dict[int, torch.Tensor] = {}
    mods = blocks(model)

    def cap(L):
        def hook(module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            got[L] = h[0, -1].float().cpu()
        return hook

    handles = [mods[L].register_forward_pre_hook(cap(L), with_kwargs=True) for L in capture]
    try:
        # Capture hooks are registered first, so they see the residual before steering.
        with Steerer(model, deltas or {}):
            logits = model(input_ids=ids[-1:].expand(n_rows, 1), use_cache=True,
                           **cache_kw(model, cache)).logits[:, -1]
    finally:
        for h in handles:
            h.remove()
    res = (logits[:, list(letters)] if groups is None else grouped_logits(logits, groups, len(letters))).float().cpu()
    return (res, got, kept) if return_cache else (res, got)


def _keep_last(model) -> dict:
    # The prefix's logits are never read: ask for the last position's only (saves the LM head
    # over the whole prompt, ~20% of a SmolLM2 forward) where the model supports it.
    import inspect

    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


@torch.no_grad()
def full_forward_logits(model, ids: torch.Tensor, letters: Sequence[int],
                        deltas: dict[int, torch.Tensor] | None = None,
                        groups: torch.Tensor | None = None) -> torch.Tensor:
    """Reference for :func:`score_item`: the whole prompt forwarded once per system, no cache."""
    device = next(model.parameters()).device
    n = 1 if not deltas else next(iter(deltas.values())).shape[0] if next(iter(deltas.values())).ndim == 2 else 1
    with Steerer(model, deltas or {}):
        logits = model(input_ids=ids.to(device)[None].expand(n, -1), use_cache=False).logits[:, -1]
    return (logits[:, list(letters)] if groups is None else grouped_logits(logits, groups, len(letters))).float().cpu()
