"""DeepCommit grouping cost at 1,000 commits, and a reused evaluation worktree vs a new one.

Run: ``.venv/bin/python benchmarks/deepcommit.py [--commits 1000] [--trials 5]`` (idle machine).
(a) builds a 1,000-commit history as Commit objects from a generated repository's commits,
repeated with shifted times and perturbed files (no git needed for grouping), embeds the messages
with MiniLM and clusters them; reports embedding, signal and clustering seconds.
(b) on a generated repository, prepares a clean tree at a revision ``--trials`` times either by
``git worktree add`` + remove per run, or by ``reset --hard`` + ``clean`` of one reused worktree.
Targets (issue 17): grouping 1,000 commits <= 30 s; reused worktree >= 2x faster.
(c) ``--batching N``: N threads each ask one LLMAgent-sized chat (a milestone prompt of a
generated repository, 64 new tokens, packaged SmolLM2, fp32, greedy) through one LocalChat in
turn vs through ``core.chat.BatchingChat`` (what the claim's parallel trials do); reports process
CPU seconds and wall seconds of each, and whether the replies are equal.
(d) ``--continuous N``: N agent threads each make 3 calls in turn (sampled at T 0.7 with their own
seeds, up to 128 new tokens, so reply lengths differ; a 0.3-0.9 s pause between calls stands
for the agent's test run; ``--model`` picks the chat model) through ``BatchingChat`` with grouped batches vs continuous batching (requests
join the running batch in free slots); process CPU and wall seconds, replies equal.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--batching", type=int, default=0, help="only part (c) with N threads")
    ap.add_argument("--continuous", type=int, default=0, help="only part (d) with N threads")
    ap.add_argument("--model", default=None, help="part (d)'s chat model (default: SmolLM2)")
    ap.add_argument("--prompts", default=None,
                    help="part (d): the claim's agent transcripts (OUT/deepcommit/small/agent), "
                    "whose milestone prompts the agents send instead of the built-in toy ones")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="part (d)'s reply budget")
    args = ap.parse_args()
    if args.batching:
        return batching(args.batching)
    if args.continuous:
        return continuous(args.continuous, model=args.model, prompts=args.prompts,
                          max_new_tokens=args.max_new_tokens)
    from icml26.deepcommit.history import load_history
    from icml26.deepcommit.milestones import GroupConfig, group_from_signals, signal_matrices
    from icml26.deepcommit.synth import make_repo
    from icml26.deepcommit.verify import Worktree

    with tempfile.TemporaryDirectory() as tmp:
        truth = make_repo(Path(tmp) / "r", 7, n_features=8, n_commits=60)
        base = load_history(truth.path).commits
        commits = []
        for i in range(args.commits):
            c = base[i % len(base)]
            commits.append(
                replace(
                    c,
                    sha=f"{i:040x}",
                    time=c.time + (i // len(base)) * 10**7,
                    message=f"{c.message} #{i}",
                )
            )
        t0 = time.perf_counter()
        from icml26.core.embed import embed

        embed(["warm up"])
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        sig = signal_matrices(commits)
        t_sig = time.perf_counter() - t0
        t0 = time.perf_counter()
        labels = group_from_signals(sig, GroupConfig())
        t_cl = time.perf_counter() - t0
        print(
            f"| grouping {args.commits} commits | signals incl. MiniLM {t_sig:.1f} s + "
            f"clustering {t_cl:.2f} s = {t_sig + t_cl:.1f} s (model load {t_load:.1f} s) | "
            f"{labels.max() + 1} groups | target <= 30 s |"
        )
        rev = load_history(truth.path).commits[-1].sha
        t0 = time.perf_counter()
        for _ in range(args.trials):
            Worktree(truth.path, rev).close()
        t_new = (time.perf_counter() - t0) / args.trials
        wt = Worktree(truth.path, rev)
        t0 = time.perf_counter()
        for _ in range(args.trials):
            (wt.path / "junk.txt").write_text("x")
            wt.reset(rev)
        t_reuse = (time.perf_counter() - t0) / args.trials
        wt.close()
        print(
            f"| clean tree per test run | new worktree {t_new * 1000:.0f} ms, reused "
            f"(reset+clean) {t_reuse * 1000:.0f} ms | x{t_new / t_reuse:.1f} | target >= 2x |"
        )



def batching(n: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from icml26.core.chat import BatchingChat, LocalChat
    from icml26.deepcommit.agent import SYSTEM

    chat = LocalChat(dtype="float32")
    prompts = [
        [{"role": "system", "content": SYSTEM},
         {"role": "user", "content": f"TASK\n\nM{i}: add f{i}\n\nRequired behaviour\n\n"
          f"- New file `pkg/m{i}.py`: `f{i}(x)` returns `x * {i + 2}`.\n\nCURRENT FILES\n\n"
          f"### pkg/m{i}.py\n(this file does not exist yet)\n\nNow write the complete new "
          "content of every file that must change."}]
        for i in range(n)
    ]
    chat.chat(prompts[0], max_new_tokens=4)  # warm up
    c0, t0 = time.process_time(), time.perf_counter()
    seq = [chat.chat(p, max_new_tokens=64) for p in prompts]
    c_seq, t_seq = time.process_time() - c0, time.perf_counter() - t0
    c0, t0 = time.process_time(), time.perf_counter()
    with BatchingChat(chat, max_batch=n, window_s=0.2) as bc, ThreadPoolExecutor(n) as pool:
        bat = list(pool.map(lambda p: bc.chat(p, max_new_tokens=64), prompts))
        sizes = list(bc.batches)
    c_bat, t_bat = time.process_time() - c0, time.perf_counter() - t0
    same = sum(a == b for a, b in zip(seq, bat, strict=True))
    print(
        f"| {n} agent calls (SmolLM2, 64 new tokens, greedy) | BatchingChat {c_bat:.1f} CPU-s, "
        f"{t_bat:.1f} s wall (batches {sizes}) | one at a time {c_seq:.1f} CPU-s, {t_seq:.1f} s "
        f"wall | {c_seq / c_bat:.2f}x CPU, {t_seq / t_bat:.2f}x wall; {same}/{n} replies equal |"
    )


def continuous(n: int, rounds: int = 3, model: str | None = None, prompts: str | None = None,
               max_new_tokens: int = 128) -> None:
    import json
    from concurrent.futures import ThreadPoolExecutor

    from icml26.core.chat import BatchingChat, LocalChat
    from icml26.deepcommit.agent import SYSTEM

    chat = LocalChat(model, dtype="float32")
    real = []
    if prompts:  # the transcripts' prompts, in a fixed order
        files = sorted(Path(prompts).rglob("*.json"))
        real = [json.loads(f.read_text())["prompt"] for f in files][: n * rounds]
        if len(real) < n * rounds:
            raise SystemExit(f"{prompts}: {len(real)} transcripts, need {n * rounds}")

    def agent(bc, i):
        out = []
        for r in range(rounds):
            task = real[i * rounds + r] if real else (
                f"TASK\n\nM{i}.{r}: add f{i}_{r}\n\nRequired behaviour\n\n- New file "
                f"`pkg/m{i}.py`: `f{i}_{r}(x)` returns `x * {i + r + 2}`.\n\nNow write the "
                "complete new content of every file that must change.")
            msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
            out.append(bc.chat(msgs, max_new_tokens=max_new_tokens, temperature=0.7,
                               seed=1000 * i + r))
            time.sleep(0.3 * (1 + i % 3))  # the agent's test run: 0.3-0.9 s
        return out

    chat.chat([{"role": "user", "content": "hi"}], max_new_tokens=4)  # warm up
    res = {}
    for mode in (False, True):
        c0, t0 = time.process_time(), time.perf_counter()
        with BatchingChat(chat, max_batch=n, window_s=0.2, continuous=mode) as bc, \
                ThreadPoolExecutor(n) as pool:
            replies = list(pool.map(lambda i, bc=bc: agent(bc, i), range(n)))
            calls = list(bc.batches)
        res[mode] = (time.process_time() - c0, time.perf_counter() - t0, replies, calls)
    (cg, tg, rg, kg), (cc, tc, rc, kc) = res[False], res[True]
    same = sum(a == b for x, y in zip(rg, rc, strict=True) for a, b in zip(x, y, strict=True))
    chars = sum(len(a) for x in rc for a in x)
    print(
        f"| {n} agents x {rounds} calls ({model or 'SmolLM2'}, T 0.7, <= {max_new_tokens} new "
        f"tokens, {'transcript' if real else 'toy'} prompts, {chars} reply chars) "
        f"| continuous {cc:.1f} CPU-s, {tc:.1f} s wall ({len(kc)} calls) | grouped {cg:.1f} "
        f"CPU-s, {tg:.1f} s wall ({len(kg)} calls) | {cg / cc:.2f}x CPU, {tg / tc:.2f}x wall; "
        f"{same}/{n * rounds} replies equal |"
    )


if __name__ == "__main__":
    main()
