"""TRL integration: ``TrDualGRPOTrainer``, a ``trl.GRPOTrainer`` subclass whose loss is
:func:`~icml26.quatro.losses.policy_loss` (the ``tr_dual`` reconstruction of QUATRO).

Needs ``trl`` (tested with ``trl==1.16.0``; the optional extra ``icml26[trl]``). Importing this
module without it raises an ``ImportError`` that says what to install; ``icml26.quatro`` itself
never imports TRL.

What the subclass changes, and nothing else (no TRL patch, TRL's generation, rewards, reference
model, LoRA and logging are used as they are):

1. ``TrDualGRPOConfig`` adds ``tr_*`` fields (radius, stabilizer form, ratio level, dual
   iterations) and defaults ``scale_rewards="none"`` (centred advantages ``R - mean R``, the
   reconstruction's choice; TRL's default ``"group"`` still works).
2. ``_generate_and_score_completions``: after TRL has scored the whole generation batch (where the
   G completions of a prompt are consecutive rows), the per-query dual ``lambda_x`` is solved once
   from TRL's advantages and attached to every row (``tr_lambda``), with a group id
   (``tr_group``). So lambda is fixed at rollout time, for all ``num_iterations`` reuses and
   whatever micro-batch a row lands in.
3. ``_prepare_inputs``: TRL shuffles the generation batch row by row before splitting it into
   ``steps_per_generation`` micro-batches, which scatters a group. Here the shuffle permutes whole
   groups, so a micro-batch of ``per_device_train_batch_size`` rows (a multiple of
   ``num_generations``) holds whole groups, which the per-query KL diagnostics need.
4. ``_compute_loss``: TRL's per-token log-probs and entropies (same call), old log-probs from TRL
   (``old_per_token_logps``, recomputed by the trainer; absent when ``num_iterations == 1``, where
   they equal the detached current ones), then ``policy_loss(..., advantages=TRL's, lam=rollout
   lambda)``, an optional reference KL ``beta * k3`` (TRL's, per-sequence token mean), divided by
   the gradient-accumulation steps as TRL's ``loss_type="grpo"``. A micro-batch that splits a
   group raises ``ValueError`` naming ``per_device_train_batch_size``.

Logged (``trainer.state.log_history``): ``tr_dual/kl_q_mean``, ``tr_dual/kl_q_max``,
``tr_dual/kl_le_2delta`` (share of queries with KL-hat <= 2 delta), ``tr_dual/lambda_mean``,
``tr_dual/lambda_max``, ``tr_dual/lambda_zero`` (share of queries with lambda = 0: equal rewards
or a constraint that cannot bind), ``tr_dual/ratio_q05|q50|q95``, plus TRL's ``entropy``.

Not supported (error): vLLM importance-sampling correction (``use_vllm`` with
``vllm_importance_sampling_correction``): TRL's correction is a per-token weight, and how it should
enter a sequence-level trust-region objective is an open choice, not made here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

try:
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import (
        split_pixel_values_by_grid,
        split_tensor_dict,
        unsplit_pixel_values_by_grid,
    )
except ImportError as exc:  # pragma: no cover - exercised only without trl
    raise ImportError(
        "icml26.quatro.trl_trainer needs TRL: pip install 'trl==1.16.0' "
        "(or the extra: pip install 'icml26[trl]'). The plain-PyTorch loss "
        "icml26.quatro.policy_loss and RLLoop work without it."
    ) from exc

from icml26.quatro.dual import solve_dual
from icml26.quatro.losses import RATIO_LEVELS, LossConfig, policy_loss

__all__ = ["TrDualGRPOConfig", "TrDualGRPOTrainer", "group_shuffle"]


@dataclass
class TrDualGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the trust-region-dual loss settings (all ``[ours]``, see docs/quatro.md).

    tr_delta: per-query KL radius in nats. tr_kl_form: ``"k3"`` (rho log rho - rho + 1) or
    ``"rho_log_rho"``. tr_ratio_level: ``"sequence"`` | ``"seq_mean"`` | ``"token"``.
    tr_dual_iters: the damped Newton steps of ``solve_dual`` (from its moment start).
    """

    tr_delta: float = field(default=0.05, metadata={"help": "per-query KL radius delta (nats)"})
    tr_kl_form: str = field(default="k3", metadata={"help": "'k3' or 'rho_log_rho'"})
    tr_ratio_level: str = field(
        default="sequence", metadata={"help": "'sequence', 'seq_mean' or 'token'"}
    )
    tr_dual_iters: int = field(default=8, metadata={"help": "Newton steps of solve_dual"})
    scale_rewards: str = field(
        default="none",
        metadata={"help": "TRL's advantage scaling; 'none' = centred rewards (tr_dual's default)"},
    )

    def __post_init__(self):
        super().__post_init__()
        if self.tr_ratio_level not in RATIO_LEVELS:
            raise ValueError(
                f"tr_ratio_level must be one of {RATIO_LEVELS}; got {self.tr_ratio_level!r}"
            )
        # LossConfig validates delta, kl_form and dual_iters with messages naming them.
        self.tr_loss_config()

    def tr_loss_config(self) -> LossConfig:
        """The :class:`LossConfig` this trainer's loss uses."""
        return LossConfig(
            method="tr_dual",
            delta=self.tr_delta,
            kl_form=self.tr_kl_form,
            ratio_level=self.tr_ratio_level,
            aggregation="seq_mean",
            scale_adv=False,  # advantages come from TRL (scale_rewards decides)
            dual_iters=self.tr_dual_iters,
        )


def group_shuffle(batch: dict, group_size: int, generator: torch.Generator | None = None) -> dict:
    """Permute whole groups of ``group_size`` consecutive rows of every sequence value in
    ``batch`` (tensors with a batch dimension and lists); 0-d tensors and ``None`` pass through."""
    n = len(next(v for v in batch.values() if v is not None and not _is_scalar(v)))
    if n % group_size:
        raise ValueError(
            f"generation batch of {n} rows is not a multiple of num_generations={group_size}"
        )
    perm = torch.randperm(n // group_size, generator=generator)
    rows = (perm.unsqueeze(1) * group_size + torch.arange(group_size)).reshape(-1)

    def permute(v):
        if v is None or _is_scalar(v):
            return v
        if isinstance(v, torch.Tensor):
            return v[rows.to(v.device)]
        return [v[i] for i in rows.tolist()]

    return {k: permute(v) for k, v in batch.items()}


def _is_scalar(v) -> bool:
    return isinstance(v, torch.Tensor) and v.ndim == 0


class TrDualGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with the per-query trust-region-dual loss. Use as ``GRPOTrainer`` with a
    :class:`TrDualGRPOConfig` (a plain ``GRPOConfig`` gets the ``tr_*`` defaults)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, TrDualGRPOConfig):
            defaults = TrDualGRPOConfig.__dataclass_fields__
            for name in ("tr_delta", "tr_kl_form", "tr_ratio_level", "tr_dual_iters"):
                setattr(self.args, name, defaults[name].default)
        self.tr_config = TrDualGRPOConfig.tr_loss_config(self.args)
        if self.use_vllm and getattr(self.args, "vllm_importance_sampling_correction", False):
            raise ValueError(
                "TrDualGRPOTrainer does not implement vLLM importance-sampling correction; set "
                "vllm_importance_sampling_correction=False (or use_vllm=False)"
            )
        if self.args.per_device_train_batch_size % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size={self.args.per_device_train_batch_size} must be a "
                f"multiple of num_generations={self.num_generations}: tr_dual's per-query "
                "statistics need whole groups in every micro-batch"
            )

    def _group_size(self) -> int:
        return self.num_generations if self.model.training else self.num_generations_eval

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        g = self._group_size()
        adv = out["advantages"]
        lam = solve_dual(
            adv.detach().float(), self.tr_config.delta, g, iters=self.tr_config.dual_iters
        )
        out["tr_lambda"] = lam.repeat_interleave(g).to(adv.device)
        out["tr_group"] = torch.arange(adv.shape[0] // g, device=adv.device).repeat_interleave(g)
        return out

    def _prepare_inputs(self, generation_batch):
        mode = "train" if self.model.training else "eval"
        if mode != "train":
            return self._generate_and_score_completions(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            batch = split_pixel_values_by_grid(batch)
            batch = group_shuffle(batch, self.num_generations)
            parts = split_tensor_dict(batch, self.args.steps_per_generation)
            self._buffered_inputs = [unsplit_pixel_values_by_grid(b) for b in parts]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _compute_loss(self, model, inputs):
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = (
            completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        )
        extra = {
            k: inputs.get(k)
            for k in (
                "pixel_values",
                "image_grid_thw",
                "num_images",
                "pixel_attention_mask",
                "spatial_shapes",
                "num_tiles",
                "image_sizes",
                "token_type_ids",
                "mm_token_type_ids",
                "image_position_ids",
            )
        }
        logp, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True, **extra
        )
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old
        g = self._group_size()
        groups = inputs["tr_group"]
        if groups.shape[0] % g or not bool((groups.view(-1, g) == groups.view(-1, g)[:, :1]).all()):
            raise ValueError(
                "a micro-batch splits a group (the num_generations completions of one prompt): "
                f"per_device_train_batch_size={self.args.per_device_train_batch_size} must be a "
                f"multiple of num_generations={g}"
            )
        adv = inputs["advantages"]
        lam_q = inputs["tr_lambda"].view(-1, g)[:, 0]
        loss, stats = policy_loss(
            logp, old, adv, mask, g, self.tr_config, advantages=adv, lam=lam_q
        )
        mode = "train" if self.model.training else "eval"
        m = self._metrics[mode]
        if self.beta != 0.0:
            ref = inputs["ref_per_token_logps"]
            per_token_kl = torch.exp(ref - logp) - (ref - logp) - 1
            fm = mask.to(logp.dtype)
            loss = (
                loss + self.beta * ((per_token_kl * fm).sum(-1) / fm.sum(-1).clamp(min=1.0)).mean()
            )
            m["kl"].append(((per_token_kl * fm).sum() / fm.sum().clamp(min=1.0)).item())
        if mode == "train":
            loss = loss / self.current_gradient_accumulation_steps
        fm = mask.to(entropies.dtype)
        m["entropy"].append(((entropies * fm).sum() / fm.sum().clamp(min=1.0)).item())
        kl_q, lam = stats["kl_q"], stats["lam"]
        m["tr_dual/kl_q_mean"].append(kl_q.mean().item())
        m["tr_dual/kl_q_max"].append(kl_q.max().item())
        m["tr_dual/kl_le_2delta"].append((kl_q <= 2 * self.tr_config.delta).float().mean().item())
        m["tr_dual/lambda_mean"].append(lam.mean().item())
        m["tr_dual/lambda_max"].append(lam.max().item())
        m["tr_dual/lambda_zero"].append((lam == 0).float().mean().item())
        for q in ("q05", "q50", "q95"):
            m[f"tr_dual/ratio_{q}"].append(float(stats[f"ratio_{q}"]))
        return loss
