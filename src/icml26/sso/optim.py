"""SSO — steepest descent on the spectral sphere ‖W‖₂ = R (Xie et al., 2026, Algorithm 1).

The math is :func:`sso_update`, a pure function of one batch of same-shape atomic matrices; the
:class:`SSO` optimizer owns the state (momentum, λ, cached singular vectors), splits parameters
into atomic matrices (per attention head with ``split=head_dim``; 3-D parameters are batches of
matrices, e.g. MoE experts), batches every atom of one shape into one call, and handles DTensor
(FSDP2) parameters by gathering whole matrices.

Per atomic matrix ``W ∈ R^{m×n}`` (``m = d_out``), with ``R = c·sqrt(m/n)``:

1. ``M ← βM + (1−β)G``; Nesterov uses ``lerp(G, M, β) = (1−β)G + βM`` (the official port's rule).
2. ``M̂ = M/‖M‖_F``.
3. ``(σ, u, v)`` by power iteration on W, warm-started from the cached v; ``Θ = u vᵀ``.
4. Retract: ``W ← W·R/σ`` (before the update, so one power iteration serves both).
5. ``λ*``: root of ``h(λ) = ⟨Θ, msign(M̂ + λΘ)⟩`` (bracket from the previous λ, then bisect).
6. ``Φ = msign(M̂ + λ*Θ)``; ``W ← W − η·R·Φ``. No weight decay: the retraction bounds W.

``mode="muonsphere"`` is the paper's cheap λ = 0 variant (retract, then a Muon step of size ηR).

One optimizer for a whole model: each param group carries ``algorithm`` — ``"sso"``,
``"muonsphere"`` or ``"adamw"`` (the layout of Muon-with-auxiliary-Adam optimizers) — so
embeddings, norms, biases and the LM head step with AdamW (torch's own ``adam`` kernel with
decoupled weight decay) inside the same :class:`SSO`; LR schedulers, HF ``Trainer`` and
``state_dict`` see one ``torch.optim.Optimizer``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch.optim import Optimizer

from icml26.sso.spectral import msign, power_iteration, solve_lambda

__all__ = ["SSO", "sso_update", "AtomUpdate", "atom_view", "radius"]

MODES = ("sso", "muonsphere")
SEEDS = ("secant", "fixed")
ALGORITHMS = (*MODES, "adamw")


def radius(d_out: int, d_in: int, scaler: float = 1.0) -> float:
    """Spectral-μP radius ``R = c·sqrt(d_out/d_in)`` of a ``(d_out, d_in)`` matrix."""
    return scaler * math.sqrt(d_out / d_in)


@dataclass
class AtomUpdate:
    """Output of :func:`sso_update` for B atoms ``(B, m, n)``.

    ``w``: the updated weights; ``sigma``: ‖W‖₂ measured before retraction; ``u (B, m)``,
    ``v (B, n)``: its top singular vectors; ``lam (B,)``; ``h (B,)`` = ⟨Θ, Φ⟩ (tangency
    residual); ``evals``: msign calls of the solver (0 for muonsphere); ``slope (B,)``: the
    solver's secant slope of h at the end (the next step's ``slope0``; NaN where unmeasured,
    None for muonsphere).
    """

    w: torch.Tensor
    sigma: torch.Tensor
    u: torch.Tensor
    v: torch.Tensor
    lam: torch.Tensor
    h: torch.Tensor
    evals: int
    slope: torch.Tensor | None = None


def sso_update(
    w: torch.Tensor,
    m: torch.Tensor,
    v0: torch.Tensor | None,
    lam0: torch.Tensor,
    radius_: torch.Tensor,
    *,
    lr: float,
    mode: str = "sso",
    power_iter_steps: int = 5,
    msign_steps: int = 8,
    solver_tol: float = 2e-4,
    solver_max_iter: int = 20,
    solver_max_expand: int = 10,
    solver_init_step: float = 1e-3,
    eps: float = 1e-7,
    early_exit: bool = True,
    solver: str = "bisect",
    slope0: torch.Tensor | None = None,
) -> AtomUpdate:
    """One SSO step (Algorithm 1, steps 2-7) for B atomic matrices of one shape.

    ``w (B, m, n)`` weights; ``m (B, m, n)`` the (Nesterov) momentum; ``v0 (B, n)`` cached right
    singular vectors or None; ``lam0 (B,)`` previous λ; ``radius_ (B,)`` target radii R;
    ``slope0 (B,)`` the previous step's secant slope of h (seeds the bracket, see
    :func:`~icml26.sso.spectral.solve_lambda`) or None for the fixed ``init_step`` bracket.
    Returns the new weights in ``w``'s dtype; nothing is modified in place.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    work = torch.float64 if w.dtype == torch.float64 else torch.float32
    g = m.to(work)
    g = g / (torch.linalg.matrix_norm(g, ord="fro", keepdim=True) + eps)  # M̂
    sigma, u, v = power_iteration(w, v0, steps=power_iter_steps)
    r = radius_.to(work)
    w_ret = w.to(work) * (r / sigma.clamp_min(torch.finfo(work).tiny)).view(-1, 1, 1)

    def ms(x):
        return msign(x, msign_steps, dtype=work)

    if mode == "sso":
        sol = solve_lambda(g, u, v, lam0, tol=solver_tol, max_iter=solver_max_iter,
                           max_expand=solver_max_expand, init_step=solver_init_step,
                           msign_fn=ms, early_exit=early_exit, method=solver, slope0=slope0)
        phi, lam, h, evals, slope = sol.phi, sol.lam, sol.h, sol.iterations, sol.slope
    else:
        phi = ms(g)
        lam = torch.zeros_like(lam0, dtype=work)
        h = (u.unsqueeze(-2) @ phi @ v.unsqueeze(-1)).reshape(-1)
        evals, slope = 0, None
    w_new = w_ret - (lr * r).view(-1, 1, 1) * phi
    return AtomUpdate(w_new.to(w.dtype), sigma, u, v, lam, h, evals, slope)


def atom_view(shape: torch.Size | tuple[int, ...], split: int | None) -> tuple[int, int, int]:
    """``(B, m, n)``: how a parameter of ``shape`` splits into atomic matrices.

    2-D ``(d_out, d_in)`` with ``split=s`` gives ``d_out/s`` atoms of ``(s, d_in)`` (one per head
    for q/k/v with ``s = head_dim``); 3-D ``(E, d_out, d_in)`` gives ``E·d_out/s`` atoms.
    """
    if len(shape) not in (2, 3):
        raise ValueError(f"SSO needs 2-D or 3-D parameters; got shape {tuple(shape)}")
    batch = shape[0] if len(shape) == 3 else 1
    rows, cols = shape[-2], shape[-1]
    s = rows if split is None else int(split)
    if s < 1 or rows % s:
        raise ValueError(f"split={split} must divide the row count {rows} of shape {tuple(shape)}")
    return batch * rows // s, s, cols


def _check_adamw(group: dict, gi: int) -> None:
    lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
    if not (isinstance(lr, (int, float)) and lr >= 0 and math.isfinite(lr)):
        raise ValueError(f"param group {gi} (adamw): lr must be a finite number >= 0; got {lr!r}")
    betas = group["betas"]
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"param group {gi} (adamw): betas must be two numbers in [0, 1); "
                         f"got {betas!r}")
    if not eps >= 0:
        raise ValueError(f"param group {gi} (adamw): eps must be >= 0; got {eps!r}")
    if not wd >= 0:
        raise ValueError(f"param group {gi} (adamw): weight_decay must be >= 0; got {wd!r}")


def _is_dtensor(t: torch.Tensor) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        return False
    return isinstance(t, DTensor)


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if _is_dtensor(t) else t


def _write_full(p: torch.Tensor, full: torch.Tensor) -> None:
    """Copy a whole matrix into ``p``; a DTensor keeps only its own shard (no communication)."""
    if not _is_dtensor(p):
        p.copy_(full.view_as(p))
        return
    from torch.distributed.tensor import DTensor, Replicate

    rep = DTensor.from_local(full.view(p.shape), p.device_mesh, [Replicate()] * p.device_mesh.ndim,
                             run_check=False)
    p.to_local().copy_(rep.redistribute(p.device_mesh, p.placements).to_local())


class SSO(Optimizer):
    """Spectral Sphere Optimizer for hidden 2-D (and batched 3-D) weights.

    Parameters
    ----------
    params : iterable of tensors or param-group dicts
        Group keys beyond the defaults: ``algorithm`` (``"sso"``, ``"muonsphere"`` or
        ``"adamw"``; default ``mode``), ``split`` (rows per atomic matrix, e.g. ``head_dim`` for
        q/k/v; ``None`` = whole matrix) and ``names`` (parameter names, used in error messages).
        An ``"adamw"`` group takes any shape and the keys ``lr``, ``betas``, ``eps``,
        ``weight_decay`` (defaults ``adamw_lr``, ``adamw_betas``, ``adamw_eps``,
        ``adamw_weight_decay``); it never inherits the spectral ``lr``.
    lr : float
        η; the spectral norm of each update is ``η·R`` ("spectral μP" LR scaling). Default 0.02.
    momentum : float in [0, 1)
        β of the EMA ``M ← βM + (1−β)G``. Default 0.9.
    nesterov : bool
        Apply msign to ``lerp(G, M, β)`` instead of ``M``. Default True.
    radius_scaler : float > 0
        c in ``R = c·sqrt(d_out/d_in)``. Default 1.0 (the paper's radius search favoured c≈2).
    power_iter_steps, msign_steps : int
        Power-iteration steps (warm-started) and Polar Express Newton–Schulz steps (8).
    solver_tol, solver_max_iter : float, int
        Bisection stops when |⟨Θ, Φ⟩| ≤ tol (2e-4, the paper's runs) or after max_iter (20).
    eps : float
        Added to ‖M‖_F in the normalization.
    mode : "sso" or "muonsphere"
        The ``algorithm`` of groups that do not name one. "muonsphere" fixes λ = 0
        (retraction + Muon step), the paper's cheap ablation.
    adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay
        Defaults of ``"adamw"`` groups: 3e-3, (0.9, 0.95), 1e-8, 0.0 (decoupled, as
        ``torch.optim.AdamW``; :func:`~icml26.sso.groups.sso_param_groups` sets 0.1 per group).
    solver : "bisect" or "illinois"
        How the bracket shrinks: bisection (the paper) or Illinois false position (same bracket
        and stopping rule |h| ≤ tol, so the same root to within tol, in fewer msign calls).
    solver_seed : "secant" or "fixed"
        Where the bracket search starts. "secant" (default): the first probe is the Newton point
        from the previous step's secant slope of h (kept per atom as state ``slope``), and the
        expansion continues from that step size; the first step, and atoms without a valid
        slope, use the fixed one. "fixed": steps of ``1e-3·2ᵏ`` from the previous λ (the
        paper's bracket). Both stop at |h| ≤ tol: the same root to within tol.
    early_exit : bool
        Stop the λ solver once every matrix converged (a host sync per iteration; default). False
        runs a fixed iteration count with no host sync (GPU-friendly).

    State per SSO parameter: ``momentum_buffer`` (like the parameter, sharded like a DTensor), and
    per atom ``lam (B,)``, ``slope (B,)`` (the solver's secant slope; NaN until measured),
    ``u (B, m)``, ``v (B, n)`` (float32/64, replicated), ``step``.
    After each ``step`` the attribute ``last_stats`` holds per-atom tensors ``sigma_ratio``
    (σ/R at retraction), ``lam``, ``h`` and the solver's ``evals`` per shape bucket. State per
    AdamW parameter: ``step``, ``exp_avg``, ``exp_avg_sq`` (``torch.optim.AdamW``'s names).
    """

    def __init__(self, params, lr: float = 0.02, momentum: float = 0.9, nesterov: bool = True,
                 radius_scaler: float = 1.0, power_iter_steps: int = 5, msign_steps: int = 8,
                 solver_tol: float = 2e-4, solver_max_iter: int = 20, eps: float = 1e-7,
                 mode: str = "sso", *, split: int | None = None, early_exit: bool = True,
                 solver: str = "bisect", solver_seed: str = "secant", adamw_lr: float = 3e-3,
                 adamw_betas: tuple[float, float] = (0.9, 0.95), adamw_eps: float = 1e-8,
                 adamw_weight_decay: float = 0.0):
        if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
            raise ValueError(f"lr must be a finite number > 0; got {lr!r}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1); got {momentum!r}")
        if not radius_scaler > 0:
            raise ValueError(f"radius_scaler must be > 0; got {radius_scaler!r}")
        if not solver_tol > 0:
            raise ValueError(f"solver_tol must be > 0; got {solver_tol!r}")
        for name, val in (("power_iter_steps", power_iter_steps), ("msign_steps", msign_steps)):
            if int(val) < 1:
                raise ValueError(f"{name} must be >= 1; got {val!r}")
        if solver_max_iter < 0:
            raise ValueError(f"solver_max_iter must be >= 0; got {solver_max_iter!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
        if solver not in ("bisect", "illinois"):
            raise ValueError(f"solver must be 'bisect' or 'illinois'; got {solver!r}")
        if solver_seed not in SEEDS:
            raise ValueError(f"solver_seed must be one of {SEEDS}; got {solver_seed!r}")
        self._adamw_defaults = dict(lr=adamw_lr, betas=tuple(adamw_betas), eps=adamw_eps,
                                    weight_decay=adamw_weight_decay)
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, radius_scaler=radius_scaler,
                        power_iter_steps=power_iter_steps, msign_steps=msign_steps,
                        solver_tol=solver_tol, solver_max_iter=solver_max_iter, eps=eps,
                        mode=mode, algorithm=mode, split=split, names=None, solver=solver,
                        solver_seed=solver_seed)
        self.early_exit = early_exit
        self.last_stats: dict[str, torch.Tensor] = {}
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        """Torch's ``add_param_group`` with SSO's checks: a known ``algorithm``; 2-D/3-D
        parameters whose rows ``split`` divides in SSO groups; AdamW hyper-parameters (never the
        spectral ``lr``) filled into ``"adamw"`` groups."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param group must be a dict; got {type(param_group).__name__}")
        gi = len(self.param_groups)
        algo = param_group.get("algorithm", param_group.get("mode", self.defaults["mode"]))
        if algo not in ALGORITHMS:
            raise ValueError(f"param group {gi}: algorithm must be one of {ALGORITHMS}; "
                             f"got {algo!r}")
        group = dict(param_group, algorithm=algo)
        if algo == "adamw":
            for k, v in self._adamw_defaults.items():
                group.setdefault(k, v)
            _check_adamw(group, gi)
        group["mode"] = algo  # the pre-``algorithm`` key, kept equal for old readers
        params = group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        group["params"] = params
        try:
            super().add_param_group(group)
        except ValueError as e:  # torch: "some parameters appear in more than one group"
            raise ValueError(f"param group {gi} ({algo}): {e}") from None
        if algo == "adamw":
            return
        group = self.param_groups[-1]
        if group["solver"] not in ("bisect", "illinois"):
            raise ValueError(f"param group {gi}: solver must be 'bisect' or 'illinois'; got "
                             f"{group['solver']!r}")
        if group.get("solver_seed", "secant") not in SEEDS:
            raise ValueError(f"param group {gi}: solver_seed must be one of {SEEDS}; got "
                             f"{group['solver_seed']!r}")
        for pi, p in enumerate(group["params"]):
            if p.ndim not in (2, 3):
                raise ValueError(f"SSO takes 2-D or 3-D parameters only; "
                                 f"{self._name(group, gi, pi)} has shape {tuple(p.shape)} "
                                 f"(put 1-D parameters in a group with algorithm='adamw')")
            atom_view(p.shape, group["split"])
            if torch.is_complex(p):
                raise ValueError(f"SSO does not support complex {self._name(group, gi, pi)}")

    @staticmethod
    def _name(group, gi: int, pi: int) -> str:
        names = group.get("names")
        if names:
            return f"parameter {names[pi]!r}"
        return f"parameter {pi} of param group {gi}"

    def load_state_dict(self, state_dict) -> None:
        """Torch's loader, plus a check that groups and per-parameter state shapes match."""
        groups = state_dict.get("param_groups", [])
        if len(groups) != len(self.param_groups) or any(
            len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups, strict=True)
        ):
            raise ValueError("SSO.load_state_dict: the saved param groups do not match this "
                             "optimizer's (different number of groups or of parameters)")
        saved = state_dict.get("state", {})
        for a, b in zip(groups, self.param_groups, strict=True):
            if a.get("algorithm", a.get("mode")) != b["algorithm"]:
                raise ValueError(f"SSO.load_state_dict: saved algorithm "
                                 f"{a.get('algorithm', a.get('mode'))!r} differs from "
                                 f"{b['algorithm']!r}")
            if b["algorithm"] == "adamw":
                continue
            if a.get("split") != b.get("split"):
                raise ValueError(f"SSO.load_state_dict: saved split {a.get('split')} differs "
                                 f"from {b.get('split')}")
            for pid, p in zip(a["params"], b["params"], strict=True):
                st = saved.get(pid)
                if st is None:
                    continue
                mb = st.get("momentum_buffer")
                if mb is not None and tuple(mb.shape) != tuple(p.shape):
                    raise ValueError(f"SSO.load_state_dict: momentum of shape {tuple(mb.shape)} "
                                     f"for a parameter of shape {tuple(p.shape)}")
                nb, mm, nn_ = atom_view(p.shape, b["split"])
                if st.get("v") is not None and tuple(st["v"].shape) != (nb, nn_):
                    raise ValueError(f"SSO.load_state_dict: cached v of shape "
                                     f"{tuple(st['v'].shape)}, expected {(nb, nn_)}")
        super().load_state_dict(state_dict)

    @torch.no_grad()
    def step(self, closure=None):
        """One SSO step on every parameter with a gradient; returns ``closure()``'s loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        stats = defaultdict(list)
        for gi, group in enumerate(self.param_groups):
            if group["algorithm"] == "adamw":
                self._step_adamw(group, gi)
                continue
            beta = group["momentum"]
            buckets: dict[tuple, list] = defaultdict(list)
            for pi, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                grad = p.grad
                name = self._name(group, gi, pi)
                if grad.is_sparse:
                    raise ValueError(f"SSO does not support sparse gradients ({name})")
                if torch.is_complex(grad):
                    raise ValueError(f"SSO does not support complex gradients ({name})")
                if not bool(torch.isfinite(_full(grad)).all()):
                    raise ValueError(f"non-finite gradient (NaN/inf) in {name}")
                self._check_placement(p, name)
                state = self.state[p]
                nb, mm, nn_ = atom_view(p.shape, group["split"])
                work = torch.float64 if p.dtype == torch.float64 else torch.float32
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["momentum_buffer"] = torch.zeros_like(p)
                    state["lam"] = torch.zeros(nb, dtype=work, device=_full(grad).device)
                    state["slope"] = torch.full((nb,), float("nan"), dtype=work,
                                                device=_full(grad).device)
                    state["u"] = None
                    state["v"] = None
                buf = state["momentum_buffer"]
                buf.lerp_(grad, 1.0 - beta)
                upd = grad.lerp(buf, beta) if group["nesterov"] else buf
                buckets[(mm, nn_)].append((p, name, state, _full(upd).reshape(nb, mm, nn_),
                                           _full(p).reshape(nb, mm, nn_)))
            for (mm, nn_), items in buckets.items():
                self._step_bucket(group, mm, nn_, items, stats)
        self.last_stats = {k: torch.cat(v) if k != "evals" else torch.tensor(v)
                           for k, v in stats.items()}
        return loss

    def _step_adamw(self, group, gi: int) -> None:
        """One AdamW step on an ``"adamw"`` group: torch's single-tensor ``adam`` kernel with
        decoupled weight decay, i.e. ``torch.optim.AdamW(foreach=False)`` bit for bit."""
        from torch.optim.adam import adam

        params, grads, avgs, sqs, steps = [], [], [], [], []
        for pi, p in enumerate(group["params"]):
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise ValueError(f"AdamW group does not support sparse gradients "
                                 f"({self._name(group, gi, pi)})")
            state = self.state[p]
            if not state:
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            params.append(p)
            grads.append(p.grad)
            avgs.append(state["exp_avg"])
            sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if not params:
            return
        b1, b2 = group["betas"]
        adam(params, grads, avgs, sqs, [], steps, foreach=False,
             has_complex=any(torch.is_complex(p) for p in params), decoupled_weight_decay=True,
             amsgrad=False, beta1=b1, beta2=b2, lr=group["lr"], weight_decay=group["weight_decay"],
             eps=group["eps"], maximize=False)

    def _step_bucket(self, group, mm: int, nn_: int, items: list, stats) -> None:
        w = torch.cat([it[4] for it in items])
        m = torch.cat([it[3] for it in items])
        sizes = [it[4].size(0) for it in items]
        have_v = all(it[2]["v"] is not None for it in items)
        work = torch.float64 if w.dtype == torch.float64 else torch.float32
        # (torch's load_state_dict casts floating state to the parameter dtype: undo for bf16)
        v0 = torch.cat([it[2]["v"].to(work) for it in items]) if have_v else None
        lam0 = torch.cat([it[2]["lam"].to(work) for it in items])
        slope0 = None
        if group["algorithm"] == "sso" and group.get("solver_seed", "secant") == "secant":
            # (state saved before the secant seed existed has no slope: start unmeasured)
            slope0 = torch.cat([it[2]["slope"].to(work) if it[2].get("slope") is not None
                                else torch.full_like(it[2]["lam"], float("nan"), dtype=work)
                                for it in items])
        r = torch.full((w.size(0),), radius(mm, nn_, group["radius_scaler"]),
                       dtype=lam0.dtype, device=lam0.device)
        out = sso_update(w, m, v0, lam0, r, lr=group["lr"], mode=group["algorithm"],
                         power_iter_steps=group["power_iter_steps"],
                         msign_steps=group["msign_steps"], solver_tol=group["solver_tol"],
                         solver_max_iter=group["solver_max_iter"], eps=group["eps"],
                         early_exit=self.early_exit, solver=group["solver"], slope0=slope0)
        bad = out.sigma <= 0
        if bool(bad.any()):
            k = int(torch.nonzero(bad)[0])
            owner = next(i for i, c in enumerate(torch.tensor(sizes).cumsum(0).tolist()) if k < c)
            raise ValueError(f"{items[owner][1]} is an all-zero matrix (σ = 0): it cannot be "
                             f"retracted onto the spectral sphere")
        start = 0
        for (p, _name, state, _m, _w), n in zip(items, sizes, strict=True):
            sl = slice(start, start + n)
            start += n
            _write_full(p, out.w[sl])
            state["u"], state["v"] = out.u[sl].clone(), out.v[sl].clone()
            state["lam"] = out.lam[sl].clone()
            if out.slope is not None:
                state["slope"] = out.slope[sl].clone()
            state["step"] += 1
        stats["sigma_ratio"].append(out.sigma / r)
        stats["lam"].append(out.lam)
        stats["h"].append(out.h)
        stats["evals"].append(out.evals)

    @staticmethod
    def _check_placement(p: torch.Tensor, name: str) -> None:
        if not _is_dtensor(p):
            return
        from torch.distributed.tensor import Replicate, Shard

        for pl in p.placements:
            if not (isinstance(pl, Replicate) or (isinstance(pl, Shard) and pl.dim == 0)):
                raise ValueError(f"SSO gathers whole matrices and supports DTensor placements "
                                 f"Shard(0) and Replicate only; {name} has {p.placements}")

    @torch.no_grad()
    def spectral_init_(self) -> None:
        """Rescale every atom of the SSO/MuonSphere groups onto its sphere, ``W ← R·W/‖W‖₂``
        (exact σ; the paper's μP init). AdamW groups are left as they are."""
        for group in self.param_groups:
            if group["algorithm"] == "adamw":
                continue
            for p in group["params"]:
                nb, mm, nn_ = atom_view(p.shape, group["split"])
                w = _full(p).reshape(nb, mm, nn_)
                sig = torch.linalg.matrix_norm(w.double(), ord=2)
                if bool((sig <= 0).any()):
                    raise ValueError(f"cannot spectral-init an all-zero matrix of shape {tuple(p.shape)}")
                r = radius(mm, nn_, group["radius_scaler"])
                _write_full(p, (w.double() * (r / sig).view(-1, 1, 1)).to(p.dtype))
