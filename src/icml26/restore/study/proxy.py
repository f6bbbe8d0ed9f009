"""The SmolLM2 text proxy of RESTORE's mechanism (a *proxy*: text, not images).

Notes §5.4 [I]: a causal LM with real RoPE decay (SmolLM2-135M: head_dim 64, base 1e5, 30 layers)
reads ``[system] [block of N = 576 "visual-like" content tokens] [question]``. The block is a dense
generated scene description (``the red lamp is left of the blue cube. ...``); its token
embeddings stand in for visual tokens. The block is reduced at the embedding level (before layer
0) to ``n`` tokens by a text-agnostic criterion - DivPrune's max-min diversity on the input
embeddings (``prune``) or RESTORE's hybrid (half DivPrune, half distinctive anchors, merged
embeddings = group means; ``merge``) - and placed at ``reindexed`` (contiguous) or ``retained``
(original; merged = group median) positions, with or without the calibration
``log s + log(c - D(|Δ|))`` (prefill, the same :class:`~icml26.restore.attention.RestoreState`
the LLaVA patch uses; layer 0 sees the uniform size N/n).

:func:`block_mass` measures the paper's Fig. 2 quantity: per layer, the attention mass the
question's tokens pay to the block (summed over block keys, averaged over heads and question
tokens), for the full sequence and each reduced arm. What would confirm the paper's diagnosis:
retained < re-indexed < full without calibration, and calibrated ~ full.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from icml26.restore.anchors import Hybrid
from icml26.restore.attention import ATTN_NAME, STATE_KWARG, RestoreState, register, rope_params
from icml26.restore.patch import RestoreConfig
from icml26.restore.reducers import DivPrune

__all__ = ["ARMS", "arm_name", "scene_block", "block_mass", "SYSTEM", "N_BLOCK"]

N_BLOCK = 576  # LLaVA-1.5's visual tokens
SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant "
    "reads the scene description and answers the question.\n"
)
ARMS = tuple(
    (merge, pos, cal)
    for merge in (False, True)
    for pos in ("reindexed", "retained")
    for cal in (False, True)
)

_COLOURS = ("red", "blue", "green", "yellow", "black", "white", "orange", "purple", "grey", "brown")
_OBJECTS = (
    "lamp",
    "cube",
    "book",
    "cup",
    "chair",
    "ball",
    "box",
    "key",
    "vase",
    "clock",
    "shoe",
    "plant",
    "bottle",
    "hat",
    "pen",
    "bowl",
    "spoon",
    "phone",
    "candle",
    "basket",
)
_RELATIONS = ("left of", "right of", "above", "below", "behind", "in front of", "next to", "under")


def arm_name(merge: bool, positions: str, calibrate: bool) -> str:
    return f"{'merge' if merge else 'prune'}/{positions}/{'calib' if calibrate else 'nocalib'}"


def scene_block(tokenizer, n: int = N_BLOCK, seed: int = 0) -> tuple[list[int], list[int]]:
    """Token ids of a generated scene description cut to exactly ``n`` tokens, and of a question
    about its first fact: ``(block_ids, question_ids)``. Deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    facts, first = [], None
    ids: list[int] = []
    while len(ids) < n:
        c1, c2 = rng.choice(_COLOURS, 2, replace=False)
        o1, o2 = rng.choice(_OBJECTS, 2, replace=False)
        rel = _RELATIONS[rng.integers(len(_RELATIONS))]
        facts.append(f"The {c1} {o1} is {rel} the {c2} {o2}.")
        first = first or (o1, o2)
        ids = tokenizer(" ".join(facts), add_special_tokens=False)["input_ids"]
    question = f"\nQuestion: Where is the {first[0]} relative to the {first[1]}? Answer:"
    return ids[:n], tokenizer(question, add_special_tokens=False)["input_ids"]


@contextlib.contextmanager
def _restore_attention(lm):
    register()
    prev = lm.config._attn_implementation
    lm.config._attn_implementation = ATTN_NAME
    try:
        yield
    finally:
        lm.config._attn_implementation = prev


def _mass(lm, embeds, pos, visual, log_size, log_size0, text_query, cfg) -> np.ndarray:
    head_dim, base = rope_params(lm.config)
    length = embeds.shape[0]
    st = RestoreState(config=cfg, head_dim=head_dim, base=base, backend="sdpa", record={})
    st.pos, st.valid = pos[None], torch.ones(1, length, dtype=torch.bool)
    st.visual, st.text_query = visual[None], text_query[None]
    st.log_size, st.log_size0 = log_size[None], log_size0[None]
    st.prefill_len, st.stages = length, []
    body = lm.model if hasattr(lm, "model") else lm
    with _restore_attention(lm):
        body(
            inputs_embeds=embeds[None], position_ids=pos[None], use_cache=False, **{STATE_KWARG: st}
        )
    return np.array([float(st.record[k][0][0]) for k in sorted(st.record)])


@torch.no_grad()
def block_mass(
    lm, sys_ids, block_ids, q_ids, keep: int, *, arms=ARMS, gamma: float = 0.5, c: float = 2.0
) -> dict[str, np.ndarray]:
    """Per-layer text->block attention mass (L,) for ``"full"`` and each arm of ``arms`` (tuples
    ``(merge, positions, calibrate)``, named by :func:`arm_name`), with the block reduced from
    ``len(block_ids)`` to ``keep`` tokens. ``lm``: a Llama-family ``*ForCausalLM`` (float32 or
    wider recommended: the record computes explicit softmax probabilities)."""
    n = len(block_ids)
    if not 1 <= keep < n:
        raise ValueError(f"keep must be in [1, {n - 1}]; got {keep}")
    emb = lm.get_input_embeddings()
    dev = emb.weight.device
    e_sys, e_blk, e_q = (
        emb(torch.tensor(list(x), device=dev)) for x in (sys_ids, block_ids, q_ids)
    )
    s, t = e_sys.shape[0], e_q.shape[0]

    def seq(x_blk, blk_pos, sizes, q_start):
        embeds = torch.cat([e_sys, x_blk.to(e_sys.dtype), e_q])
        pos = torch.cat([torch.arange(s), s + blk_pos, q_start + torch.arange(t)]).to(dev)
        k = x_blk.shape[0]
        visual = torch.cat(
            [
                torch.zeros(s, dtype=torch.bool),
                torch.ones(k, dtype=torch.bool),
                torch.zeros(t, dtype=torch.bool),
            ]
        )
        tq = torch.cat([torch.zeros(s + k, dtype=torch.bool), torch.ones(t, dtype=torch.bool)])
        zs, zt = torch.zeros(s, dtype=torch.float64), torch.zeros(t, dtype=torch.float64)
        ls = torch.cat([zs, torch.log(sizes.double()), zt])
        ls0 = torch.cat([zs, torch.full((k,), float(np.log(n / k)), dtype=torch.float64), zt])
        return embeds, pos, visual, ls, ls0, tq

    plain = RestoreConfig(reducer="none", calibrate=False)
    out = {"full": _mass(lm, *seq(e_blk, torch.arange(n), torch.ones(n), s + n), cfg=plain)}
    feats = e_blk.detach().float()
    reds = {
        False: DivPrune().reduce(feats, keep, None),
        True: Hybrid(DivPrune(), gamma=gamma).reduce(feats, keep, None),
    }
    for merge, positions, calibrate in arms:
        red = reds[merge]
        x = red.merge(e_blk)
        rel = red.positions() if positions == "retained" else torch.arange(red.n)
        q_start = s + (n if positions == "retained" else red.n)
        cfg = RestoreConfig(reducer="none", calibrate=calibrate, c=c)
        out[arm_name(merge, positions, calibrate)] = _mass(
            lm, *seq(x, rel, red.sizes, q_start), cfg=cfg
        )
    return out


def proxy_rows(
    lm,
    tokenizer,
    *,
    n_blocks: int,
    keeps,
    n: int = N_BLOCK,
    seed: int = 0,
    label: str = "SmolLM2-135M",
    progress=None,
) -> tuple[list[dict], list[str], dict]:
    """The mechanism rows: for each keep and arm, text->block attention mass / full (mean over
    layers; clustered over blocks, then layers) and per-layer ratios (layers 0, 1, L/2, L-1).
    Returns (rows, notes, per-layer mean ratios {(keep, arm): (L,)})."""
    from icml26.core.stats import clustered_bootstrap

    sys_ids = tokenizer(SYSTEM, add_special_tokens=False)["input_ids"]
    blocks = [scene_block(tokenizer, n=n, seed=seed + i) for i in range(n_blocks)]
    jobs = [(k, b) for k in keeps for b in blocks]
    it = progress.track(jobs, total=len(jobs), description="text proxy") if progress else jobs
    masses: dict = {}
    for keep, (blk, q) in it:
        for name, m in block_mass(lm, sys_ids, blk, q, keep).items():
            masses.setdefault((keep, name), []).append(m)
    rows, per_layer = [], {}
    tag = f"mechanism ({label} text proxy)"
    for keep in keeps:
        full = masses[(keep, "full")]
        n_layers = len(full[0])
        show = sorted({0, 1, n_layers // 2, n_layers - 1})
        for merge, positions, calibrate in ARMS:
            name = arm_name(merge, positions, calibrate)
            arm = masses[(keep, name)]
            ci = clustered_bootstrap(arm, full, statistic="ratio", seed=seed)
            ratio = np.mean(
                [a / np.maximum(f, 1e-12) for a, f in zip(arm, full, strict=True)], axis=0
            )
            per_layer[(keep, name)] = ratio
            rows.append(
                {
                    "system": f"{tag}: {name}",
                    "keep": f"{keep}/{n}",
                    "mass / full (all layers)": round(ci.value, 3),
                    "95% CI (blocks, then layers)": f"[{ci.low:.3f}, {ci.high:.3f}]",
                    **{f"layer {j}": round(float(ratio[j]), 3) for j in show},
                }
            )
        ret, rei = (
            masses[(keep, "prune/retained/nocalib")],
            masses[(keep, "prune/reindexed/nocalib")],
        )
        d = clustered_bootstrap(ret, rei, statistic="ratio", seed=seed)
        rows.append(
            {
                "system": f"{tag}: retained / re-indexed (pruning, uncalibrated)",
                "keep": f"{keep}/{n}",
                "mass / full (all layers)": round(d.value, 3),
                "95% CI (blocks, then layers)": f"[{d.low:.3f}, {d.high:.3f}]",
            }
        )
    full_mean = float(np.mean([f.mean() for f in masses[(keeps[0], "full")]]))
    notes = [
        f"{tag}: [system {len(sys_ids)} tokens] [generated scene description, {n} tokens, standing "
        f"in for {n} visual tokens] [question]; {n_blocks} blocks; keeps {list(keeps)}; the block "
        "is reduced on its input embeddings (DivPrune; merge = hybrid with distinctive anchors); "
        f"full-sequence question->block mass {full_mean:.3f} (mean over layers). A proxy of the "
        "mechanism only: text tokens, not image tokens; no accuracy is measured here"
    ]
    return rows, notes, per_layer
