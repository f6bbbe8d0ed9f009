"""Policy losses on one path: the trust-region-dual loss (``tr_dual``, our reconstruction of
QUATRO) and the GRPO, DAPO, GSPO and KL-penalty baselines, with the same diagnostics.

Shapes: ``logp``, ``old_logp``, ``mask``: (B, T) per-token log-probabilities of the sampled
completion tokens under the current policy (with grad), the pre-update policy (recomputed by the
trainer, no grad) and the completion mask (1 = real token). ``rewards``: (B,). B = Q * G with the
G responses of one query in consecutive rows. All losses are minimised.

tr_dual (reconstruction, see docs/quatro.md): per query x with centred advantages A_i and the
per-query dual lambda_x from :func:`~icml26.quatro.dual.solve_dual` (detached),

    loss = - mean_x (1/G) sum_i [ rho_i A_i - lambda_x * phi(rho_i) ],
    phi(rho) = rho log rho                (``kl_form="rho_log_rho"``, the Lagrangian of KL(pi||pi_old))
             = rho log rho - rho + 1      (``kl_form="k3"``, same expectation, zero gradient at rho=1)

so the per-sample gradient factor is ``rho_i [A_i - lambda_x (1 + log rho_i)]`` (or without the
1 for k3): never masked, pulling drifted samples back from either side.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch

from icml26.quatro.dual import group_advantages, solve_dual

__all__ = ["LossConfig", "METHODS", "policy_loss", "loss_config"]

METHODS = ("tr_dual", "grpo", "dapo", "gspo", "kl_penalty")
RATIO_LEVELS = ("sequence", "seq_mean", "token")
AGGREGATIONS = ("seq_mean", "token_mean")


@dataclass(frozen=True)
class LossConfig:
    """One policy loss and its settings. Build with :func:`loss_config` for per-method defaults.

    method: one of ``METHODS``. eps_low / eps_high: clip range ``[1-eps_low, 1+eps_high]`` of the
    clipped methods. delta: trust-region radius in nats (tr_dual). beta: KL-penalty weight
    (kl_penalty). ratio_level: ``sequence`` (rho = pi(y)/pi_old(y)), ``seq_mean``
    (length-normalised, GSPO's), ``token`` (per-token rho). aggregation: ``seq_mean`` (mean over
    each sequence's tokens, then over sequences: TRL ``grpo``) or ``token_mean`` (mean over all
    tokens of the batch: TRL ``dapo``). scale_adv: divide centred rewards by the group std.
    kl_form: tr_dual's penalty, ``rho_log_rho`` or ``k3``. dual_iters: the damped Newton
    steps of :func:`solve_dual` (from its moment start; no bisection phase since issue 36).
    """

    method: str = "tr_dual"
    eps_low: float = 0.2
    eps_high: float = 0.2
    delta: float = 0.05
    beta: float = 0.04
    ratio_level: str = "sequence"
    aggregation: str = "seq_mean"
    scale_adv: bool = False
    kl_form: str = "k3"
    dual_iters: int = 8

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; known: {', '.join(METHODS)}")
        if self.ratio_level not in RATIO_LEVELS:
            raise ValueError(
                f"`ratio_level` must be one of {RATIO_LEVELS}; got {self.ratio_level!r}"
            )
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(
                f"`aggregation` must be one of {AGGREGATIONS}; got {self.aggregation!r}"
            )
        if self.kl_form not in ("rho_log_rho", "k3"):
            raise ValueError(f"`kl_form` must be 'rho_log_rho' or 'k3'; got {self.kl_form!r}")
        if not (math.isfinite(self.delta) and self.delta > 0):
            raise ValueError(f"`delta` (trust-region radius) must be > 0; got {self.delta}")
        if not (0 <= self.eps_low < 1 and self.eps_high >= 0):
            raise ValueError(
                f"clip range needs 0 <= eps_low < 1, eps_high >= 0; got {self.eps_low}, {self.eps_high}"
            )
        if self.beta < 0:
            raise ValueError(f"`beta` must be >= 0; got {self.beta}")
        if self.dual_iters < 1:
            raise ValueError(f"`dual_iters` must be >= 1; got {self.dual_iters}")

    def to_dict(self) -> dict:
        return asdict(self)


_DEFAULTS = {
    # [ours] reconstruction: centred (not std-scaled) advantages, sequence-level ratio.
    "tr_dual": dict(ratio_level="sequence", aggregation="seq_mean", scale_adv=False),
    # TRL GRPOConfig defaults: epsilon 0.2, loss_type "grpo" (seq mean), scale_rewards "group".
    "grpo": dict(
        eps_low=0.2, eps_high=0.2, ratio_level="token", aggregation="seq_mean", scale_adv=True
    ),
    # DAPO clip-higher 0.2 / 0.28 with token-mean aggregation (TRL loss_type "dapo").
    "dapo": dict(
        eps_low=0.2, eps_high=0.28, ratio_level="token", aggregation="token_mean", scale_adv=True
    ),
    # GSPO: length-normalised sequence ratio, clip 3e-4 / 4e-4 (TRL importance_sampling_level "sequence").
    "gspo": dict(
        eps_low=3e-4, eps_high=4e-4, ratio_level="seq_mean", aggregation="seq_mean", scale_adv=True
    ),
    # No clip; beta * KL(pi_old || pi_theta) by the k3 estimator per token. [ours] beta 0.04.
    "kl_penalty": dict(beta=0.04, ratio_level="token", aggregation="seq_mean", scale_adv=True),
}


def loss_config(method: str, **overrides) -> LossConfig:
    """``LossConfig`` with ``method``'s defaults (see module table), then ``overrides``."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    return replace(LossConfig(method=method, **_DEFAULTS[method]), **overrides)


def _aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    if how == "token_mean":
        return (per_token * mask).sum() / mask.sum().clamp_min(1.0)
    return ((per_token * mask).sum(1) / mask.sum(1).clamp_min(1.0)).mean()


def _check(logp, old_logp, rewards, mask, group_size):
    if logp.shape != old_logp.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(
            f"logp, old_logp and mask must share one (B, T) shape; got {tuple(logp.shape)}, "
            f"{tuple(old_logp.shape)}, {tuple(mask.shape)}"
        )
    if rewards.shape != (logp.shape[0],):
        raise ValueError(f"rewards must be (B,)=({logp.shape[0]},); got {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError(f"group size G must be >= 2; got group_size={group_size}")
    if logp.shape[0] % group_size:
        raise ValueError(
            f"batch of {logp.shape[0]} rows is not a multiple of group_size={group_size}: a "
            "micro-batch must hold whole groups (per-query statistics need all G responses)"
        )
    m = mask.bool()
    for name, t in (("logp", logp), ("old_logp", old_logp)):
        if not torch.isfinite(t.detach()[m]).all():
            raise ValueError(f"{name} has non-finite values on unmasked tokens")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain non-finite values (NaN or inf)")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    group_size: int,
    config: LossConfig | str = "tr_dual",
    *,
    advantages: torch.Tensor | None = None,
    lam: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The scalar loss and detached diagnostics for one batch of whole groups.

    ``advantages`` (B,), if given, replaces the advantages computed from ``rewards`` (e.g. the
    ones a trainer already normalised). Stats: ``kl_q`` (Q,) per-query ``mean_i (rho log rho -
    rho + 1)`` with the sequence ratio (KL(pi||pi_old) estimate, nats); ``lam`` (Q,) (zeros for the
    baselines); ``ratio_q05/q50/q95`` of the per-token ratio; ``clip_frac`` (share of tokens whose
    gradient the clip zeroes); ``seq_log_ratio`` (B,).
    """
    cfg = loss_config(config) if isinstance(config, str) else config
    mask = mask.to(logp.dtype)
    _check(logp, old_logp, rewards, mask, group_size)
    if advantages is None:
        adv = group_advantages(rewards.to(logp.dtype), group_size, scale=cfg.scale_adv)
    else:
        if advantages.shape != rewards.shape:
            raise ValueError(f"advantages must be (B,); got {tuple(advantages.shape)}")
        adv = advantages.to(logp.dtype)
    lr = (logp - old_logp) * mask  # (B, T) per-token log ratio
    n_tok = mask.sum(1).clamp_min(1.0)
    seq_lr = lr.sum(1)  # (B,) log pi(y)/pi_old(y)
    zero_q = torch.zeros(logp.shape[0] // group_size, dtype=logp.dtype, device=logp.device)
    lam_in, lam = lam, zero_q
    clip_frac = torch.zeros((), dtype=logp.dtype, device=logp.device)

    if cfg.method == "tr_dual":
        if lam_in is None:
            lam = solve_dual(adv.detach(), cfg.delta, group_size, iters=cfg.dual_iters)
        else:
            lam = lam_in.detach().to(logp.dtype)
            if lam.shape != zero_q.shape:
                raise ValueError(
                    f"lam must be (Q,)=({zero_q.shape[0]},), one dual per query; got {tuple(lam.shape)}"
                )
            if not (torch.isfinite(lam).all() and (lam >= 0).all()):
                raise ValueError("lam (per-query duals) must be finite and >= 0")
        lam_b = lam.repeat_interleave(group_size)  # (B,)
        if cfg.ratio_level == "token":
            log_rho, a, l_ = lr, adv.unsqueeze(1), lam_b.unsqueeze(1)
        else:
            log_rho = seq_lr if cfg.ratio_level == "sequence" else seq_lr / n_tok
            a, l_ = adv, lam_b
        rho = log_rho.exp()
        phi = rho * log_rho if cfg.kl_form == "rho_log_rho" else rho * log_rho - rho + 1.0
        obj = rho * a - l_ * phi
        if cfg.ratio_level == "token":
            loss = -_aggregate(obj, mask, cfg.aggregation)
        else:
            loss = -obj.mean()
    elif cfg.method == "kl_penalty":
        rho = lr.exp()
        k3 = rho - 1.0 - lr  # KL(pi_old || pi_theta) per token, samples from pi_old
        per_tok = -(rho * adv.unsqueeze(1)) + cfg.beta * k3
        loss = _aggregate(per_tok, mask, cfg.aggregation)
    else:  # grpo, dapo, gspo: PPO clip at token level or with GSPO's length-normalised ratio
        if cfg.ratio_level == "token":
            log_w = lr
        elif cfg.ratio_level == "seq_mean":
            log_w = (seq_lr / n_tok).unsqueeze(1).expand_as(lr)
        else:
            log_w = seq_lr.unsqueeze(1).expand_as(lr)
        c1 = log_w.exp()
        c2 = c1.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
        a = adv.unsqueeze(1)
        per_tok = -torch.min(c1 * a, c2 * a)
        loss = _aggregate(per_tok, mask, cfg.aggregation)
        clipped = ((c1 < 1 - cfg.eps_low) & (a < 0)) | ((c1 > 1 + cfg.eps_high) & (a > 0))
        clip_frac = (clipped.to(mask.dtype) * mask).sum() / mask.sum().clamp_min(1.0)

    with torch.no_grad():
        sr = seq_lr.detach().view(-1, group_size)
        rs = sr.exp()
        kl_q = (rs * sr - rs + 1.0).mean(1)
        tok_ratio = lr.detach().exp()[mask.bool()]
        qs = (
            torch.quantile(
                tok_ratio.float(), torch.tensor([0.05, 0.5, 0.95], device=tok_ratio.device)
            )
            if tok_ratio.numel()
            else torch.ones(3, device=logp.device)
        )
    stats = {
        "kl_q": kl_q,
        "lam": lam.detach(),
        "ratio_q05": qs[0],
        "ratio_q50": qs[1],
        "ratio_q95": qs[2],
        "clip_frac": clip_frac.detach(),
        "seq_log_ratio": seq_lr.detach(),
    }
    return loss, stats
