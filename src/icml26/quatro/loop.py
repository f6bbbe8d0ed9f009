"""A plain-PyTorch RL-with-verifiable-rewards loop around :func:`policy_loss`.

Per rollout batch: draw P prompts, sample G completions each (temperature T, no top-k/top-p, so
the sampler's distribution is the policy's), score them with the verifier, recompute the old
log-probs with the trainer's forward (never the sampler's numbers), then take ``mu`` gradient
steps on the same batch (``mu > 1`` = policy staleness). Metrics go to a JSONL file; a checkpoint
(model, optimizer, RNG states, step) makes a run resumable bit-for-bit on the same device.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from icml26.core.hfcache import cache_kw, output_cache
from icml26.core.io import atomic_open
from icml26.quatro.losses import LossConfig, loss_config, policy_loss
from icml26.quatro.task import TASKS, Problem, pass_at_k, sample_problems, score

__all__ = [
    "RLConfig",
    "RLLoop",
    "encode_prompts",
    "sample_completions",
    "completion_logprobs",
    "evaluate",
    "sft_warmup",
]


@dataclass(frozen=True)
class RLConfig:
    """steps: rollout batches. prompts: P per batch. group_size: G. mu: gradient steps per batch.
    lr: Adam learning rate. max_new: completion tokens (answer + EOS). eval_prompts / eval_samples:
    held-out prompts and samples per prompt for pass@k. grad_clip: global norm (0 = off)."""

    steps: int = 100
    prompts: int = 32
    group_size: int = 8
    mu: int = 1
    lr: float = 1e-4
    temperature: float = 1.0
    max_new: int = 4
    tasks: tuple[str, ...] = ("add2", "chain3")
    eval_prompts: int = 128
    eval_samples: int = 16
    eval_every: int = 0  # 0: only at start and end
    grad_clip: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "prompts", "mu", "max_new", "eval_prompts", "eval_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1; got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError(f"`group_size` (G) must be >= 2; got {self.group_size}")
        if not (self.lr > 0 and self.temperature > 0):
            raise ValueError(
                f"`lr` and `temperature` must be > 0; got {self.lr}, {self.temperature}"
            )
        bad = [t for t in self.tasks if t not in TASKS]
        if bad or not self.tasks:
            raise ValueError(f"unknown task(s) {bad}; known: {', '.join(TASKS)}")


def encode_prompts(tok, prompts: list[str], device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """BOS + prompt tokens, left-padded: ids (N, P) long and attention mask (N, P) long."""
    head = [tok.bos_token_id] if tok.bos_token_id is not None else []
    rows = [head + tok.encode(p, add_special_tokens=False) for p in prompts]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    am = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        am[i, width - len(r) :] = 1
    return ids.to(device), am.to(device)


def _positions(am: torch.Tensor) -> torch.Tensor:
    return (am.cumsum(1) - 1).clamp_min(0)


@torch.no_grad()
def sample_completions(
    model,
    ids,
    am,
    max_new: int,
    temperature: float,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestral sampling with a KV cache. Returns tokens (N, max_new) long and mask (N, max_new)
    float: 1 up to and including the first EOS."""
    n = ids.shape[0]
    out = model(input_ids=ids, attention_mask=am, position_ids=_positions(am), use_cache=True)
    past, logits = output_cache(out), out.logits[:, -1]
    pos = _positions(am)[:, -1:]
    toks = torch.full((n, max_new), pad_id, dtype=torch.long, device=ids.device)
    mask = torch.zeros((n, max_new), device=ids.device)
    alive = torch.ones(n, dtype=torch.bool, device=ids.device)
    for t in range(max_new):
        probs = torch.softmax(logits.float() / temperature, -1)
        nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        toks[:, t] = torch.where(alive, nxt, torch.full_like(nxt, pad_id))
        mask[:, t] = alive.float()
        alive = alive & (nxt != eos_id)
        if t + 1 == max_new or not bool(alive.any()):
            break
        am = torch.cat([am, torch.ones((n, 1), dtype=am.dtype, device=am.device)], 1)
        pos = pos + 1
        out = model(
            input_ids=toks[:, t : t + 1],
            attention_mask=am,
            position_ids=pos,
            use_cache=True,
            **cache_kw(model, past),
        )
        past, logits = output_cache(out), out.logits[:, -1]
    return toks, mask


def completion_logprobs(model, ids, am, toks, temperature: float = 1.0, with_entropy: bool = False):
    """Per-token log pi(y_t | x, y_<t) of the completions at the sampling temperature: (N, T)
    float32, and the per-token entropy (N, T) if ``with_entropy``."""
    full = torch.cat([ids, toks], 1)
    fam = torch.cat([am, torch.ones_like(toks)], 1)
    logits = model(input_ids=full, attention_mask=fam, position_ids=_positions(fam)).logits
    logits = logits[:, ids.shape[1] - 1 : -1].float() / temperature
    logsm = torch.log_softmax(logits, -1)
    lp = logsm.gather(-1, toks.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return lp
    ent = -(logsm.exp() * logsm).sum(-1).detach()
    return lp, ent


def _decode(tok, toks: torch.Tensor, mask: torch.Tensor) -> list[str]:
    out = []
    for row, m in zip(toks.tolist(), mask.tolist(), strict=True):
        keep = [t for t, k in zip(row, m, strict=True) if k and t != tok.eos_token_id]
        out.append(tok.decode(keep))
    return out


@torch.no_grad()
def evaluate(
    model,
    tok,
    probs: list[Problem],
    n: int,
    ks=(1, 8),
    temperature: float = 1.0,
    max_new: int = 4,
    seed: int = 0,
    batch: int = 512,
) -> dict[str, float]:
    """Held-out pass@k (unbiased, ``n`` samples per problem), mean reward and ``unique_correct``
    (problems solved by at least one of the n samples)."""
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev).manual_seed(seed)
    prompts = [p.prompt for p in probs for _ in range(n)]
    correct = []
    for s in range(0, len(prompts), batch):
        ids, am = encode_prompts(tok, prompts[s : s + batch], dev)
        toks, m = sample_completions(
            model, ids, am, max_new, temperature, tok.eos_token_id, tok.pad_token_id, gen
        )
        for j, text in enumerate(_decode(tok, toks, m)):
            correct.append(score(probs[(s + j) // n], text))
    c = np.array(correct).reshape(len(probs), n).sum(1).astype(int)
    model.train(was)
    res = {
        f"pass@{k}": float(np.mean([pass_at_k(n, int(ci), k) for ci in c])) for k in ks if k <= n
    }
    res["unique_correct"] = int((c > 0).sum())
    res["reward"] = float(c.sum() / (n * len(probs)))
    return res


def sft_warmup(
    model,
    tok,
    tasks=("add2", "chain3"),
    steps: int = 400,
    batch: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    target: float = 0.3,
    check_every: int = 25,
    progress=None,
) -> dict:
    """Teacher-forced training on train-split answers until sampled (T=1) exact match on a
    train-split validation draw reaches ``target`` or ``steps`` run out. Returns a summary."""
    rng = np.random.default_rng(seed)
    dev = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    val = sample_problems(tuple(tasks), "train", 128, np.random.default_rng(seed + 10_000))
    model.train()
    acc, step = 0.0, 0
    tick = progress.task("SFT warm-up", steps) if progress else (lambda n=1: None)
    for step in range(1, steps + 1):
        ps = sample_problems(tuple(tasks), "train", batch, rng)
        ids, am = encode_prompts(tok, [p.prompt for p in ps], dev)
        ans = [tok.encode(p.answer, add_special_tokens=False) + [tok.eos_token_id] for p in ps]
        w = max(map(len, ans))
        toks = torch.full((batch, w), tok.pad_token_id, dtype=torch.long)
        m = torch.zeros((batch, w))
        for i, a in enumerate(ans):
            toks[i, : len(a)] = torch.tensor(a)
            m[i, : len(a)] = 1
        toks, m = toks.to(dev), m.to(dev)
        lp = completion_logprobs(model, ids, am, toks)
        loss = -(lp * m).sum() / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tick(1)
        if step % check_every == 0:
            acc = evaluate(model, tok, val, 1, ks=(1,), seed=seed)["pass@1"]
            if acc >= target:
                break
    model.eval()
    return {"sft_steps": step, "sft_val_exact": acc}


class RLLoop:
    """Rollouts, verifier rewards, ``mu`` reuses per batch, held-out pass@k, JSONL, resume.

    ``model``: a causal LM whose ``forward`` takes ``input_ids, attention_mask, position_ids``
    (any HF model). ``loss``: a :class:`LossConfig` or a method name.
    """

    def __init__(
        self,
        model,
        tok,
        config: RLConfig,
        loss: LossConfig | str = "tr_dual",
        *,
        metrics_path: str | os.PathLike | None = None,
        checkpoint_path: str | os.PathLike | None = None,
    ) -> None:
        self.model, self.tok, self.cfg = model, tok, config
        self.loss_cfg = loss_config(loss) if isinstance(loss, str) else loss
        self.dev = next(model.parameters()).device
        self.opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        self.rng = np.random.default_rng(config.seed)
        self.gen = torch.Generator(device=self.dev).manual_seed(config.seed)
        self.step = 0
        self.history: list[dict] = []
        self.query_stats: list[dict] = []  # per-query (reward spread, lambda, KL) of late steps
        self.held_out = sample_problems(
            config.tasks, "test", config.eval_prompts, np.random.default_rng(10_007 + config.seed)
        )
        self.metrics_path = Path(metrics_path) if metrics_path else None
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path else None
        if self.checkpoint_path and self.checkpoint_path.exists():
            self._load()

    # -- persistence -------------------------------------------------------------------------
    def _save(self) -> None:
        state = {
            "model": self.model.state_dict(),
            "opt": self.opt.state_dict(),
            "gen": self.gen.get_state(),
            "rng": json.dumps(self.rng.bit_generator.state),
            "step": self.step,
            "history": json.dumps(self.history),
            "config": json.dumps(asdict(self.cfg)),
            "loss": json.dumps(self.loss_cfg.to_dict()),
        }
        with atomic_open(self.checkpoint_path, "wb") as f:
            torch.save(state, f)

    def _load(self) -> None:
        state = torch.load(self.checkpoint_path, map_location=self.dev, weights_only=True)
        if json.loads(state["config"]) != json.loads(json.dumps(asdict(self.cfg))):
            raise ValueError(f"checkpoint {self.checkpoint_path} was written with another RLConfig")
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.gen.set_state(state["gen"])
        self.rng.bit_generator.state = json.loads(state["rng"])
        self.step = int(state["step"])
        self.history = json.loads(state["history"])

    def _log(self, row: dict) -> None:
        self.history.append(row)
        if self.metrics_path:
            self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.metrics_path, "a") as f:
                f.write(json.dumps(row) + "\n")

    # -- training ----------------------------------------------------------------------------
    def evaluate(self) -> dict:
        c = self.cfg
        return evaluate(
            self.model,
            self.tok,
            self.held_out,
            c.eval_samples,
            ks=(1, 8),
            temperature=c.temperature,
            max_new=c.max_new,
            seed=c.seed * 1_000_003 + self.step,
        )

    def train_step(self) -> dict:
        c, tok = self.cfg, self.tok
        ps = sample_problems(c.tasks, "train", c.prompts, self.rng)
        prompts = [p.prompt for p in ps for _ in range(c.group_size)]
        ids, am = encode_prompts(tok, prompts, self.dev)
        self.model.eval()
        toks, mask = sample_completions(
            self.model,
            ids,
            am,
            c.max_new,
            c.temperature,
            tok.eos_token_id,
            tok.pad_token_id,
            self.gen,
        )
        texts = _decode(tok, toks, mask)
        rewards = torch.tensor(
            [score(ps[i // c.group_size], t) for i, t in enumerate(texts)], device=self.dev
        )
        with torch.no_grad():  # pi_old: the trainer's own forward, recomputed
            old_lp = completion_logprobs(self.model, ids, am, toks, c.temperature)
        self.model.train()
        inner = []
        for j in range(c.mu):
            lp, ent = completion_logprobs(
                self.model, ids, am, toks, c.temperature, with_entropy=True
            )
            loss, st = policy_loss(lp, old_lp, rewards, mask, c.group_size, self.loss_cfg)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            if c.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)
            self.opt.step()
            if j == 0:
                entropy = float((ent * mask).sum() / mask.sum())
            inner.append({k: st[k] for k in ("kl_q", "lam", "clip_frac", "ratio_q05", "ratio_q95")})
        self.step += 1
        last = inner[-1]
        delta = self.loss_cfg.delta
        r = rewards.view(-1, c.group_size)
        row = {
            "step": self.step,
            "reward": float(rewards.mean()),
            "entropy": entropy,
            "loss": float(loss.detach()),
            "kl_mean": float(last["kl_q"].mean()),
            "kl_within_2delta": float((last["kl_q"] <= 2 * delta).float().mean()),
            "lam_mean": float(last["lam"].mean()),
            "clip_frac": float(torch.stack([d["clip_frac"] for d in inner]).mean()),
            "ratio_q05": float(last["ratio_q05"]),
            "ratio_q95": float(last["ratio_q95"]),
        }
        if self.step > c.steps - 10:
            self.query_stats.append(
                {
                    "spread": r.std(1, unbiased=False).tolist(),
                    "lam": last["lam"].tolist(),
                    "kl": last["kl_q"].tolist(),
                }
            )
        return row

    def run(
        self, steps: int | None = None, progress=None, checkpoint_every: int = 10
    ) -> list[dict]:
        """Train to ``steps`` (default ``config.steps``) rollout batches; returns the history."""
        total = self.cfg.steps if steps is None else steps
        tick = (
            progress.task(f"RL {self.loss_cfg.method}", total - self.step)
            if progress
            else (lambda n=1: None)
        )
        if self.step == 0 and not self.history:
            self._log({"step": 0, **{f"eval_{k}": v for k, v in self.evaluate().items()}})
        while self.step < total:
            row = self.train_step()
            ev = self.cfg.eval_every
            if self.step == self.cfg.steps or (ev and self.step % ev == 0):
                row.update({f"eval_{k}": v for k, v in self.evaluate().items()})
            self._log(row)
            tick(1)
            if self.checkpoint_path and (self.step % checkpoint_every == 0 or self.step == total):
                self._save()
        return self.history
