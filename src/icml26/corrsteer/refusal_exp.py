"""CorrSteer's refusal task (HarmBench): correlate with a refusal reward, steer, count refusals.

Per behaviour, the model answers one chat turn greedily for ``max_new_tokens`` (24) tokens; the
reward is :func:`icml26.corrsteer.refusal.is_refusal` of the completion. Generation steers the
last position of each forward call (the last prompt token, then each new token), as
:class:`~icml26.corrsteer.steer.Steerer` does inside ``generate``; :func:`generate_rows` runs the
prompt prefix ``ids[:-1]`` once (steering never touches it), repeats its KV cache over a batch of
steering systems, and decodes all of them together (row ``b`` gets ``deltas[L][b]``).

Per split seed (:func:`~icml26.corrsteer.refusal.refusal_split`, 30/70 of the 200 behaviours):

- the unsteered completions of the train behaviours give the rewards and the max-pooled SAE codes
  (and raw residuals for raw mode) over the generated tokens up to EOS;
- S/A/P and raw-mode P are selected; the P gate and the CAA strength use the *train* behaviours
  (HarmBench's split has two parts; with a near-constant reward a held-out third would hold no
  refusal at all), so the gate is in-sample (documented);
- every system then answers the 140 test behaviours (refusal rate, higher is better) and the
  benign Wikipedia questions (over-refusal rate, lower is better).

All-0 or all-1 training rewards make correlations undefined (:func:`check_rewards`'s error giving
the base rate); :func:`refusal_seed` then returns a ``degenerate`` record with the unsteered rates
only, which the claim reports instead of crashing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from icml26.core.errors import UserError
from icml26.corrsteer.correlate import CorrelationAccumulator, check_rewards
from icml26.corrsteer.experiment import baseline_systems
from icml26.corrsteer.refusal import chat_prompt, is_refusal, refusal_split
from icml26.corrsteer.steer import Feature, Steerer, select, side_effect_ratio, steering_deltas
from icml26.corrsteer.train import blocks

__all__ = ["generate_rows", "encode_prompts", "UnsteeredPass", "unsteered_generations", "refusal_seed",
           "system_rates", "paired_rows"]


def _eos_ids(model, tok) -> set[int]:
    ids = set()
    for e in (tok.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if isinstance(e, int):
            ids.add(e)
        elif e is not None:
            ids.update(int(x) for x in e)
    return ids


def encode_prompts(tok, texts: Sequence[str]) -> list[torch.Tensor]:
    """Each text as one chat turn (generation prompt on), as a 1-D LongTensor."""
    return [torch.tensor(tok(chat_prompt(tok, t), add_special_tokens=False)["input_ids"], dtype=torch.long)
            for t in texts]


@torch.no_grad()
def generate_rows(model, ids: torch.Tensor, deltas: dict[int, torch.Tensor] | None = None, n_rows: int = 1,
                  max_new_tokens: int = 24, eos: set[int] | frozenset = frozenset(),
                  capture: Sequence[int] = ()) -> tuple[list[list[int]], dict[int, torch.Tensor]]:
    """Greedy completions of one prompt under ``n_rows`` steering systems.

    ``deltas`` ``{layer: (n_rows, d)}`` (or ``(d,)`` for all rows) is added at the last position of
    every forward call from the last prompt token on. Returns ``(tokens, steps)``: per row the
    generated ids through the first EOS (inclusive), and ``{L: (S, d) float32}`` residuals entering
    block ``L`` of row 0 at each of the ``S`` forwards that produced a kept token of row 0 (read
    before any steering of that layer).

    Decoding is :func:`icml26.core.generate.generate` with ``ids[:-1]`` as a shared prefix
    (prefilled once, unsteered) and the last prompt token as each row's prompt; before every
    forward the steering vectors are re-indexed to the rows the batch holds.
    """
    from icml26.core.generate import generate

    if ids.ndim != 1 or ids.numel() < 2:
        raise UserError(f"a prompt needs at least 2 tokens; got shape {tuple(ids.shape)}")
    if max_new_tokens < 1:
        raise UserError(f"max_new_tokens must be >= 1; got {max_new_tokens}")
    full = dict(deltas or {})
    steerer = Steerer(model, full)  # validates layers, sizes and finiteness
    rows: list[int] = []

    def per_row(v: torch.Tensor) -> torch.Tensor:  # (B, d): a zero vector for rows of no system
        zero = torch.zeros(v.shape[-1], dtype=v.dtype, device=v.device)
        return torch.stack([(v if v.ndim == 1 else v[r]) if r >= 0 else zero for r in rows])

    def before(batch_rows: list[int]) -> None:
        rows[:] = batch_rows
        steerer.deltas = {L: per_row(v) for L, v in full.items()}

    mods = blocks(model)
    got: dict[int, list[torch.Tensor]] = {L: [] for L in capture}

    def cap(L):
        def hook(module, args, kwargs):
            if 0 in rows:
                h = args[0] if args else kwargs["hidden_states"]
                got[L].append(h[rows.index(0), -1].float().cpu())
        return hook

    handles = [mods[L].register_forward_pre_hook(cap(L), with_kwargs=True) for L in capture]
    ids = [int(t) for t in ids.tolist()]
    try:
        with steerer:
            out = generate(model, None, [ids[-1:]] * n_rows, max_new_tokens=max_new_tokens,
                           prefix=ids[:-1], eos_token_ids=eos, batch_size=n_rows,
                           before_forward=before)
    finally:
        for h in handles:
            h.remove()
    toks = [g.token_ids for g in out]
    steps = {L: torch.stack(v[:len(toks[0])]) for L, v in got.items()}
    return toks, steps


def _text(tok, tokens: list[int], eos) -> str:
    return tok.decode([t for t in tokens if t not in eos], skip_special_tokens=True)


class UnsteeredPass:
    """Unsteered completions of a prompt set: ``texts``, ``refused`` ``(n,)`` bool, and per layer
    ``pooled`` ``{L: (n, d)}`` max-pooled residuals over the kept generation steps (only when
    layers were asked for)."""

    def __init__(self, texts, refused, pooled, steps=None):
        self.texts, self.refused, self.pooled, self.steps = texts, refused, pooled, steps


def unsteered_generations(model, tok, ids: list[torch.Tensor], layers: Sequence[int] = (), *,
                          max_new_tokens: int = 24, progress=None, desc: str = "unsteered") -> UnsteeredPass:
    eos = _eos_ids(model, tok)
    texts, steps = [], []
    it = range(len(ids)) if progress is None else progress.track(range(len(ids)), len(ids), desc)
    for i in it:
        toks, st = generate_rows(model, ids[i], max_new_tokens=max_new_tokens, eos=eos, capture=layers)
        texts.append(_text(tok, toks[0], eos))
        steps.append(st)
    pooled = {L: torch.stack([s[L].amax(0) for s in steps]) for L in layers}
    return UnsteeredPass(texts, np.array([is_refusal(t) for t in texts]), pooled, steps if layers else None)


def system_rates(model, tok, ids: list[torch.Tensor], idx, systems: list[list[Feature]], *,
                 max_new_tokens: int = 24, progress=None, desc: str = "steered",
                 keep_texts: int = 0) -> tuple[np.ndarray, list[list[str]]]:
    """Refusal ``(n_systems, len(idx))`` bool of each feature list on prompts ``idx`` (all systems
    of a prompt decoded in one batch), and the first ``keep_texts`` completions per system."""
    d = model.config.hidden_size
    per = [steering_deltas(s) for s in systems]
    layers = sorted({L for p in per for L in p})
    deltas = {L: torch.stack([p.get(L, torch.zeros(d, dtype=torch.float64)) for p in per]) for L in layers}
    eos = _eos_ids(model, tok)
    out = np.zeros((len(systems), len(idx)), dtype=bool)
    texts: list[list[str]] = [[] for _ in systems]
    it = list(enumerate(idx))
    it = it if progress is None else progress.track(it, len(it), desc)
    for j, i in it:
        toks, _ = generate_rows(model, ids[int(i)], deltas, n_rows=len(systems), max_new_tokens=max_new_tokens,
                                eos=eos)
        for b in range(len(systems)):
            t = _text(tok, toks[b], eos)
            out[b, j] = is_refusal(t)
            if j < keep_texts:
                texts[b].append(t)
    return out, texts


def _encode_steps(sae, steps: dict, layers) -> dict[int, torch.Tensor]:
    """Max over kept steps of the SAE codes (encode each step, then pool), per prompt."""
    with torch.no_grad():
        return {L: torch.stack([sae[L].encode(s[L]).float().amax(0) for s in steps]) for L in layers}


def refusal_seed(model, tok, saes: dict, harm_ids: list[torch.Tensor], base: UnsteeredPass,
                 benign_ids: list[torch.Tensor], seed: int, *, n_random: int = 5,
                 caa_strengths=(0.25, 0.5, 1.0, 2.0), max_new_tokens: int = 24, coef_mode: str = "mean",
                 benign_base: np.ndarray | None = None, progress=None) -> dict:
    """All systems for one split seed; ``base`` is the unsteered pass over every behaviour (with
    ``steps`` at the SAE layers). Returns per-system test refusals ``test`` ``(n_sys, n_test)`` and
    benign refusals ``benign`` ``(n_sys, n_benign)``, or a ``degenerate`` record (unsteered only)."""
    tr, te = refusal_split(len(harm_ids), seed)
    y = base.refused[tr].astype(float)
    layers = sorted(saes)
    rec = {"seed": seed, "test_idx": te, "base_train_refusal": float(y.mean()),
           "n_train_refused": int(y.sum()), "n_train": len(tr)}
    try:
        check_rewards(y)
    except UserError as exc:
        rec.update(degenerate=str(exc), names=["unsteered"], test=base.refused[te][None],
                   benign=None if benign_base is None else np.asarray(benign_base, bool)[None],
                   features={"unsteered": []}, top_r={}, ser={})
        return rec
    steps = [base.steps[int(i)] for i in tr]
    codes = _encode_steps(saes, steps, layers)
    resid = {L: torch.stack([s[L].amax(0) for s in steps]) for L in layers}
    accs = {L: CorrelationAccumulator(c.shape[1]).update(c, y) for L, c in codes.items()}
    raw_accs = {L: CorrelationAccumulator(c.shape[1]).update(c, y) for L, c in resid.items()}
    w_dec = {L: saes[L].W_dec.detach() for L in layers}

    def validate(systems):  # in-sample gate: refusal rate on the train behaviours
        r, _ = system_rates(model, tok, harm_ids, tr, systems, max_new_tokens=max_new_tokens,
                            progress=progress, desc=f"validate (seed {seed})")
        return r.mean(1).tolist()

    sys_s, _ = select(accs, "S", w_dec, coef_mode=coef_mode)
    sys_a, _ = select(accs, "A", w_dec, coef_mode=coef_mode)
    sys_p, info_p = select(accs, "P", w_dec, validate=validate, coef_mode=coef_mode)
    sys_raw, info_raw = select(raw_accs, "P", {L: None for L in layers}, validate=validate,
                               coef_mode=coef_mode, source="raw")
    caa_sys, caa_strength, caa_val, randoms = baseline_systems(
        resid, y, sys_s, sys_p, codes, w_dec, validate, caa_strengths, n_random, seed)
    names = ["unsteered", "CorrSteer-S", "CorrSteer-A", "CorrSteer-P", "raw-mode P",
             "mean-difference (CAA)"] + [f"random feature #{k + 1}" for k in range(n_random)]
    systems = [[], sys_s, sys_a, sys_p, sys_raw, caa_sys] + randoms
    test, texts = system_rates(model, tok, harm_ids, te, systems, max_new_tokens=max_new_tokens,
                               progress=progress, desc=f"test (seed {seed})", keep_texts=3)
    benign, _ = system_rates(model, tok, benign_ids, range(len(benign_ids)), systems,
                             max_new_tokens=max_new_tokens, progress=progress, desc=f"benign (seed {seed})")
    rec.update({
        "names": names, "test": test, "benign": benign, "examples": dict(zip(names, texts, strict=True)),
        "features": {n: [f.to_dict() for f in s] for n, s in zip(names, systems, strict=True)},
        "p_info": info_p, "raw_info": info_raw, "caa_strength": caa_strength, "caa_val": caa_val,
        "top_r": {L: np.sort(np.abs(a.corr()))[::-1][:10].tolist() for L, a in accs.items()},
        "ser": {n: side_effect_ratio(test[0], test[k]) for k, n in enumerate(names)},
    })
    return rec


def paired_rows(runs: list[dict], name: str, ci_fn, key: str = "test") -> list[dict]:
    """Table rows of one part from per-seed records: rate of each system over ``key``'s pairs
    (refusals), Δ vs unsteered (pp, mean over seeds), paired CI (``ci_fn(diff) -> (lo, hi)``),
    better/worse counts and SER. Degenerate seeds give the unsteered row only; if every seed is
    degenerate, only the unsteered row is returned."""
    good = [r for r in runs if not r.get("degenerate")]
    use = good or runs
    names = use[0]["names"]
    rows = []
    for k, n in enumerate(names):
        per = [100 * float(r[key][k].mean() - r[key][0].mean()) for r in use]
        diff = np.concatenate([r[key][k].astype(float) - r[key][0] for r in use])
        better = int(sum((r[key][k] > r[key][0]).sum() for r in use))
        worse = int(sum((r[key][k] < r[key][0]).sum() for r in use))
        ci = ci_fn(diff) if k else (0.0, 0.0)
        rows.append({
            "task": name, "system": n,
            "test acc %": round(100 * float(np.mean([r[key][k].mean() for r in use])), 2),
            "Δacc pp": round(float(np.mean(per)), 2),
            "Δ min/max over seeds": f"{min(per):+.2f} / {max(per):+.2f}",
            "Δ 95% CI": f"[{ci[0]:+.2f}, {ci[1]:+.2f}]",
            "better/worse": f"{better}/{worse}",
            "SER": None if better + worse == 0 else round(worse / (better + worse), 3),
            "features": "; ".join(
                "|".join(f"L{f['layer']}#{f['index']}({f['r']:+.2f})" for f in r["features"][n]) or "—"
                for r in use),
        })
    return rows
