"""ECHO: exact greedy output on the device; the verification knee of B x K tree batches.

Checked (a tiny float32 random Llama, 3 layers, hidden 64, byte vocabulary; self-draft from its
first 2 layers; ECHO trees with low gates so that drafts are verified and partly accepted):

- ``echo_generate`` on the device gives plain greedy decoding's tokens on the device (a full
  forward of the whole sequence per token, no cache: ``echo.decode.greedy_reference`` with the
  input on the model's device, which that helper does not do);
- ``echo_generate`` on the device gives the CPU's tokens, bit-exact (the top-1/top-2 logit gap
  along the path is recorded: float32 noise is ~1e-6 of it);
- on the CPU, ECHO equals plain greedy too (an independent reference for the CPU rehearsal);
- ``echo_generate`` called as on a GPU (``input_ids`` on the device) returns the same tokens.

Timed (ms per target forward, median, CUDA events): ``TreeLM.forward`` over B rows of K
tree-masked new tokens (a 2-wide tree) on 1,024 cached tokens per row, for B in 1, 8, 32, 128 and
K per request in 1..64 (B x K <= 8,192), with the first 1 and the first 2 decoder layers of a
random-weight Llama-3-8B-shaped model (hidden 4096, 32/8 heads, FFN 14,336, vocabulary 128,256,
bf16; 2 layers built). ``ctx.compare`` rows: the AR step (K = 1) as baseline vs tree verification
at K = 4 and 16 per request (ratio = T_ver / T_ar, the knee's 1 + gamma [K - K_max]^+).
Values: the knee per B fitted (``fit_knee``) on the times extrapolated to 32 layers
(T_1 + 31 (T_2 - T_1): embedding + head once, the layer cost 32 times), fed back into ECHO's
``SpecCost`` as a measured ``CostModel`` (``SpecCost.verify_time`` of B x 8 tokens), next to the
modelled ``replica_spec_cost`` knee and verify time (Llama-3-8B, ReplicaCost of the device's kind:
H100 or H200) at the same B.

Memory at paper shapes: weights 2 x 1.05 GB (embedding, head) + 2 x 0.44 GB (layers); KV cache
at B = 128: 2 layers x 2 x 128·8·1,088·128·2 B = 1.1 GB (+ a concatenated copy per forward);
logits at 8,192 tokens: 8,192 x 128,256 x (2 + 4) B = 6.3 GB: about 12 GB in all.
"""

from __future__ import annotations

import copy
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from icml26.core.lm import tiny_llama
from icml26.echo.cost import SpecCost, fit_knee, replica_spec_cost
from icml26.echo.hf import echo_generate
from icml26.echo.model import TreeLM
from icml26.echo.policies import Echo
from icml26.sim.cost import CostModel, HardwareSpec

WEIGHT = 3.0

#: low gates, so that a random model's flat draft distribution still grows trees
POLICY = Echo(gate_depths=(2,), taus=(1e-4,), depth=4, topk=3, root_tau=1e-4, root_topk=4,
              width_topk=4, total=12)


def run(ctx) -> None:
    with ctx.exact():
        _check_exact(ctx)
    _knee(ctx)


# -- correctness ---------------------------------------------------------------------------------
def _tiny(ctx):
    """The same tiny float32 model on the CPU and on the device, and its byte tokenizer."""
    model, tok = tiny_llama(hidden=64, layers=3, heads=4, kv_heads=2, max_len=256, seed=0)
    return {"cpu": model.eval(), "dev": copy.deepcopy(model).to(ctx.device).eval()}, tok


@torch.no_grad()
def _greedy(model, prompt, n_new, eos) -> list[int]:
    """Plain greedy decoding: a full forward of the whole sequence for every new token."""
    dev = next(model.parameters()).device
    ids, out = list(prompt), []
    for _ in range(n_new):
        tok = int(model(torch.tensor([ids], device=dev)).logits[0, -1].argmax())
        out.append(tok)
        ids.append(tok)
        if tok == eos:
            break
    return out


@torch.no_grad()
def _top_gap(model, prompt, tokens) -> float:
    """Smallest top-1 minus top-2 logit along the greedy path (one forward over it, CPU)."""
    ids = torch.tensor([list(prompt) + list(tokens)])
    logits = model(ids).logits[0, len(prompt) - 1:-1].double()
    top = logits.topk(2, -1).values
    return float((top[:, 0] - top[:, 1]).min())


def _check_exact(ctx) -> None:
    n_new = ctx.pick(tiny=10, paper=24)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 255, (n,), generator=g).tolist() for n in (7, 11)]
    P = max(map(len, prompts))
    ids = torch.zeros(len(prompts), P, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):  # left padding, as HF generate takes a batch
        ids[r, P - len(p):] = torch.tensor(p)
        mask[r, P - len(p):] = 1
    got, ref = {}, {}
    models, tok = _tiny(ctx)
    eos = tok.eos_token_id
    for label in ("cpu", "dev"):
        model = models[label]
        # input_ids stay on the CPU: echo_generate only reads them, the forwards run on the
        # model's device (ids on CUDA: see _check_device_ids)
        out = echo_generate(model, ids, attention_mask=mask, exit_layer=2, policy=POLICY,
                            max_new_tokens=n_new, eos_token_id=eos, return_dict_in_generate=True)
        stats = out["stats"]
        got[label] = stats.tokens
        ref[label] = [_greedy(model, p, n_new, eos) for p in prompts]
        if label == "dev":
            ctx.value("device ECHO run: mean accepted per step, steps",
                      f"{stats.mean_accepted:.2f}, {len(stats.steps)}")
    gap = min(_top_gap(models["cpu"], p, t) for p, t in zip(prompts, ref["cpu"], strict=True))
    note = f"2 prompts x {n_new} new tokens; min top-1/top-2 logit gap {gap:.2e}"
    ctx.equal("ECHO greedy == plain greedy (float32, on the device)",
              _as_tensor(got["dev"]), _as_tensor(ref["dev"]), note=note)
    ctx.equal("ECHO greedy: device == CPU", _as_tensor(got["dev"]), _as_tensor(got["cpu"]),
              note=note)
    ctx.equal("ECHO greedy == plain greedy (float32, CPU reference)",
              _as_tensor(got["cpu"]), _as_tensor(ref["cpu"]))
    _check_device_ids(ctx, models["dev"], ids, mask, eos, _as_tensor(got["dev"]))


def _check_device_ids(ctx, model, ids, mask, eos, ref) -> None:
    """echo_generate called as HF generate is on a GPU: input_ids and mask on the model's
    device; the returned sequences must hold the same new tokens (right-padded rows)."""
    try:
        seq = echo_generate(model, ids.to(ctx.device), attention_mask=mask.to(ctx.device),
                            exit_layer=2, policy=POLICY, max_new_tokens=ref.shape[1],
                            eos_token_id=eos)
    except Exception as exc:  # noqa: BLE001 - a device mix-up in the method is the finding
        ctx.check("echo_generate with input_ids on the device", False,
                  note=f"{type(exc).__name__}: {exc}"[:240])
        return
    new = seq[:, ids.shape[1]:].cpu()
    got = torch.where(ref >= 0, new[:, :ref.shape[1]], torch.full_like(ref, -1))
    ctx.equal("echo_generate with input_ids on the device: same tokens", got, ref)


def _as_tensor(rows) -> torch.Tensor:
    """Ragged token lists as one (rows, longest) int64 tensor, -1 padded (lengths compared too)."""
    n = max(len(r) for r in rows)
    return torch.tensor([list(r) + [-1] * (n - len(r)) for r in rows], dtype=torch.long)


# -- the knee ------------------------------------------------------------------------------------
SHAPES = {  # hidden, heads, kv heads, ffn, vocab
    "paper": (4096, 32, 8, 14336, 128256),  # Llama-3-8B
    "tiny": (64, 4, 2, 192, 512),
}


def _model(ctx, shape):
    hidden, heads, kv, ffn, vocab = SHAPES[shape]
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                      num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=kv,
                      max_position_embeddings=4096)
    torch.manual_seed(0)
    with ctx.device:  # built on the device: seconds, not minutes, at the 8B shape
        model = LlamaForCausalLM(cfg)
    return TreeLM(model.to(ctx.dtype).eval())


def _batch(lm, b, k, context, cache_len, g):
    """Tokens, positions and the tree mask of ``b`` rows of ``k`` new tokens, on the device."""
    par = [max(j - 2, -1) for j in range(k)]  # a 2-wide tree: the parent of j is j - 2
    anc = torch.eye(k, dtype=torch.bool)
    for j in range(k):
        if par[j] >= 0:
            anc[j] |= anc[par[j]]
    mask = torch.cat([torch.ones(k, cache_len, dtype=torch.bool), anc], 1).expand(b, k, -1)
    depth = anc.sum(1) - 1
    toks = torch.randint(0, lm.vocab, (b, k), generator=g)
    pos = (context + depth).expand(b, k)
    dev = lm.device
    return toks.to(dev), pos.contiguous().to(dev), mask.contiguous().to(dev)


class _Measured(CostModel):
    """A ``CostModel`` from the measured knee: ``forward_time`` of a batch is the fitted
    T_ver(sum of new tokens) (context fixed at the measured 1,024 tokens)."""

    def __init__(self, knee):
        self.knee = knee

    def forward_time(self, new_tokens, contexts) -> float:
        return float(self.knee.time(float(sum(new_tokens)))) if len(new_tokens) else 0.0


@torch.no_grad()
def _knee(ctx) -> None:
    shape = ctx.scale if ctx.scale in SHAPES else "tiny"
    p = ctx.pick(tiny=dict(bs=(4,), ks=(1, 2, 4, 8), context=64, max_tokens=64, it=(1, 2)),
                 paper=dict(bs=(1, 8, 32, 128), ks=(1, 2, 4, 8, 16, 32, 64), context=1024,
                            max_tokens=8192, it=(2, 5)))
    t0 = time.perf_counter()
    lm = _model(ctx, shape)
    ctx.sync()
    ctx.value("model build (2 layers, on the device)", f"{time.perf_counter() - t0:.1f} s")
    warmup, iters = p["it"]
    kv, hd = lm.n_kv, lm.head_dim
    hw = _hardware(ctx)
    for b in p["bs"]:
        if not ctx.enough(ctx.pick(tiny=0.1, paper=6.0)):
            ctx.note(f"knee: stopped before B={b} ({ctx.remaining():.0f} s left of the share)")
            break
        g = torch.Generator().manual_seed(b)  # tokens (CPU)
        gd = torch.Generator(device=lm.device).manual_seed(b)  # the cache, on the device
        shp = (b, kv, p["context"], hd)  # 0.27 G values per tensor at B = 128
        cache = [tuple(torch.randn(shp, generator=gd, device=lm.device, dtype=lm.dtype)
                       for _ in range(2)) for _ in range(2)]
        ks, t1, t2 = [], [], []
        ar = None
        for k in p["ks"]:
            if b * k > p["max_tokens"]:
                continue
            toks, pos, mask = _batch(lm, b, k, p["context"], p["context"], g)

            def fwd(n, toks=toks, pos=pos, mask=mask, cache=cache, lm=lm):
                return lm.forward(toks, pos, mask, cache[:n], n_layers=n)

            a = ctx.time(lambda fwd=fwd: fwd(1), warmup=warmup, iters=iters)
            c = ctx.time(lambda fwd=fwd: fwd(2), warmup=warmup, iters=iters)
            ks.append(b * k)
            t1.append(a)
            t2.append(c)
            if k == 1:
                ar = fwd
            elif k in (4, 16) and ar is not None and b >= ctx.pick(tiny=4, paper=32):
                ctx.compare(f"verify B={b} x K={k} (2 layers)", f"AR step B={b} (2 layers)",
                            lambda ar=ar: ar(2), lambda fwd=fwd: fwd(2), warmup=1, iters=iters,
                            note=f"ms per forward; {p['context']} cached tokens per row; ratio "
                                 "= T_ver / T_ar")
        ctx.value(f"B={b}: forward ms with 1 / 2 layers at K per request {[x // b for x in ks]}",
                  "; ".join(f"{x:.2f} / {y:.2f}" for x, y in zip(t1, t2, strict=True)))
        if len(ks) >= 3:
            t32 = [(x + 31 * (y - x)) / 1e3 for x, y in zip(t1, t2, strict=True)]  # seconds
            _feed_back(ctx, b, ks, t32, hw, p["context"])


def _hardware(ctx) -> HardwareSpec:
    if not ctx.is_cuda:
        return HardwareSpec.h100()
    name = torch.cuda.get_device_name(ctx.device)
    return HardwareSpec.h200() if "H200" in name else HardwareSpec.h100()


def _feed_back(ctx, b, ks, t32, hw, context) -> None:
    """fit_knee on the 32-layer extrapolation, fed back into SpecCost as a cost model, next to
    the modelled knee (two fits: ~0.2 s each on a CPU)."""
    if min(t32) <= 0:
        ctx.note(f"B={b}: 1-layer time above the 2-layer time (noise); knee not fitted")
        return
    measured = fit_knee(ks, t32)
    spec = SpecCost(_Measured(measured), _Measured(measured), context)
    modelled = replica_spec_cost(context=context, hw=hw)
    mk = modelled.knee(b)
    ctx.value(f"B={b}: knee, measured (32-layer extrapolation)",
              f"T_ar {1e3 * measured.t_ar:.2f} ms, K_max {measured.k_max:.0f} tokens, gamma "
              f"{measured.gamma:.4f}/token")
    ctx.value(f"B={b}: knee, modelled (replica_spec_cost, Llama-3-8B on {hw.name})",
              f"T_ar {1e3 * mk.t_ar:.2f} ms, K_max {mk.k_max:.0f} tokens, gamma "
              f"{mk.gamma:.4f}/token")
    ctx.value(f"B={b}: SpecCost.verify_time of B x 8 tokens, measured / modelled",
              f"{1e3 * spec.verify_time([8] * b):.2f} / "
              f"{1e3 * modelled.verify_time([8] * b):.2f} ms (32 layers)")
