"""The SAE stage of the claim: harvest Wikipedia residuals, train one SAE per layer, evaluate,
cache the folders under ``$XDG_CACHE_HOME/icml26/corrsteer/saes/<key>/L<layer>``.

The cache key hashes the model's identity and every setting, so a changed recipe retrains.
Training checkpoints (``train_state.pt``) make an interrupted stage resume.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from icml26.core.io import atomic_write_json
from icml26.core.lm import cache_root
from icml26.core.text import token_blocks
from icml26.corrsteer.sae import SAE, load_sae, save_sae
from icml26.corrsteer.train import TrainConfig, evaluate_sae, harvest, train_sae

__all__ = ["sae_stage"]


def _key(model_id: str, layers, cfg: TrainConfig, n_train: int, n_eval: int, seq_len: int) -> str:
    blob = json.dumps({"model": model_id, "layers": list(layers), "cfg": asdict(cfg), "n_train": n_train,
                       "n_eval": n_eval, "seq_len": seq_len, "v": 1}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def sae_stage(model, tok, layers, cfg: TrainConfig, *, n_train: int, n_eval: int, seq_len: int = 128,
              model_id: str = "smollm2", root: Path | None = None, progress=None,
              ce_blocks: int = 32) -> tuple[dict[int, SAE], dict[int, dict], float]:
    """Train (or load cached) SAEs for ``layers``; returns ``(saes, metrics, seconds)``.

    ``n_train`` / ``n_eval`` tokens come from the Wikipedia train / validation splits in blocks of
    ``seq_len`` (position 0 of each block dropped). ``metrics[L]`` holds :func:`evaluate_sae`'s
    numbers (CE on ``ce_blocks`` validation blocks) plus the training stats.
    """
    t0 = time.perf_counter()
    root = Path(root) if root else cache_root() / "corrsteer" / "saes"
    folder = root / _key(model_id, layers, cfg, n_train, n_eval, seq_len)
    done = {L: folder / f"L{L}" for L in layers}
    if all((p / "metrics.json").is_file() for p in done.values()):
        saes = {L: load_sae(p) for L, p in done.items()}
        mets = {L: json.loads((p / "metrics.json").read_text()) for L, p in done.items()}
        return saes, mets, 0.0
    dtype = next(model.parameters()).dtype
    n_blocks = max(1, n_train // seq_len)
    ids = token_blocks(tok, "train", seq_len, n_blocks)
    acts = harvest(model, ids, layers, batch_size=16, progress=progress, out_dtype=torch.bfloat16)
    eval_ids = token_blocks(tok, "validation", seq_len, max(1, n_eval // seq_len))
    eval_acts = harvest(model, eval_ids, layers, batch_size=16, progress=progress)
    saes, mets = {}, {}
    for L in layers:
        p = done[L]
        if (p / "metrics.json").is_file():
            saes[L], mets[L] = load_sae(p), json.loads((p / "metrics.json").read_text())
            continue
        p.mkdir(parents=True, exist_ok=True)
        sae, stats = train_sae(acts[L], cfg, layer=L, model_name=model_id, progress=progress, checkpoint=p)
        m = evaluate_sae(sae, eval_acts[L], model=model, ids=eval_ids[:ce_blocks], layer=L)
        m.update(stats)
        m["model_dtype"] = str(dtype)
        save_sae(sae, p, extra={"metrics": m})
        atomic_write_json(p / "metrics.json", m)
        (p / "train_state.pt").unlink(missing_ok=True)
        saes[L], mets[L] = sae, m
    del acts
    return saes, mets, time.perf_counter() - t0


if __name__ == "__main__":  # python -m icml26.corrsteer.stage: build the small-scale cache
    import sys

    from icml26.core.lm import load_lm

    model, tok = load_lm(None)  # dtype policy
    layers = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "8,15,22").split(",")]
    n_train = int(sys.argv[2]) if len(sys.argv) > 2 else 150_000
    saes, mets, sec = sae_stage(model, tok, layers, TrainConfig(d_sae=4096, k=32, epochs=2, batch_size=512, lr=5e-4),
                                n_train=n_train, n_eval=25_000)
    print(json.dumps({"seconds": sec, "metrics": mets}, indent=1, default=str))
