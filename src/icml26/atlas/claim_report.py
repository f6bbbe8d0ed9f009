"""The ATLAS claim's secondary parts: linking variants, the Swedish SAT (b), and the figures."""

from __future__ import annotations

import numpy as np

from icml26.atlas.bank import ItemBank
from icml26.atlas.calibrate import G_PRIOR_3PL, EMConfig, calibrate
from icml26.atlas.data import Responses, clean
from icml26.atlas.experiment import score_subsets
from icml26.atlas.linking import assemble, calibrate_chunked
from icml26.atlas.scoring import estimate_theta
from icml26.core.claims import RunContext
from icml26.core.plots import pyplot, save_figure

__all__ = ["linking_rows", "sat_rows", "figures", "load_swedish_sat"]


def _rmse(x, y):
    return float(np.sqrt(np.mean((np.asarray(x) - np.asarray(y)) ** 2)))


A_BOUND_SHARE = 0.9  # a fitted |a| above 0.9 a_max counts as "at the bound"


def off_bound(bank: ItemBank, true: ItemBank, a_max: float = 30.0) -> np.ndarray:
    """Items away from the bounds (N,) bool: fitted |a| under 0.9 a_max and a generating b
    inside [-4, 4] (items far outside the ability range are nearly constant and not identified)."""
    idx = true.index(bank.ids)
    with np.errstate(invalid="ignore"):
        return (np.abs(bank.a) < A_BOUND_SHARE * a_max) & (np.abs(true.b[idx]) <= 4)


def _param_row(name, bank: ItemBank, true: ItemBank, extra=None):
    idx = true.index(bank.ids)
    pos = true.a[idx] > 0
    ok = off_bound(bank, true)
    neg = true.a[idx] < 0
    row = {
        "part": "(a) parameter recovery",
        "system": name,
        "rmse_a": round(_rmse(bank.a, true.a[idx]), 4),
        "rmse_b (a>0)": round(_rmse(np.clip(bank.b[pos], -20, 20), true.b[idx][pos]), 4),
        "rmse_g": round(_rmse(bank.g, true.g[idx]), 4),
        "rmse_P (theta grid)": round(
            _rmse(bank.prob(np.linspace(-3, 3, 25)), true.prob(np.linspace(-3, 3, 25))[:, idx]), 4
        ),
        "items off bounds": int(ok.sum()),
        "rmse_a (off bounds)": round(_rmse(bank.a[ok], true.a[idx][ok]), 4),
        "rmse_b (off bounds, a>0)": round(
            _rmse(np.clip(bank.b[ok & pos], -20, 20), true.b[idx][ok & pos]), 4
        ),
        "rmse_g (off bounds)": round(_rmse(bank.g[ok], true.g[idx][ok]), 4),
        "negative slopes kept negative": f"{int(np.sum(neg & (bank.a < 0)))}/{int(neg.sum())}",
    }
    row.update(extra or {})
    return row


def linking_rows(ctx: RunContext, st: dict, res: dict) -> list[dict]:
    """Concurrent fit vs chunks of 112 items linked three ways (correct / official / none)."""
    true, bank = res["true"], res["bank"]
    rows = [_param_row("concurrent EM (default)", bank, true, {"chunks": 1})]
    chunk = int(ctx.options.get("chunk", ctx.pick(tiny=100, small=112, full=112)))
    if ctx.options.get("linking", "1") == "0":
        return rows
    n_link = int(ctx.options.get("link_items", ctx.pick(tiny=10**9, small=1120, full=10**9)))
    R = Responses.from_array(res["R"], items=true.ids)
    cleaned, _ = clean(R)
    if n_link < len(cleaned.items):  # the first n_link items: enough chunks, a fraction of the cost
        sub = Responses(
            cleaned.matrix[:, :n_link], cleaned.models, cleaned.items[:n_link], R.source
        )
        cleaned, _ = clean(sub)
        keep = bank.index(cleaned.items)
        rows = [
            _param_row(
                f"concurrent EM (default), same {len(keep)} items",
                bank.subset(keep),
                true,
                {"chunks": 1},
            )
        ]
    cfg = EMConfig(  # the prior calibrate() gives the concurrent bank
        model=st["model"],
        max_iter=st["max_iter"],
        g_prior=G_PRIOR_3PL if st["model"] == "3PL" else None,
    )
    _, fits = calibrate_chunked(cleaned, cfg, chunk, progress=ctx.progress, return_chunks=True)
    for formula in ("correct", "official", "none"):
        linked = assemble(cleaned.items, fits, formula, st["model"])
        A = [c["A"] for c in linked.linking["chunks"]]
        rows.append(
            _param_row(
                f"chunks of {chunk} + mean/sigma, {formula} formula",
                linked,
                true,
                {"chunks": len(A), "A range": [round(min(A), 3), round(max(A), 3)]},
            )
        )
    return rows


def load_swedish_sat(part: str) -> Responses:
    """irtorch's Swedish SAT sample (5,000 x 80): 1 = the keyed option, 0 = another, NaN = omitted."""
    import torch

    from icml26.core.lm import package_dir

    base = package_dir("irtorch", "irtorch") / "datasets" / "swedish_sat"
    stem = {"verbal": "swesat22b_verb", "quant": "swesat22b_quant"}[part]
    data = torch.load(base / f"{stem}.pt", weights_only=True).numpy().astype(np.float64)
    key = np.array(
        [int(c) - 1 for c in (base / f"{stem}_correct.txt").read_text().strip() if c.isdigit()]
    )
    Y = np.where(np.isnan(data), np.nan, (data == key[None, :]).astype(np.float64))
    return Responses.from_array(
        Y,
        models=[f"p{i}" for i in range(len(Y))],
        items=[f"{part}{j + 1}" for j in range(Y.shape[1])],
        source=f"irtorch {stem}",
    )


def sat_rows(ctx: RunContext, st: dict) -> tuple[list[dict], list[str]]:
    """(b): 4,000 calibration / 1,000 test examinees; fixed-length CATs of k items vs random-k."""
    from icml26.atlas.experiment import run_cats

    rows, notes = [], []
    for part in ("verbal", "quant"):
        R = load_swedish_sat(part)
        perm = np.random.default_rng(ctx.seed).permutation(R.matrix.shape[0])
        cal, test = perm[:4000], perm[4000:]
        bank = calibrate(
            Responses(R.matrix[cal], [R.models[i] for i in cal], R.items, R.source),
            model="3PL",
            max_iter=st["max_iter"],
            progress=ctx.progress,
        )
        Y = R.matrix[test][:, [R.items.index(i) for i in bank.ids]]
        ref, _ = estimate_theta(bank, Y, "wle")
        ok = np.isfinite(ref)
        for k in (8, 16, 24):
            ratios = []
            for s in range(st["seeds"]):
                cat = run_cats(bank, Y, s, se_stop=1e-6, min_items=k, max_items=k)
                rng = np.random.default_rng(30_000 + s)
                used = np.zeros_like(cat["used"])
                for m in range(len(Y)):
                    obs = np.flatnonzero(~np.isnan(Y[m]))
                    used[m, rng.choice(obs, min(k, obs.size), replace=False)] = True
                rnd = score_subsets(bank, Y, used)
                mae_c = float(np.mean(np.abs(cat["theta"] - ref)[ok]))
                mae_r = float(np.mean(np.abs(rnd["theta"] - ref)[ok]))
                ratios.append((mae_c, mae_r))
            r = np.array(ratios)
            rows.append(
                {
                    "part": f"(b) Swedish SAT {part}",
                    "system": f"ATLAS fixed k={k} vs random-{k}",
                    "items": k,
                    "theta_mae": round(float(r[:, 0].mean()), 4),
                    "theta_mae_random": round(float(r[:, 1].mean()), 4),
                    "ratio_min_max": [
                        round(float((r[:, 0] / r[:, 1]).min()), 3),
                        round(float((r[:, 0] / r[:, 1]).max()), 3),
                    ],
                }
            )
        notes.append(
            f"(b) {part}: {bank.n_items} items, 3PL on 4,000 examinees (EM {bank.fit['iterations']} "
            f"cycles, converged={bank.fit['converged']}), {int(np.isnan(R.matrix).sum())} omitted "
            f"answers kept missing; reference = full-test WLE of 1,000 held-out examinees; "
            f"{int(bank.nonpositive_a.sum())} items with a<=0."
        )
    return rows, notes


def figures(ctx: RunContext, res: dict, st: dict) -> list:
    plt = pyplot()
    keep, true, bank = res["keep"], res["true"], res["bank"]
    sysd = keep["systems"]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    # 1. MAE vs items
    ax = axes[0, 0]
    curves = np.array([[m for _, m in c] for c in res["curves"]])
    ks = [k for k, _ in res["curves"][0]]
    ax.plot(ks, curves.mean(0), "o-", color="gray", label="random k (EAP)")
    ps = res["per_seed"]
    for name, mk in (
        ("ATLAS SE 0.1", "s"),
        ("ATLAS SE 0.2", "s"),
        ("ATLAS SE 0.3", "s"),
        ("random-100", "^"),
        ("anchor-100 (k-means medoids)", "v"),
        ("pure MFI (randomesque 1)", "D"),
        ("ATLAS keeping a<=0 items", "x"),
    ):
        ax.plot(
            np.mean([p[name]["items"] for p in ps]),
            np.mean([p[name]["theta_mae"] for p in ps]),
            mk,
            ms=8,
            label=name,
        )
    ax.set_xscale("log")
    ax.set_xlabel("items administered (mean)")
    ax.set_ylabel("theta MAE vs full-bank WLE")
    ax.set_title("(a) accuracy of theta vs test length")
    ax.legend(fontsize=7)
    # 2. exposure
    ax = axes[0, 1]
    for name in ("ATLAS SE 0.1", "pure MFI (randomesque 1)"):
        expo = np.sort(sysd[name]["used"].mean(0))[::-1]
        ax.plot(np.arange(1, 201), expo[:200], label=name)
    ax.set_xlabel("item rank by exposure")
    ax.set_ylabel("share of test models that saw the item")
    ax.set_title("exposure of the 200 most used items")
    ax.legend(fontsize=8)
    # 3. acc_hat vs accuracy
    ax = axes[0, 2]
    ax.scatter(keep["acc"], sysd["ATLAS SE 0.1"]["acc_hat"], s=6, label="ATLAS SE 0.1")
    ax.scatter(keep["acc"], sysd["random-100"]["acc_hat"], s=6, alpha=0.6, label="random-100")
    lo, hi = keep["acc"].min(), keep["acc"].max()
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set_xlabel("accuracy on the whole bank")
    ax.set_ylabel("p-IRT accuracy estimate")
    ax.set_title("reconstructed accuracy")
    ax.legend(fontsize=8)
    # 4. rank shifts
    ax = axes[1, 0]
    from scipy.stats import rankdata

    ax.scatter(rankdata(-keep["acc"]), rankdata(-keep["ref"]), s=5)
    ax.set_xlabel("rank by accuracy")
    ax.set_ylabel("rank by full-bank theta (WLE)")
    ax.set_title("rank shifts")
    # 5/6. fitted vs true a and b
    idx = true.index(bank.ids)
    ax = axes[1, 1]
    ax.scatter(true.a[idx], bank.a, s=3, alpha=0.5)
    ax.plot([-2, 12], [-2, 12], "k--", lw=1)
    ax.set_xlabel("true a")
    ax.set_ylabel("fitted a")
    ax.set_title(f"{st['model']} EM: slopes")
    ax = axes[1, 2]
    pos = true.a[idx] > 0
    ax.scatter(true.b[idx][pos], np.clip(bank.b[pos], -12, 12), s=3, alpha=0.5)
    ax.plot([-10, 6], [-10, 6], "k--", lw=1)
    ax.set_xlabel("true b (a > 0)")
    ax.set_ylabel("fitted b")
    ax.set_title("difficulties")
    fig.suptitle(
        f"ATLAS, {ctx.scale}: {res['bank'].n_items} items, {st['test']} test models x "
        f"{st['seeds']} seeds"
    )
    fig.tight_layout()
    return [save_figure(fig, ctx.out_dir / "atlas.png")]
