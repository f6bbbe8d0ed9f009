"""CyberPal pipeline and training throughput, side by side in one process.

Run: ``.venv/bin/python benchmarks/cyberpal.py [--model smollm2] [--steps 4] [--device cpu]``
(idle machine; ``--device cuda`` on a GPU). Measures:

- records/s of each data stage on the CWE observed examples (50 CWEs, the training CVEs):
  tasks, MiniLM grounding, template writer, verifier, dedup + decontamination;
- SFT tokens/s of MODEL on template-grounded chats (batch 8, assistant-token loss), bf16
  autocast vs fp32 (issue target: >= 2x on CPUs with AVX-512-BF16); ``--sft-only`` runs just
  this, interleaving the two step by step on the same batches and timing CPU seconds, which a
  loaded machine does not distort the way it distorts wall time;
- CVE -> CWE evaluation cost per CVE: greedy generation vs log-prob ranking of 50 labels, the
  ranking both as full sequences (the reference) and over a KV cache of the shared prompt
  (``--rank-only`` runs just this).

Prints markdown rows for benchmarks/RESULTS.md and saves a PNG to ``--plot``
(default results/benchmarks/cyberpal.png; '' for none).
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from icml26.cyberpal import enrich  # noqa: E402
from icml26.cyberpal.catalog import cve_cwe_pairs, load_attack, load_cwe  # noqa: E402
from icml26.cyberpal.evaluate import generate, rank_labels  # noqa: E402
from icml26.cyberpal.formats import default_formats  # noqa: E402
from icml26.cyberpal.splits import SplitConfig, make_splits  # noqa: E402
from icml26.cyberpal.train import SFTConfig, sft  # noqa: E402


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def stages() -> tuple[list[dict], list[dict]]:
    (cwe, attack), t_load = _timed(lambda: (load_cwe(), load_attack()))
    fm = default_formats()
    sp = make_splits(cve_cwe_pairs(cwe), SplitConfig())
    tasks, t_tasks = _timed(lambda: enrich.cve2cwe_tasks(sp.train, sp.labels))
    retr = enrich.CweRetriever(cwe, sp.labels)
    g, t_ground = _timed(lambda: enrich.ground(tasks, cwe, attack, retr))
    recs, t_write = _timed(lambda: enrich.write_template(g, fm))
    (kept, _, _), t_verify = _timed(lambda: enrich.verify_records(recs, fm, cwe, attack))
    ev = list(sp.id_test) + list(sp.ood_test)
    (final, _), t_dedup = _timed(lambda: enrich.decontaminate(
        enrich.dedup(kept), [p.cve_id for p in ev],
        [enrich.cve2cwe_prompt(p.description) for p in ev], embed=retr.embed))
    n = len(tasks)
    rows = [{"stage": "load catalogues (s)", "value": round(t_load, 2)}]
    for name, t in (("tasks", t_tasks), ("MiniLM grounding", t_ground),
                    ("template writer", t_write), ("verifier", t_verify),
                    ("dedup + decontamination", t_dedup)):
        rows.append({"stage": f"{name} (records/s)", "value": round(n / max(t, 1e-9), 1)})
    return rows, final


def sft_speed(model_name: str, recs: list[dict], steps: int, device: str) -> list[dict]:
    from icml26.core.lm import load_lm

    base, tok = load_lm(model_name, dtype=torch.float32, device=device)
    rows = []
    for autocast in (True, False):
        m = copy.deepcopy(base)
        cfg = SFTConfig(epochs=1, batch_size=8, lr=1e-5, autocast=autocast)
        sft(m, tok, recs[:8], cfg, device=device)  # warm-up (first bf16 calls compile)
        _, st = sft(m, tok, recs[8 : 8 + 8 * steps], cfg, device=device)
        rows.append({"stage": f"SFT tokens/s, {'bf16 autocast' if autocast else 'fp32'}",
                     "value": round(st.tokens_per_s, 1)})
    rows.append({"stage": "SFT speed-up bf16 / fp32",
                 "value": round(rows[0]["value"] / rows[1]["value"], 2)})
    return rows, base, tok


def sft_side_by_side(model_name: str, recs: list[dict], steps: int, device: str,
                     batch: int = 8) -> list[dict]:
    """bf16 autocast vs fp32 SFT forward + backward, *interleaved* on the same batches and the
    same weights (ABAB, the order swapped every step), so a changing machine load hits both
    alike. One model copy, gradients zeroed after each pass and no optimizer step: the AdamW
    update is fp32 either way and would only add a constant (and two AdamW states did not fit
    the shared machine's memory). Reports tokens per CPU second (``time.process_time``; with
    one thread, the pass's own CPU, insensitive to other processes) and per wall second:
    medians over steps after one warm-up step each."""
    import statistics

    from icml26.core.lm import load_lm
    from icml26.cyberpal.train import _loss, encode_chat

    model, tok = load_lm(model_name, dtype=torch.float32, device=device)
    model.train()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    enc = [encode_chat(tok, r["messages"]) for r in recs[: batch * (steps + 1)]]
    names = ("bf16 autocast", "fp32")
    cpu = {k: [] for k in names}
    wall = {k: [] for k in names}
    for step in range(steps + 1):
        chunk = enc[step * batch : (step + 1) * batch]
        width = max(len(i) for i, _ in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        attn = torch.zeros_like(ids)
        trained = torch.zeros_like(ids, dtype=torch.bool)
        for b, (x, mk) in enumerate(chunk):
            ids[b, : len(x)], attn[b, : len(x)] = torch.tensor(x), 1
            trained[b, : len(x)] = torch.tensor(mk)
        n_tok = int(attn.sum())
        for name in (names if step % 2 == 0 else names[::-1]):
            c0, w0 = time.process_time(), time.perf_counter()
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16,
                                enabled=name.startswith("bf16")):
                loss = _loss(model, ids.to(device), attn.to(device), trained.to(device))
            loss.backward()
            c1, w1 = time.process_time(), time.perf_counter()
            model.zero_grad(set_to_none=True)
            if step:  # step 0 warms up (bf16 kernels, allocator)
                cpu[name].append(n_tok / (c1 - c0))
                wall[name].append(n_tok / (w1 - w0))
    rows = []
    for name in names:
        rows.append({"stage": f"SFT fwd+bwd tokens/CPU-s, {name} (median of {steps} "
                              f"interleaved steps)", "value": round(statistics.median(cpu[name]), 1)})
        rows.append({"stage": f"SFT fwd+bwd tokens/wall-s, {name}",
                     "value": round(statistics.median(wall[name]), 1)})
    ratio = [x / y for x, y in zip(cpu["bf16 autocast"], cpu["fp32"], strict=True)]
    rows.append({"stage": "SFT speed-up bf16 / fp32, per CPU-s (median; min-max over steps)",
                 "value": f"{statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})"})
    return rows


def eval_speed(model, tok, recs, labels, n: int) -> list[dict]:
    """Per-CVE eval cost, bf16: greedy generation, and log-prob ranking of all labels with the
    full-sequence reference path vs the prompt-KV-cached path (CPU seconds of this process,
    then wall; the two rank paths alternate twice on the same CVEs)."""
    m = copy.deepcopy(model).to(torch.bfloat16)
    chats = [r["messages"][:2] for r in recs[:n]]
    _, t_gen = _timed(lambda: generate(m, tok, chats, max_new_tokens=96, batch_size=n))
    cpu = {False: [], True: []}
    lp = {}
    for cached in (False, True, False, True):
        c0 = time.process_time()
        lp[cached] = rank_labels(m, tok, chats, labels, batch_size=16 if cached else 32,
                                 prefix_cache=cached)
        cpu[cached].append((time.process_time() - c0) / n)
    agree = float((lp[False].argmax(1) == lp[True].argmax(1)).mean())
    full, fast = min(cpu[False]), min(cpu[True])
    return [{"stage": "eval s/CVE, generate (<= 96 tokens, batched)", "value": round(t_gen / n, 2)},
            {"stage": f"eval CPU-s/CVE, rank {len(labels)} labels, full sequences (before)",
             "value": round(full, 2)},
            {"stage": f"eval CPU-s/CVE, rank {len(labels)} labels, prompt KV cached (after)",
             "value": round(fast, 2)},
            {"stage": "rank speed-up (same top-1 on all CVEs: "
                      f"{'yes' if agree == 1.0 else f'{agree:.0%}'})", "value": round(full / fast, 2)}]


def rank_only(model_name: str, n: int) -> list[dict]:
    """Only the rank-mode timing (``--rank-only``): SmolLM2 in bf16 on the first ``n`` OOD CVEs
    with the grounded system prompt, the 50 small-scale labels."""
    from icml26.core.lm import load_lm

    cwe = load_cwe()
    sp = make_splits(cve_cwe_pairs(cwe), SplitConfig())
    model, tok = load_lm(model_name, dtype=torch.float32)
    system = default_formats()["cve2cwe"].system
    recs = [{"messages": [{"role": "system", "content": system},
                          {"role": "user", "content": enrich.cve2cwe_prompt(p.description)}]}
            for p in sp.ood_test[:n]]
    return eval_speed(model, tok, recs, [f"CWE-{c}: {cwe[c].name}" for c in sp.labels], n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--n-eval", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--plot", default="results/benchmarks/cyberpal.png")
    ap.add_argument("--sft-only", action="store_true",
                    help="Only the interleaved bf16-vs-fp32 SFT measurement (CPU time).")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rank-only", action="store_true",
                    help="Only generate vs rank (full vs prompt-KV-cached) on --n-eval OOD CVEs.")
    a = ap.parse_args()
    if a.rank_only:
        print(f"threads: {torch.get_num_threads()}, model {a.model}, {a.n_eval} OOD CVEs\n")
        print("| measure | value |\n|---|---|")
        for r in rank_only(a.model, a.n_eval):
            print(f"| {r['stage']} | {r['value']} |")
        return
    if a.sft_only:
        cwe, attack = load_cwe(), load_attack()
        sp = make_splits(cve_cwe_pairs(cwe), SplitConfig())
        tasks = enrich.cve2cwe_tasks(sp.train[: a.batch * (a.steps + 1)], sp.labels)
        recs = enrich.write_template(enrich.ground(tasks, cwe, attack, enrich.CweRetriever(
            cwe, sp.labels)), default_formats())
        rows = sft_side_by_side(a.model, recs, a.steps, a.device, a.batch)
        print(f"threads: {torch.get_num_threads()}, device {a.device}, model {a.model}, "
              f"batch {a.batch}\n")
        print("| measure | value |\n|---|---|")
        for r in rows:
            print(f"| {r['stage']} | {r['value']} |")
        return
    rows, recs = stages()
    srows, model, tok = sft_speed(a.model, recs, a.steps, a.device)
    cwe = load_cwe()
    labels = [f"CWE-{c}: {cwe[c].name}" for c in make_splits(cve_cwe_pairs(cwe)).labels]
    rows += srows + eval_speed(model, tok, recs, labels, a.n_eval)
    print(f"threads: {torch.get_num_threads()}, device {a.device}, model {a.model}\n")
    print("| measure | value |\n|---|---|")
    for r in rows:
        print(f"| {r['stage']} | {r['value']} |")
    if a.plot:
        from icml26.core.plots import pyplot, save_figure

        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6, 3))
        sft_rows = [r for r in rows if r["stage"].startswith("SFT tokens/s")]
        ax.bar([r["stage"].removeprefix("SFT tokens/s, ") for r in sft_rows],
               [r["value"] for r in sft_rows])
        ax.set_ylabel("SFT tokens/s")
        ax.set_title(f"{a.model}: SFT throughput ({a.device}, {torch.get_num_threads()} threads)")
        print("\nfigure:", save_figure(fig, Path(a.plot)))


if __name__ == "__main__":
    main()
