"""SmolLM2-135M + LoRA through TRL: ``TrDualGRPOTrainer`` against TRL's own ``GRPOTrainer``
(``loss_type="grpo"``) with the same seed, prompts, LoRA, learning rate and step budget.

    python -m icml26.quatro.trl_run --out /tmp/quatro-trl [--steps 30] [--arms tr_dual,grpo]

Task: generated ``chain3`` ("a+b+c=", answer 0..27) with a two-line few-shot prefix, exact-match
reward on the completion's first line; held-out prompts from the test split. Each arm writes
``ARM.json`` (TRL's log history, held-out pass@1 / pass@8 / unique correct before and after);
``--report`` merges finished arms into ``summary.json`` and a figure.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from icml26.core.io import atomic_open
from icml26.quatro.task import pass_at_k, problems, sample_problems

__all__ = ["SHOTS", "run_arm", "evaluate_heldout", "report"]

SHOTS = "1+2+3=6\n4+0+5=9\n"  # [ours] few-shot prefix: SmolLM2-135M-Instruct is ~10% right with it


def _reward(completions, answer, **_):
    return [
        1.0 if c.split("\n")[0].strip() == a else 0.0
        for c, a in zip(completions, answer, strict=True)
    ]


@torch.no_grad()
def evaluate_heldout(model, tok, n_prompts: int, samples: int, max_new: int, seed: int) -> dict:
    """Held-out pass@1 / pass@k (k = samples) and unique correct on ``n_prompts`` test prompts."""
    test = problems("chain3", "test")[:n_prompts]
    tok.padding_side = "left"
    enc = tok(
        [SHOTS + p.prompt for p in test],
        return_tensors="pt",
        padding=True,
        add_special_tokens=False,
    )
    torch.manual_seed(seed)
    model.eval()
    out = model.generate(
        **enc,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new,
        num_return_sequences=samples,
        pad_token_id=tok.pad_token_id,
    )
    comp = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    c = np.array(_reward(comp, [p.answer for p in test for _ in range(samples)])).reshape(
        -1, samples
    )
    right = c.sum(1).astype(int)
    return {
        "pass@1": float(np.mean([pass_at_k(samples, int(r), 1) for r in right])),
        f"pass@{samples}": float(np.mean([pass_at_k(samples, int(r), samples) for r in right])),
        "unique_correct": int((right > 0).sum()),
        "prompts": n_prompts,
        "samples": samples,
    }


def run_arm(
    arm: str,
    out: Path,
    *,
    steps: int = 30,
    prompts: int = 8,
    group: int = 4,
    mu: int = 2,
    lr: float = 5e-4,
    max_new: int = 4,
    lora_r: int = 16,
    lora_layers: int = 6,
    delta: float = 0.05,
    eval_prompts: int = 32,
    eval_samples: int = 8,
    seed: int = 0,
) -> dict:
    """Train one arm (``"tr_dual"`` or ``"grpo"``) and write ``out/ARM.json``."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    from icml26.core.lm import load_lm
    from icml26.quatro.trl_trainer import TrDualGRPOConfig, TrDualGRPOTrainer

    if arm not in ("tr_dual", "grpo"):
        raise ValueError(f"unknown arm {arm!r}; known: tr_dual, grpo")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    model, tok = load_lm("smollm2", dtype=torch.float32)
    n_layers = model.config.num_hidden_layers
    before = evaluate_heldout(model, tok, eval_prompts, eval_samples, max_new, seed)
    rng = np.random.default_rng(seed)
    n_rollouts = -(-steps // mu)
    train = sample_problems(("chain3",), "train", n_rollouts * prompts, rng)
    ds = Dataset.from_dict(
        {"prompt": [SHOTS + p.prompt for p in train], "answer": [p.answer for p in train]}
    )
    peft = LoraConfig(
        r=lora_r,
        lora_alpha=2 * lora_r,
        lora_dropout=0.0,
        target_modules=[
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
        layers_to_transform=list(range(n_layers - lora_layers, n_layers)),
        task_type="CAUSAL_LM",
    )
    common = dict(
        output_dir=str(out / f"trainer-{arm}"),
        per_device_train_batch_size=prompts * group,
        num_generations=group,
        num_iterations=mu,
        max_completion_length=max_new,
        max_steps=steps,
        learning_rate=lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=seed,
        max_grad_norm=1.0,
        disable_tqdm=True,
    )
    if arm == "tr_dual":
        cfg = TrDualGRPOConfig(tr_delta=delta, **common)
        cls = TrDualGRPOTrainer
    else:
        cfg = GRPOConfig(loss_type="grpo", epsilon=0.2, scale_rewards="group", **common)
        cls = GRPOTrainer
    model.train()
    trainer = cls(
        model=model,
        reward_funcs=[_reward],
        args=cfg,
        train_dataset=ds,
        processing_class=tok,
        peft_config=peft,
    )
    t1 = time.time()
    trainer.train()
    train_s = time.time() - t1
    after = evaluate_heldout(trainer.model, tok, eval_prompts, eval_samples, max_new, seed + 1)
    rec = {
        "arm": arm,
        "settings": dict(
            steps=steps,
            prompts=prompts,
            group=group,
            mu=mu,
            lr=lr,
            max_new=max_new,
            lora_r=lora_r,
            lora_layers=lora_layers,
            delta=delta,
            seed=seed,
            eval_prompts=eval_prompts,
            eval_samples=eval_samples,
        ),
        "before": before,
        "after": after,
        "train_s": train_s,
        "wall_s": time.time() - t0,
        "log_history": trainer.state.log_history,
        "trl": __import__("trl").__version__,
    }
    with atomic_open(out / f"{arm}.json", "w") as f:
        json.dump(rec, f, indent=1)
    return rec


def report(out: Path, figure: Path | None = None) -> dict:
    """Merge ``out/*.json`` arms into ``out/summary.json`` (+ a reward/entropy/KL figure)."""
    arms = {}
    for p in sorted(out.glob("*.json")):
        if p.name == "summary.json":
            continue
        arms[p.stem] = json.loads(p.read_text())
    rows = []
    for a, r in arms.items():
        steps = [h for h in r["log_history"] if "reward" in h]
        rew = [h["reward"] for h in steps]
        ent = [h["entropy"] for h in r["log_history"] if "entropy" in h]
        k = f"pass@{r['after']['samples']}"
        rows.append(
            {
                "arm": a,
                "pass@1 before": r["before"]["pass@1"],
                "pass@1 after": r["after"]["pass@1"],
                f"{k} before": r["before"][k],
                f"{k} after": r["after"][k],
                "unique correct after": r["after"]["unique_correct"],
                "train reward first/last 3 rollouts": [
                    float(np.mean(rew[:3])) if rew else None,
                    float(np.mean(rew[-3:])) if rew else None,
                ],
                "entropy first/last": [ent[0], ent[-1]] if ent else None,
                "train_s": r["train_s"],
            }
        )
    summary = {"rows": rows, "settings": next(iter(arms.values()))["settings"] if arms else {}}
    with atomic_open(out / "summary.json", "w") as f:
        json.dump(summary, f, indent=1)
    if figure is not None and arms:
        from icml26.core.plots import pyplot, save_figure

        plt = pyplot()
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
        for a, r in arms.items():
            hist = [h for h in r["log_history"] if "loss" in h and "step" in h]
            st = [h["step"] for h in hist]
            rw = [(h["step"], h["reward"]) for h in hist if "reward" in h]
            axes[0].plot(*zip(*rw, strict=True), marker="o", ms=3, label=a)
            axes[1].plot(st, [h["entropy"] for h in hist], label=a)
            if a == "tr_dual":
                axes[2].plot(st, [h["tr_dual/kl_q_mean"] for h in hist], label="mean KL̂_x")
                axes[2].plot(st, [h["tr_dual/kl_q_max"] for h in hist], label="max KL̂_x")
                axes[2].axhline(r["settings"]["delta"], ls="--", c="k", lw=0.8, label="δ")
        axes[0].set(title="train reward (per rollout batch)", xlabel="optimizer step")
        axes[1].set(title="token entropy (nats)", xlabel="optimizer step")
        axes[2].set(title="tr_dual per-query KL̂ (sequence ratio)", xlabel="optimizer step")
        for ax in axes:
            ax.legend(fontsize=7)
        fig.tight_layout()
        save_figure(fig, figure)
    return summary


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--arms", default="tr_dual,grpo")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--mu", type=int, default=2)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--lora-layers", type=int, default=6)
    ap.add_argument("--eval-prompts", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report", action="store_true", help="only merge finished arms")
    ap.add_argument("--figure", type=Path, default=None)
    a = ap.parse_args(argv)
    if not a.report:
        for arm in a.arms.split(","):
            run_arm(
                arm,
                a.out,
                steps=a.steps,
                prompts=a.prompts,
                group=a.group,
                mu=a.mu,
                lr=a.lr,
                lora_layers=a.lora_layers,
                eval_prompts=a.eval_prompts,
                seed=a.seed,
            )
    print(json.dumps(report(a.out, a.figure), indent=1))


if __name__ == "__main__":
    main()
