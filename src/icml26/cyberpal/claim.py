"""Claim ``cyberpal``: SFT on grounded reasoning traces beats plain SFT on CVE -> CWE, most OOD.

Arms, all trained from the same base on the *same* CVE records, epochs, lr and seeds:
(A) plain "CWE-79: <name>"; (B) template-grounded reasoning in the shipped format, verified;
(C) reasoning written by the base LM from the same facts, kept only where verified (dropped when
under ``c_min_keep`` of traces pass). No-training baselines: the base model zero- and 3-shot, and
MiniLM nearest CWE definition. Headline (issue 38, ``--opt headline=rank``, the default): OOD
top-1 accuracy of the rank mode -- the log-prob ranking of the candidate labels
``CWE-<id>: <name>`` as the assistant's reply, independent of the answer format -- B / A
(per-CVE correctness averaged over seeds; ratio of sums + 0.5 each), with a 95% CI over seeds,
then CVEs; ``headline=gen`` uses the generated answer's any-gold accuracy instead. ``small``:
Qwen2.5-Coder-0.5B-Instruct + LoRA, 5 seeds, the token-matched A arm, rank mode on every seed
and arm, generation rows on the first seed (``gen_seeds``).

Options (``--opt key=value``): ``model`` (zoo name, HF folder or .gguf; default
Qwen2.5-Coder-0.5B-Instruct, tiny: a from-scratch tiny_llama), ``lora``, ``headline``,
``gen_seeds``, ``dtype`` (weights; default fp32 for training, with bf16 autocast where
bf16 is native, and the dtype policy for evaluation), ``seeds`` (e.g. ``0,1``), ``n_cwes``, ``epochs``, ``lr``, ``train_cap``,
``n_rank``, ``n_mcq``, ``gen_bs``. ``units=A/0,base/0shot`` computes only those memo units (a
worker: several processes with the same options and their own ``--out`` can split the arms);
``merge=DIR1,DIR2`` copies the finished units of such workers (same configuration) into this
run's memo first, so a run without ``units`` only scores what the workers computed.

Power checks (issue 31): floor = always answering the most frequent answer of the training
records (a constant label); control = MiniLM nearest definition against that constant label;
degeneracy = OOD predictions that differ between A and B. The headline CI resamples seeds, then
CVEs (:func:`icml26.core.stats.clustered_bootstrap`). ``token_matched`` (default 1 at tiny and
small, 0 at full) adds arm A trained for as many epochs as match B's assistant tokens.

Near-zero rule: when both A and B are "at the floor" on OOD (fewer than ``floor_correct`` CVEs
right, default 5, or accuracy under ``floor_chance`` x uniform chance over the labels, default 2),
the result is marked uninformative (reason recorded): +0.5 smoothing turns 1 vs 0 right into 3x.
See :func:`icml26.cyberpal.report.floor_reason`.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from icml26.core.checkpoint import Memo
from icml26.core.claims import Result, RunContext
from icml26.core.errors import UserError
from icml26.core.torchutil import check_device
from icml26.cyberpal import enrich
from icml26.cyberpal.catalog import cve_cwe_pairs, load_attack, load_cwe
from icml26.cyberpal.evaluate import build_mcq, few_shot_messages, generate, rank_labels
from icml26.cyberpal.formats import default_formats
from icml26.cyberpal.release import PLAIN_SYSTEM
from icml26.cyberpal.splits import SplitConfig, make_splits
from icml26.cyberpal.train import SFTConfig, sft

TARGET = 1.0
#: the base of ``small`` and ``full`` (issue 38: SmolLM2-135M scored at or below the constant
#: label on OOD; ``--opt model=smollm2`` keeps it as a second row)
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"


def _sizes(ctx: RunContext) -> dict:
    o = ctx.options
    base = ctx.pick(
        tiny=dict(n_cwes=10, n_id_test=12, n_ood=16, train_cap=20, epochs=2, batch=1, lr=3e-3,
                  seeds="0", max_new=(16, 48), n_rank=4, n_mcq=8, n_lm=2, gen_bs=64, lora=0,
                  gen_seeds=1_000),
        # issue 38: Qwen2.5-Coder-0.5B + LoRA, 5 seeds, rank-mode headline on every seed; the
        # generation rows on the first seed only and 100 training CVEs keep it near 2-3 CPU-h
        small=dict(n_cwes=50, n_id_test=150, train_cap=100, epochs=1, batch=4, lr=1e-3,
                   seeds="0,1,2,3,4", max_new=(32, 84), n_rank=40, n_mcq=48, n_lm=8, gen_bs=48,
                   lora=1, gen_seeds=1),
        full=dict(n_cwes=50, n_id_test=150, train_cap=100_000, epochs=2, batch=8, lr=2e-5,
                  seeds="0,1,2", max_new=(48, 160), n_rank=150, n_mcq=400, n_lm=100_000,
                  gen_bs=32, lora=0, gen_seeds=1_000),
    )
    for k in ("n_cwes", "n_id_test", "n_ood", "train_cap", "epochs", "batch", "n_mcq", "n_lm",
              "n_rank", "gen_bs", "lora", "gen_seeds"):
        if k in o:
            base[k] = int(o[k])
    if "lr" in o:
        base["lr"] = float(o["lr"])
    base["headline"] = str(o.get("headline", "rank"))
    if base["headline"] not in ("rank", "gen"):
        raise UserError(f"--opt headline must be rank or gen; got {base['headline']!r}")
    base["seeds"] = [int(s) for s in str(o.get("seeds", base["seeds"])).split(",")]
    base["gen_seeds"] = min(base["gen_seeds"], len(base["seeds"]))
    if base["headline"] == "gen" and base["gen_seeds"] < len(base["seeds"]):
        raise UserError(f"--opt headline=gen needs the generation evaluation on every seed: "
                        f"gen_seeds={base['gen_seeds']} < {len(base['seeds'])} seeds")
    return base


def _load_base(ctx: RunContext, device: str):
    if ctx.scale == "tiny" and "model" not in ctx.options:
        from icml26.core.lm import tiny_llama

        return tiny_llama(hidden=64, layers=2, heads=4, max_len=1024, vocab="bytes", seed=0), \
            "tiny_llama (random init, byte vocab)"
    from icml26.core.lm import load_lm

    name = ctx.options.get("model") or DEFAULT_MODEL
    return load_lm(name, dtype=torch.float32, device=device), name


def _eval_dtype(ctx):
    from icml26.core.torchutil import parse_dtype

    if "dtype" in ctx.options:
        return parse_dtype(ctx.options["dtype"])
    from icml26.core.lm import default_dtype

    # tiny: fp32; else the dtype policy (bf16 only where native: ~4x slower than fp32 on AVX2)
    return torch.float32 if ctx.scale == "tiny" else default_dtype(ctx.device)


def run(ctx: RunContext) -> Result:
    device = check_device(ctx.device)
    S = _sizes(ctx)
    t_start = time.perf_counter()
    cwe, attack = load_cwe(), load_attack()
    formats = default_formats()
    fmt = formats["cve2cwe"]
    splits = make_splits(cve_cwe_pairs(cwe), SplitConfig(n_cwes=S["n_cwes"],
                                                          n_id_test=S["n_id_test"]))
    retr = enrich.CweRetriever(cwe, splits.labels)
    if S.get("n_ood"):  # tiny: the first OOD CVEs only (CI time)
        splits = type(splits)(splits.labels, splits.train, splits.id_test,
                              splits.ood_test[: S["n_ood"]])
    test = {"id": list(splits.id_test), "ood": list(splits.ood_test)}
    golds = {k: [list(p.cwes) for p in v] for k, v in test.items()}
    prompts = {k: [enrich.cve2cwe_prompt(p.description) for p in v] for k, v in test.items()}

    # --- data: tasks -> grounding -> template writer -> verifier -> decontamination
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    train_pairs = [splits.train[i] for i in sorted(rng.permutation(len(splits.train))[: S["train_cap"]])]
    tasks = enrich.ground(enrich.cve2cwe_tasks(train_pairs, splits.labels), cwe, attack, retr)
    b_all, b_rej, b_report = enrich.verify_records(enrich.write_template(tasks, formats), formats,
                                                   cwe, attack)
    b_recs, decon = enrich.decontaminate(
        enrich.dedup(b_all), [p.cve_id for v in test.values() for p in v],
        prompts["id"] + prompts["ood"], embed=retr.embed)
    a_recs = [enrich.plain_record(r) for r in b_recs]
    for r in a_recs:
        r["messages"][0]["content"] = PLAIN_SYSTEM
    data_s = time.perf_counter() - t0

    (model, tok), label = _load_base(ctx, device)
    eval_dtype = _eval_dtype(ctx)
    # units are keyed by arm/seed: adding a seed reuses the others (seeds not in the config)
    memo = Memo(ctx.out_dir / "memo.json", config={**{k: v for k, v in S.items() if k != "seeds"},
                                                   "scale": ctx.scale, "model": label,
                                                   "n_train": len(b_recs)})
    merged = merge_memos(memo, [d for d in str(ctx.options.get("merge", "")).split(",") if d],
                         ctx.scale)
    if merged:
        ctx.progress.log(f"merged {merged} unit(s) from worker memos")

    def evaluate(m, system, max_new, shots=()):
        em = copy.deepcopy(m).to(eval_dtype) if eval_dtype != torch.float32 else m
        out = {}
        for k in ("id", "ood"):
            chats = [few_shot_messages(system, shots, u) for u in prompts[k]]
            texts = generate(em, tok, chats, max_new_tokens=max_new, batch_size=S["gen_bs"],
                             progress=ctx.progress)
            out[k] = texts
        return out

    only = {u for u in str(ctx.options.get("units", "")).split(",") if u}
    compute = memo.compute if not only else (
        lambda key, fn: memo.compute(key, fn) if key in only else None)

    # --- arm C: the base LM writes traces from the same facts; kept only where verified
    t0 = time.perf_counter()
    n_lm = min(S["n_lm"], len(tasks))
    replies = compute("C/replies", lambda: generate(
        copy.deepcopy(model).to(eval_dtype), tok, enrich.lm_prompts(tasks[:n_lm], formats),
        max_new_tokens=S["max_new"][1], batch_size=S["gen_bs"], progress=ctx.progress))
    c_min_keep = float(ctx.options.get("c_min_keep", 0.3))
    if replies is None:  # a worker run that does not compute C: C is not trained there
        replies, c_min_keep = [""] * n_lm, 2.0
    c_kept, _, c_report = enrich.verify_records(
        enrich.records_from_replies(tasks[:n_lm], formats, replies), formats, cwe, attack)
    c_share = c_report.to_dict()["kept_share"]
    lm_s = time.perf_counter() - t0
    arm_c = c_share >= c_min_keep

    systems = {"A": (a_recs, PLAIN_SYSTEM, S["max_new"][0]),
               "B": (b_recs, fmt.system, S["max_new"][1])}
    if arm_c:  # C is trained on its own verified traces, A-sized budget not matched: noted
        systems["C"] = (c_kept, fmt.system, S["max_new"][1])
    # B's traces are ~4x A's answers in tokens: the token-matched plain arm trains A's records
    # for as many epochs as it takes to see B's assistant tokens (on at tiny; at small an option)
    epochs = {arm: S["epochs"] for arm in systems}
    tok_ratio = trained_tokens(tok, b_recs) / max(1, trained_tokens(tok, a_recs))
    if str(ctx.options.get("token_matched", "0" if ctx.scale == "full" else "1")) == "1":
        systems["Atok"] = systems["A"]
        epochs["Atok"] = max(1, round(S["epochs"] * tok_ratio))

    def unit(arm, seed):
        recs, system, max_new = systems[arm]
        m = copy.deepcopy(model)
        cfg = SFTConfig(epochs=epochs[arm], lr=S["lr"], batch_size=S["batch"], seed=seed,
                        max_len=1024, lora=bool(S["lora"]))
        t = time.perf_counter()
        m, st = sft(m, tok, recs, cfg, device=device, progress=ctx.progress)
        train_s = time.perf_counter() - t
        t = time.perf_counter()
        # generation on the first gen_seeds seeds; the rank mode (the headline) on every seed
        texts = evaluate(m, system, max_new) if S["seeds"].index(seed) < S["gen_seeds"] else None
        res = {"texts": texts, "train_s": train_s, "eval_s": time.perf_counter() - t,
               "tokens_trained": st.tokens_trained, "tokens_seen": st.tokens_seen,
               "tok_per_s": st.tokens_per_s, "loss_first": st.losses[0], "loss_last": st.losses[-1]}
        em = copy.deepcopy(m).to(eval_dtype)
        t = time.perf_counter()
        res["rank"] = _rank(em, tok, system, prompts["ood"][: S["n_rank"]], splits.labels, cwe)
        res["rank_s"] = time.perf_counter() - t
        if seed == S["seeds"][0] and arm != "Atok":  # MCQ: the compared arms, first seed
            res["mcq"] = _mcq(em, tok, cwe, attack, S["n_mcq"])
        return res

    results = {}
    for seed in S["seeds"]:
        for arm in systems:
            results[(arm, seed)] = compute(f"{arm}/{seed}", lambda a=arm, s=seed: unit(a, s))
    shots = [(r["messages"][1]["content"], r["messages"][2]["content"]) for r in a_recs[:3]]
    base0 = compute("base/0shot", lambda: {
        "texts": evaluate(model, PLAIN_SYSTEM, S["max_new"][0]),
        "rank": _rank(copy.deepcopy(model).to(eval_dtype), tok, PLAIN_SYSTEM,
                      prompts["ood"][: S["n_rank"]], splits.labels, cwe),
        "mcq": _mcq(copy.deepcopy(model).to(eval_dtype), tok, cwe, attack, S["n_mcq"])})
    base3 = compute("base/3shot", lambda: {
        "texts": evaluate(model, PLAIN_SYSTEM, S["max_new"][0], shots)})
    if only:
        from icml26.core.claims import Measure

        done = sorted(k for k in only if k in memo)
        return Result(rows=[{"units done": ", ".join(done)}], target=TARGET,
                      headline=Measure("OOD CVE->CWE any-gold accuracy, B / A", float("nan")),
                      uninformative=f"worker run (units={','.join(sorted(only))}): rerun "
                                    "without units to score")
    nn = {k: retr.top_k(prompts[k], 1) for k in test}

    # --- scoring
    from icml26.cyberpal.report import build_result

    return build_result(ctx, S=S, label=label, cwe=cwe, fmt=fmt, splits=splits, golds=golds,
                        results=results, base0=base0, base3=base3, nn=nn, arms=list(systems),
                        b_report=b_report, c_report=c_report, c_share=c_share, arm_c=arm_c,
                        decon=decon, n_b=len(b_recs), data_s=data_s, lm_s=lm_s,
                        total_s=time.perf_counter() - t_start, target=TARGET,
                        train_answers=[int(r["meta"]["facts"]["answer"]) for r in b_recs],
                        epochs=epochs, tok_ratio=tok_ratio)


def trained_tokens(tok, records) -> int:
    """Assistant tokens with a loss in one epoch over ``records`` (as :func:`sft` counts them:
    the assistant turn and its end-of-turn marker, from the second position on)."""
    from icml26.cyberpal.train import encode_chat

    return sum(int(sum(encode_chat(tok, r["messages"])[1][1:])) for r in records)


def merge_memos(memo: Memo, sources: list[str], scale: str) -> int:
    """Copy finished units from other runs' memos (an ``--out`` folder, or a memo.json) into
    ``memo`` when their config is identical; returns how many units were added. A source with a
    different config (other sizes, model, code-relevant options) is refused."""
    from pathlib import Path

    from icml26.core.errors import UserError

    added = 0
    for src in sources:
        p = Path(src)
        if p.is_dir():
            p = p / "cyberpal" / scale / "memo.json"
        try:
            added += memo.merge_from(p)
        except OSError as exc:
            raise UserError(f"merge: cannot read worker memo {p}: {exc}") from None
        except ValueError as exc:
            raise UserError(f"merge: {exc}") from None
    return added


def _rank(model, tok, system, prompts, labels, cwe) -> dict:
    if not prompts:
        return {"acc": float("nan"), "pred": []}
    texts = [f"CWE-{c}: {cwe[c].name}" for c in labels]
    lp = rank_labels(model, tok, [[{"role": "system", "content": system},
                                   {"role": "user", "content": u}] for u in prompts], texts)
    return {"pred": [int(labels[j]) for j in lp.argmax(1)]}


def _mcq(model, tok, cwe, attack, n) -> dict:
    from icml26.core.mcq import score_mcq

    out = {}
    for hard in (True, False):
        items = build_mcq(cwe, attack, n // 2, n // 2, hard=hard, seed=1)
        sc = score_mcq(model, tok, items, method="logprob")
        out["hard" if hard else "easy"] = float(sc.accuracy)
    return out
