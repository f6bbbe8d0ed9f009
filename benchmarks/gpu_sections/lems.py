"""LEMS + KFAC-SVD: K-FAC statistics and whitened SVD on the device against the CPU, and their cost.

Only the statistics / factorization / low-rank parts are used: the rank search (``search.py``)
imports optuna, which the bare GPU machine lacks, so nothing here imports it (``--block-imports
optuna`` proves it).

Checks (tiny float64 Llama, 2 blocks, hidden 32, d_ff 64, the same weights on both devices):

- ``collect_kfac_stats`` on the device vs the CPU: input covariances A, token-wise output-gradient
  covariances G, ASVD |x| sums and FWSVD row Fisher, within the float32 accumulation bound
  ``2 (N + n) eps32 max diag`` per matrix (N tokens, n its width; statistics are float32 sums by
  design); token counts and the A-sharing map equal; layer 0's q_proj A against ``sum x x^T`` of
  the RMSNorm output recomputed on the CPU in float64 (independent reference);
- ``factorize(method="kfac")`` (float64) on the device from the CPU's statistics: whitened
  singular values and the rank-r weights ``left[:, :r] @ right[:r]`` (r at the widest spectral gap
  in [n/4, 3n/4], so the product is unique) equal the CPU's to float64 accuracy scaled by
  ``s_1 / gap``; independent: the full-rank product is W, and SVD-LLM's whitened truncation error
  ``||(W - W_r) L_A||_F^2`` equals ``sum_{i>r} s_i^2`` (Eckart-Young, closed form);
- after ``apply_ranks_`` with those ranks, logits on the device equal the CPU's within float32
  accuracy (transformers runs RMSNorm and RoPE in float32 even in a float64 model).

Timings (``paper``: a Llama-3-8B-shaped ``LlamaForCausalLM`` with 2 blocks and the full 128k
head, random bf16 weights built on the device; ``tiny``: the float32 tiny model), ms:

- K-FAC statistics over 1 x 2048 tokens (forward + backward with the A/G hooks, the method's
  loss) vs a plain forward of the same tokens, and vs forward + backward without hooks;
- whitened SVD of block 0's k_proj (1024 x 4096; float64 as in ``factorize``): KFAC vs plain SVD;
  o_proj (4096 x 4096) once each where the share allows.

Paper memory: weights 1.05 GB (embeddings) + 1.05 GB (head) + 2 x 0.44 GB; float32 statistics per
block 1.0 GB (A: 3 x 4096^2 + 14336^2) + 1.8 GB (G: q, k, v, o, gate, up, down), held twice while a
batch is added, so ~12 GB for 2 blocks; logits 2048 x 128256 in float32 1 GB plus its gradient.
"""

from __future__ import annotations

import torch

from gpu_sections.cat import EPS32, EPS64, fp32_tol, llama8b

WEIGHT = 2.0


def _tiny(dtype):
    from icml26.core.lm import tiny_llama

    model, _ = tiny_llama(hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=0, dtype=dtype)
    return model.requires_grad_(False)


def _ids(shape, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=g)


def _worst_ratio(pairs) -> float:
    """max over (got, ref, bound) of max|got - ref| / bound."""
    return max(float((g.detach().cpu().double() - r.detach().cpu().double()).abs().max()) / b
               for g, r, b in pairs)


# -- correctness ---------------------------------------------------------------------------
def _check_stats(ctx, m_cpu, m_dev, calib):
    from icml26.lems.stats import collect_kfac_stats

    st_c = collect_kfac_stats(m_cpu, calib)
    st_d = collect_kfac_stats(m_dev, calib)
    ctx.check("token counts and A-sharing map, device vs CPU",
              (st_d.tokens_a, st_d.tokens_g, st_d.a_owner) == (st_c.tokens_a, st_c.tokens_g,
                                                                  st_c.a_owner),
              note=f"{st_c.tokens_a} tokens for A, {st_c.tokens_g} for G")
    na, ng = st_c.tokens_a, st_c.tokens_g

    def bound(ref, n_tok, width):
        scale = float(ref.diagonal().abs().max()) if ref.dim() == 2 else float(ref.abs().max())
        return 2 * (n_tok + width) * EPS32 * scale

    rows = {
        "A (input covariances)": [(st_d.A[k], v, bound(v, na, v.shape[0]))
                                  for k, v in st_c.A.items()],
        "G (token-wise output-gradient covariances)": [(st_d.G[k], v, bound(v, ng, v.shape[0]))
                                                       for k, v in st_c.G.items()],
        "ASVD sum|x| and FWSVD row Fisher": (
            [(st_d.act_abs[k], v, bound(v, na, 1)) for k, v in st_c.act_abs.items()]
            + [(st_d.row_fisher[k], v, bound(v, ng, m_cpu.config.intermediate_size))
               for k, v in st_c.row_fisher.items()]),
    }
    for what, pairs in rows.items():
        r = _worst_ratio(pairs)
        ctx.check(f"K-FAC {what}, device vs CPU", r <= 1.0, err=r, tol=1.0,
                  note=f"max |Δ| / (2 (N + n) ε32 max diag), {len(pairs)} tensors (float32 sums)")
    # independent: A of layer 0's q_proj from the RMSNorm output, float64 on the CPU
    name = "model.layers.0.self_attn.q_proj"
    with torch.no_grad():
        inner = m_cpu.model
        x = torch.cat([inner.layers[0].input_layernorm(inner.embed_tokens(b)).reshape(-1, 32)
                       for b in calib]).double()
    ref = x.T @ x
    ctx.close("layer-0 q_proj A vs sum x x^T of the RMSNorm output (CPU, float64)",
              st_c.input_cov(name), ref, atol=bound(ref, na, 32))
    return st_c


def _gap_rank(s: torch.Tensor) -> tuple[int, float]:
    """The rank in [n/4, 3n/4] with the widest relative gap s_r - s_{r+1}; (r, s_1 / gap)."""
    n = s.numel()
    lo, hi = max(1, n // 4), max(2, 3 * n // 4)
    gaps = s[lo - 1:hi - 1] - s[lo:hi]
    k = int(gaps.argmax())
    return lo + k, float(s[0] / gaps[k])


def _check_factors(ctx, m_cpu, m_dev, stats, ids):
    from icml26.lems.export import apply_ranks_
    from icml26.lems.factorize import factorize, factorize_weight

    f_c = factorize(m_cpu, stats, "kfac", store_dtype=torch.float64)
    f_d = factorize(m_dev, stats, "kfac", store_dtype=torch.float64)
    width = max(f.s.numel() for f in f_c.values())
    ctx.close("whitened singular values (KFAC, float64), device vs CPU, all layers",
              torch.cat([f.s.cpu() for f in f_d.values()]),
              torch.cat([f.s for f in f_c.values()]),
              atol=1e3 * width * EPS64 * max(float(f.s[0]) for f in f_c.values()),
              note="1e3 n ε64 s_1")
    ranks, pairs = {}, []
    for name, f in f_c.items():
        r, kappa = _gap_rank(f.s)
        ranks[name] = r
        w = f.weight(r)
        pairs.append((f_d[name].weight(r), w,
                      1e3 * width * EPS64 * kappa * float(w.abs().max())))
    worst = _worst_ratio(pairs)
    ctx.check("rank-r KFAC weights left[:, :r] @ right[:r], device vs CPU", worst <= 1.0,
              err=worst, tol=1.0, note=f"max |Δ| / (1e3 n ε64 (s_1/gap) max|W_r|), r at the "
                                       f"widest gap, {len(pairs)} layers")
    # independent, CPU: full rank gives W back; SVD-LLM's truncation error is Eckart-Young's
    full = max(float((f.weight(f.s.numel()) - m_cpu.get_submodule(n).weight.detach().double())
                     .abs().max()) for n, f in f_c.items())
    ctx.check("full-rank left @ right = W (CPU, float64, all layers)", full <= 1e-9,
              err=full, tol=1e-9)
    name = "model.layers.0.mlp.down_proj"
    w = m_cpu.get_submodule(name).weight.double()
    a = stats.input_cov(name).double() / stats.tokens_a
    left, right, s, info = factorize_weight(w, method="svd_llm", a=a)
    r = s.numel() // 2
    err2 = float(((w - left[:, :r] @ right[:r]) @ torch.linalg.cholesky(a)).pow(2).sum())
    tail = float(s[r:].pow(2).sum())
    ctx.close("SVD-LLM ||(W - W_r) L_A||_F^2 = sum_{i>r} s_i^2 (down_proj, r = n/2)",
              torch.tensor(err2), torch.tensor(tail), atol=1e-9 * tail,
              note=f"whitening: {info}")
    # logits after compression
    apply_ranks_(m_cpu, f_c, ranks)
    apply_ranks_(m_dev, f_d, ranks)
    with torch.no_grad():
        ref = m_cpu(input_ids=ids).logits
        got = m_dev(input_ids=ids.to(ctx.device)).logits
    ctx.close("logits after apply_ranks_ (KFAC, gap ranks), device vs CPU", got, ref,
              atol=fp32_tol(float(ref.abs().max()), 64, 2),
              note=f"kept ranks {sorted(set(ranks.values()))}")


# -- timing --------------------------------------------------------------------------------
def _timings(ctx, model, ids, paper: bool):
    from icml26.lems.factorize import factorize
    from icml26.lems.layers import target_layers
    from icml26.lems.stats import collect_kfac_stats

    warm, iters = (1, 3) if paper else (1, 2)
    layers = target_layers(model)
    weights = [model.get_submodule(t.name).weight for t in layers]
    x = ids.to(ctx.device)
    vocab = model.config.vocab_size

    def forward():
        with torch.no_grad():
            model(input_ids=x, use_cache=False)

    def fwd_bwd():  # the method's loss and grad flags, no statistics hooks
        for w in weights:
            w.requires_grad_(True)
        logits = model(input_ids=x, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, vocab), x[:, 1:].reshape(-1),
            reduction="sum") / x.shape[0]
        loss.backward()
        for w in weights:
            w.grad = None
            w.requires_grad_(False)

    made = {}

    def stats():
        made["stats"] = collect_kfac_stats(model, [ids], layers=layers)

    shape = "x".join(map(str, ids.shape))
    ctx.compare(f"K-FAC statistics, {len(layers)} layers, {shape} tokens", "plain forward",
                forward, stats, warmup=warm, iters=iters)
    ctx.compare(f"K-FAC statistics, {len(layers)} layers, {shape} tokens",
                "forward + backward (no hooks)", fwd_bwd, stats, warmup=warm, iters=iters)
    st = made["stats"]
    mb = sum(t.numel() * t.element_size() for t in (*st.A.values(), *st.G.values())) / 1e6
    n_blocks = len({t.block for t in layers})
    ctx.value("K-FAC A + G held (float32)", f"{mb:.4g} MB for {n_blocks} block(s); "
                                            f"{32 * mb / n_blocks / 1e3:.3g} GB for 32 blocks")
    per_flop = None  # ms per m^2 n of the last SVD timed (SVD cost ~ m^2 n, m <= n)
    for proj in ("self_attn.k_proj", "self_attn.o_proj"):
        sel = [t for t in layers if t.block == 0 and t.name.endswith(proj)]
        t = sel[0]
        work = min(t.n_in, t.n_out) ** 2 * max(t.n_in, t.n_out)
        big = paper and proj.endswith("o_proj")
        need = 0.0 if per_flop is None else 3 * per_flop * work / 1e3 * (2 if big else 6)
        if not ctx.enough(need + (3 if paper else 0.1)):
            ctx.note(f"whitened SVD of {proj} not timed (estimated {need:.0f} s; share spent)")
            continue
        row = ctx.compare(
            f"whitened SVD, block 0 {proj.split('.')[-1]} ({t.n_out}x{t.n_in}, float64)",
            "plain SVD (float64)", lambda sel=sel: factorize(model, None, "svd", layers=sel),
            lambda sel=sel: factorize(model, st, "kfac", layers=sel),
            warmup=0 if big else 1, iters=1 if big else 2,
            note="Cholesky of shrunk A, G + triangular solves + SVD")
        per_flop = max(row.method_ms, row.baseline_ms) / work


def run(ctx) -> None:
    m64 = _tiny(torch.float64)
    calib = [_ids((2, 32), 259, seed=1)]
    with ctx.exact():
        m64_dev = _tiny(torch.float64).to(ctx.device)
        stats = _check_stats(ctx, m64, m64_dev, calib)
        _check_factors(ctx, m64, m64_dev, stats, _ids((1, 12), 259, seed=2))
        del m64_dev
        paper = ctx.scale == "paper"
        if paper and not ctx.is_cuda:
            ctx.note("paper shapes need a GPU (8B-shaped blocks): timings skipped on CPU")
            return
        if paper:
            model = llama8b(2, ctx.device, ctx.dtype)
            ctx.value("timed model", "Llama-3-8B-shaped LlamaForCausalLM, 2 blocks, 128256-token "
                                     "head, random bf16 weights")
            ids = _ids((1, 2048), 128256, 3)
        else:
            model = _tiny(ctx.dtype).to(ctx.device)
            ids = _ids((2, 32), 259, 3)
        _timings(ctx, model, ids, paper)
    ctx.note("float32 matmuls ran without TF32 (torch's default, the statistics' precision)")
