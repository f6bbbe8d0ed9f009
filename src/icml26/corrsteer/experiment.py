"""The multiple-choice CorrSteer experiment: correlate on train, select on validation, test.

One unsteered pass over all items records letter logits and the residual entering each layer at
the last prompt position (the only position a one-token answer is generated from). Then, per
split seed, the train items feed :class:`CorrelationAccumulator` s (SAE codes, and raw residual
dims for the raw-mode ablation); selections S/A/P are built; baselines get the same items:
a mean-difference (CAA) vector at P's layers with strength picked on validation, and random
alive features at the same layers with the same steering norm. Every system is scored on the
held-out test items in one batch per item (:func:`score_item`), so all systems see identical
prefixes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from icml26.core.errors import UserError
from icml26.corrsteer.correlate import CorrelationAccumulator, check_rewards
from icml26.corrsteer.mcqsteer import (
    answer_groups,
    encode_items,
    letter_token_ids,
    predict,
    score_item,
)
from icml26.corrsteer.steer import Feature, select, side_effect_ratio, steering_deltas

__all__ = ["Splits", "ItemPass", "unsteered_pass", "score_systems", "run_seed", "sft_baseline",
           "CONTROL_NAME"]

#: the positive control's row name (CAA direction at the train residual's own norm)
CONTROL_NAME = "CAA at residual-norm strength (positive control)"


@dataclass(frozen=True)
class Splits:
    n_train: int
    n_val: int
    n_test: int

    def __post_init__(self):
        if min(self.n_train, self.n_val, self.n_test) < 2:
            raise UserError(f"each split needs >= 2 items; got {self}")

    def make(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        need = self.n_train + self.n_val + self.n_test
        if n < need:
            raise UserError(f"{n} items, fewer than train+val+test = {need}")
        p = np.random.default_rng(seed).permutation(n)
        return p[:self.n_train], p[self.n_train:self.n_train + self.n_val], \
            p[self.n_train + self.n_val:need]


@dataclass
class ItemPass:
    """Unsteered results for every item: ``correct`` ``(n,)`` bool, ``resid`` ``{L: (n, d)}``.

    ``groups``: :func:`icml26.corrsteer.mcqsteer.answer_groups` when the answer is the unrestricted
    first token (``select_token=0``, the official default), ``None`` when restricted to the letters.
    """

    items: list
    ids: list
    letters: list
    correct: np.ndarray
    resid: dict[int, torch.Tensor] = field(default_factory=dict)
    caches: list | None = None
    groups: torch.Tensor | None = None

    @property
    def unrestricted(self) -> bool:
        return self.groups is not None


def _pred(logits: torch.Tensor, item, unrestricted: bool) -> np.ndarray:
    return predict(logits, len(item.choices), unrestricted)


def _correct(logits: torch.Tensor, item, unrestricted: bool = False) -> np.ndarray:
    return np.array([p in item.gold for p in _pred(logits, item, unrestricted)])


def unsteered_pass(model, tok, items, layers, progress=None, keep_cache: bool = False,
                   select_token: int = 1) -> ItemPass:
    """Unsteered letter scoring of every item; ``keep_cache`` keeps each prompt-prefix KV cache
    (about 23 KB per token for SmolLM2 in bf16) so later steered passes forward one token only.
    ``select_token=1`` restricts the answer to the item's letters; ``0`` takes the unrestricted
    first token, right when it parses to the gold letter (the official default)."""
    if select_token not in (0, 1):
        raise UserError(f"select_token must be 0 or 1; got {select_token!r}")
    letters = letter_token_ids(tok, max(len(it.choices) for it in items))
    groups = answer_groups(tok, len(letters)) if select_token == 0 else None
    ids = encode_items(tok, items)
    correct, resid, caches = [], {L: [] for L in layers}, []
    it = range(len(items)) if progress is None else progress.track(range(len(items)), len(items), "unsteered pass")
    for i in it:
        res = score_item(model, ids[i], letters, capture=layers, return_cache=keep_cache, groups=groups)
        logits, got = res[0], res[1]
        if keep_cache:
            caches.append(res[2])
        correct.append(bool(_correct(logits, items[i], groups is not None)[0]))
        for L in layers:
            resid[L].append(got[L])
    return ItemPass(items, ids, letters, np.array(correct),
                    {L: torch.stack(v) for L, v in resid.items()} if layers else {},
                    caches if keep_cache else None, groups)


def score_systems(model, data: ItemPass, idx, systems: list[list[Feature]], progress=None,
                  desc: str = "score", return_pred: bool = False):
    """Correctness ``(n_systems, len(idx))`` of each feature list on items ``idx`` (and, with
    ``return_pred``, the predicted letter index of each, same shape)."""
    d = model.config.hidden_size
    per = [steering_deltas(s) for s in systems]
    layers = sorted({L for p in per for L in p})
    deltas = {L: torch.stack([p.get(L, torch.zeros(d, dtype=torch.float64)) for p in per]) for L in layers}
    out = np.zeros((len(systems), len(idx)), dtype=bool)
    pred = np.zeros((len(systems), len(idx)), dtype=np.int64)
    it = list(enumerate(idx))
    it = it if progress is None else progress.track(it, len(it), desc)
    for j, i in it:
        logits, _ = score_item(model, data.ids[i], data.letters, deltas, n_rows=len(systems),
                               prefix_cache=None if data.caches is None else data.caches[i],
                               groups=data.groups)
        pred[:, j] = _pred(logits, data.items[i], data.unrestricted)
        out[:, j] = [p in data.items[i].gold for p in pred[:, j]]
    return (out, pred) if return_pred else out


def _accs(codes: dict[int, torch.Tensor], y: np.ndarray) -> dict[int, CorrelationAccumulator]:
    return {L: CorrelationAccumulator(c.shape[1]).update(c, y) for L, c in codes.items()}


#: the CAA baseline's strengths: the unit mean-difference direction times these, validated; the
#: grid reaches the residual's own scale (SmolLM2's last-position residual norms are ~80-280)
CAA_STRENGTHS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
#: CorrSteer-P's coefficient multipliers (the official robustness grid; the paper's default is 1)
COEF_GRID = (0.5, 1.0, 2.0, 3.0)


def run_seed(model, data: ItemPass, saes: dict, splits: Splits, seed: int, *, n_random: int = 5,
             caa_strengths=CAA_STRENGTHS, coef_grid=COEF_GRID, coef_mode: str = "mean",
             progress=None) -> dict:
    """All systems for one split seed. Returns per-system test correctness and selection info.

    CorrSteer-P and raw-mode P validate every layer's candidates at each ``coef_grid`` multiplier;
    CAA validates ``caa_strengths`` times its unit direction. S and A use multiplier 1 (no
    validation, as in the paper)."""
    tr, va, te = splits.make(len(data.items), seed)
    y = data.correct[tr].astype(float)
    check_rewards(y)
    layers = sorted(saes)
    with torch.no_grad():
        codes = {L: saes[L].encode(data.resid[L][tr]).float() for L in layers}
    accs = _accs(codes, y)
    raw_accs = _accs({L: data.resid[L][tr] for L in layers}, y)
    w_dec = {L: saes[L].W_dec.detach() for L in layers}

    def validate(systems):
        return score_systems(model, data, va, systems, progress, f"validate (seed {seed})").mean(1).tolist()

    sys_s, _ = select(accs, "S", w_dec, coef_mode=coef_mode)
    sys_a, _ = select(accs, "A", w_dec, coef_mode=coef_mode)
    sys_p, info_p = select(accs, "P", w_dec, validate=validate, coef_mode=coef_mode, coef_grid=coef_grid)
    sys_raw, info_raw = select(raw_accs, "P", {L: None for L in layers}, validate=validate,
                               coef_mode=coef_mode, source="raw", coef_grid=coef_grid)
    train_resid = {L: data.resid[L][tr] for L in data.resid}
    sys_caa, caa_strength, caa_val, randoms = baseline_systems(
        train_resid, y, sys_s, sys_p, codes, w_dec, validate, caa_strengths, n_random, seed)
    # positive control: the CAA direction at the norm of the train residual itself (not tuned,
    # far above the validated strengths): large enough to change answers if steering can at all
    control = [Feature(f.layer, -1, float(train_resid[f.layer].double().norm(dim=1).mean())
                       / max(float(f.direction.double().norm()), 1e-12), 0.0, f.direction, "caa")
               for f in sys_caa]
    names = ["unsteered", "CorrSteer-S", "CorrSteer-A", "CorrSteer-P", "raw-mode P",
             "mean-difference (CAA)"] + [f"random feature #{k + 1}" for k in range(n_random)] \
        + [CONTROL_NAME]
    systems = [[], sys_s, sys_a, sys_p, sys_raw, sys_caa] + randoms + [control]
    test, pred = score_systems(model, data, te, systems, progress, f"test (seed {seed})",
                               return_pred=True)
    train_letters = np.array([data.items[i].answer for i in tr])
    majority = int(np.bincount(train_letters).argmax())
    return {
        "seed": seed, "names": names, "test": test, "test_idx": te, "pred": pred,
        "majority_letter": majority,
        "majority_test": np.array([majority in data.items[i].gold for i in te]),
        "features": {n: [f.to_dict() for f in s] for n, s in zip(names, systems, strict=True)},
        "p_info": info_p, "raw_info": info_raw, "caa_strength": caa_strength,
        "caa_edge": len(caa_strengths) > 1 and caa_strength in (min(caa_strengths), max(caa_strengths)),
        "caa_val": caa_val, "top_r": {L: np.sort(np.abs(a.corr()))[::-1][:10].tolist() for L, a in accs.items()},
        "base_train_acc": float(y.mean()),
        "ser": {n: side_effect_ratio(test[0], test[k]) for k, n in enumerate(names)},
    }


def sft_baseline(model, data: ItemPass, splits: Splits, seed: int, cfg=None, progress=None) -> dict:
    """The paper's SFT baseline on one split seed: fine-tune on the train items' gold letters,
    score the test items; the reference is the same float32 copy before training (both scored
    the same way), so ``SER`` and ``Δacc`` measure training alone."""
    import copy
    import time

    from icml26.corrsteer.sft import SFTConfig, finetune_letters, letter_logits

    cfg = cfg or SFTConfig()
    cfg = SFTConfig(**{**cfg.__dict__, "seed": seed})
    tr, _, te = splits.make(len(data.items), seed)
    t0 = time.perf_counter()
    te_ids = [data.ids[i] for i in te]
    base = copy.deepcopy(model).float().eval()
    base_logits = letter_logits(base, te_ids, data.letters, progress, f"SFT reference (seed {seed})",
                                compute_dtype=cfg.compute_dtype, groups=data.groups)
    del base
    ft, stats = finetune_letters(model, [data.ids[i] for i in tr],
                                 [data.letters[data.items[i].answer] for i in tr], cfg, progress,
                                 f"SFT (seed {seed})")
    ft_logits = letter_logits(ft, te_ids, data.letters, progress, f"SFT test (seed {seed})",
                              compute_dtype=cfg.compute_dtype, groups=data.groups)
    del ft
    u = data.unrestricted
    base_p = np.array([_pred(base_logits[j:j + 1], data.items[i], u)[0] for j, i in enumerate(te)])
    ft_p = np.array([_pred(ft_logits[j:j + 1], data.items[i], u)[0] for j, i in enumerate(te)])
    base_c = np.array([p in data.items[i].gold for p, i in zip(base_p, te, strict=True)])
    ft_c = np.array([p in data.items[i].gold for p, i in zip(ft_p, te, strict=True)])
    return {"seed": seed, "test_idx": te, "base": base_c, "sft": ft_c, "stats": stats,
            "seconds": time.perf_counter() - t0, "ser": side_effect_ratio(base_c, ft_c),
            "changed": int((base_p != ft_p).sum())}


def baseline_systems(resid, y, sys_s, sys_p, codes, w_dec, validate, caa_strengths, n_random, seed):
    """The CAA and random-feature baselines, at CorrSteer-P's layers (S's layer if P kept none).

    CAA: mean pooled residual of rewarded minus unrewarded train examples (``resid[L]``: train
    rows), as a unit direction, its norm (``caa_strengths``) picked by ``validate``. Random: ``n_random`` draws of one alive feature per
    layer, each scaled to the steering norm of the feature it stands in for (P's at that layer,
    else S's). Returns (CAA system, its strength, validation scores, random systems).
    """
    at = sorted({f.layer for f in sys_p}) or [sys_s[0].layer]
    pos = y > 0.5
    caa_dirs = {L: resid[L][pos].double().mean(0) - resid[L][~pos].double().mean(0) for L in at}
    caa_dirs = {L: v / max(float(v.norm()), 1e-12) for L, v in caa_dirs.items()}  # unit: strength = norm
    caa_cands = [[Feature(L, -1, a, 0.0, caa_dirs[L], "caa") for L in at] for a in caa_strengths]
    caa_val = validate(caa_cands)
    caa_best = int(np.argmax(caa_val))
    ref = {f.layer: f for f in sys_s}
    ref.update({f.layer: f for f in sys_p})
    rng = np.random.default_rng(10_000 + seed)
    randoms = []
    for _ in range(n_random):
        feats = []
        for L in at:
            alive = np.flatnonzero((codes[L] > 0).any(0).numpy())
            j = int(rng.choice(alive))
            direction = w_dec[L][j].double()
            feats.append(Feature(L, j, float(ref[L].vector.norm()) / float(direction.norm()), 0.0,
                                 direction, "random"))
        randoms.append(feats)
    return caa_cands[caa_best], caa_strengths[caa_best], caa_val, randoms
