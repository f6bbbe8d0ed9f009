"""The explicit list of claims: the nineteen ICML 2026 papers, then the health check.

A literal list, no import-time registration: reading it imports nothing heavy, so ``icml26 list``
stays fast. A claim whose method has not landed has ``run=None`` and shows as "planned"; when a
method lands, its entry gets ``run=lazy("icml26.NAME.claim:run")``. ``resources`` says what a
``full`` run needs on one cluster node (tiny and small use the defaults, 1 and 2 CPUs); see
docs/scale.md.
"""

from __future__ import annotations

from icml26 import claim_options
from icml26.core.claims import Claim, Resources, lazy
from icml26.core.power import PowerSpec

SERVING, COMPRESSION, TRAINING, EVALUATION, INTERP, APPS, HEALTH = (
    "serving",
    "compression",
    "training",
    "evaluation",
    "interpretability",
    "applications",
    "health check",
)

CLAIMS: list[Claim] = [
    Claim(
        name="tie",
        paper="Scheduling LLM Inference with Uncertainty-Aware Output Length Predictions",
        statement="Ranking requests by E[X] + beta*CVaR of a log-t output-length prediction cuts "
        "mean per-token latency against learning-to-rank SJF.",
        paper_figure="2.31x lower mean per-token latency than LTR",
        run=lazy("icml26.tie.claim:run"),
        options=claim_options.TIE,
        area=SERVING,
        resources={"full": Resources(cpus=8, gpus=1, memory_gb=48)},
        paper_value=2.31,
        power=PowerSpec(
            control="oracle-median SJF (each prompt's true median) and the oracle E[S]/E[1/S] index (the optimal fixed order for mean per-token latency on one non-preemptive server, a heuristic for a batching engine; from each prompt's true length distribution) against LTR at the headline load: each must beat LTR on PTLA(LTR)/PTLA(x), its clustered (seeds, then requests) CI above 1; oracle TIE (TIE's score on the true (mu, sigma)) and oracle SJF are reported beside them, not checked (oracle TIE is the method with perfect inputs: it separates the score from the predictor)",
            floor="FCFS (no prediction): TIE or LTR must have a mean PTLA below FCFS's CI",
            degeneracy="the prompt pairs that TIE (at both beta = 0.1 and 0.5) and LTR rank in opposite order (identical orders = a tie by construction)",
        ),
        cpu_minutes={
            "tiny": 0.7,  # docs/tie.md: tiny 19 s wall (at most 2 threads: <= 0.7)
            "small": 6.5,  # docs/tie.md: 6.5 CPU-min (381 s user; small, 2026-12-02 run)
        },
    ),
    Claim(
        name="oserve",
        paper="OServe: Accelerating LLM Serving via Spatial-Temporal Workload Orchestration",
        statement="A heterogeneous deployment (per-replica TP/PP) with LP routing per request "
        "type beats static vLLM and the best homogeneous deployment, more so as the request mix spreads.",
        paper_figure="1.5x average (up to 2x) over static vLLM; 1.14x -> 2.66x as mix CV rises",
        run=lazy("icml26.oserve.claim:run"),
        options=claim_options.OSERVE,
        area=SERVING,
        resources={"full": Resources(cpus=8, memory_gb=16)},
        paper_value=2.66,
        power=PowerSpec(
            control="the heterogeneity profile (a measured-style profile on which tp1 serves long prompts and tp2 long outputs better per GPU) run through the same pipeline: OServe's plan against the best homogeneous plan, both LP-routed, worst-type P99/SLO ratio above 1 on every seed at the headline load",
            floor="static vLLM (one homogeneous layout chosen once for the average mix, least-load routing): OServe or a per-trace homogeneous plan must beat it on every run (model x seed) at the headline CV and load",
            degeneracy="OServe's plan differs from the best homogeneous plan (identical plans: the headline is routing noise)",
        ),
        cpu_minutes={
            "tiny": 0.4,  # docs/oserve.md: tiny ~10 s (at most 2 threads: <= 0.35)
            "small": 3.1,  # docs/oserve.md: 183 CPU-s (small, 295 s wall)
        },
    ),
    Claim(
        name="echo",
        paper="ECHO: Elastic Speculative Decoding with Sparse Gating for High-Concurrency Scenarios",
        statement="Under a verification budget at high concurrency, ECHO's sparse-gated elastic "
        "draft trees, verified as one super-tree, beat static, dense-dynamic and adaptive-chain "
        "trees (each tuned per batch size) and never fall below AR.",
        paper_figure="up to 5.35x over AR; +14.4% over EAGLE-3 at batch 256",
        area=SERVING,
        resources={"full": Resources(cpus=8, gpus=1, memory_gb=80)},
        run=lazy("icml26.echo.claim:run"),
        options=claim_options.ECHO,
        power=PowerSpec(
            control="an oracle draft (the target's own greedy tokens, acceptance 1) against AR: the modelled throughput must rise far above AR",
            floor="autoregressive decoding (AR, 1 token per verification)",
            degeneracy="ECHO's per-step trees differ from the best baseline's trees",
        ),
        cpu_minutes={
            "tiny": 3.4,  # issue 40: 102 s wall on an idle 2-core machine, <= 2 threads
                          # (docs/echo.md says ~7 s)
            "small": 18,  # docs/echo.md: 884 s wall on 1 thread (<= 14.7 CPU-min, draft beams
                          # cached); a first run's stages ~4 min + 379 s + 460 s ~ 18
        },
    ),
    Claim(
        name="binarypc",
        paper="Training-Free Hashing-Based Attention via Binary Principal Components",
        statement="At a 2% decode budget, 64-bit binary-principal-component key codes keep more "
        "attention mass than LSH (SimHash-64, MagicPIG), Quest and Loki (PCA keys, r = d/4), close to "
        "exact top-k.",
        paper_figure="accuracy near full attention; 3.56x decode throughput over FlashAttention",
        run=lazy("icml26.binarypc.claim:run"),
        options=claim_options.BINARYPC,
        area=SERVING,
        resources={"full": Resources(cpus=8, gpus=1, memory_gb=80)},
        power=PowerSpec(
            control="oracle top-k (exact scores) against random-k at the same budget: recall must separate by more than the context-level spread",
            floor="random-k (and the recent window) at the same 2% budget",
            degeneracy="the fraction of selected keys BinaryPC shares with the best baseline (identical selections = no difference)",
        ),
        cpu_minutes={
            "tiny": 1.0,  # docs/binarypc.md: tiny 28 s (at most 2 threads: <= 0.95)
            "small": 87,  # docs/binarypc.md: measured 2026-12-07, the 12-context issue-35
                          # defaults, fp32, 1 thread: 87 CPU-min (6,076 s wall beside another run)
        },
    ),
    Claim(
        name="restore",
        paper="RESTORE: Improving Visual Token Reduction via Rectifying Distortions for "
        "Efficient Multimodal LLM Inference",
        statement="On text-agnostic reducers, RESTORE (retained positions, log-size + RoPE-distance "
        "attention calibration, distinctive-anchor merging) recovers accuracy lost to visual "
        "token reduction.",
        paper_figure="LLaVA-1.5-7B at 64/576 tokens: DivPrune 93.8 -> 95.9%, VisionZip 93.0 -> 94.8%, "
        "HoloV 92.2 -> 96.5% of full accuracy",
        area=SERVING,
        resources={"full": Resources(cpus=8, gpus=1, memory_gb=48)},
        run=lazy("icml26.restore.claim:run"),
        options=claim_options.RESTORE,
        power=PowerSpec(
            control="full tokens against the reducer alone at the kept-token budget, per base, CI clustered over builds: the reduction must lose accuracy for a recovery to exist",
            floor="the majority answer per question type (from each build's training QA)",
            degeneracy="the answers RESTORE changes relative to the reducer alone (all builds)",
        ),
        cpu_minutes={
            "tiny": 0.75,  # docs/restore.md: tiny 22 s in the runner (at most 2 threads)
            "small": 27,  # docs/restore.md: 287 CPU-s with the 3 builds cached + builds of 469,
                          # 452, 423 CPU-s (small)
        },
    ),
    Claim(
        name="lems",
        paper="Advancing SVD-based LLM Compression via Layer-Wise Error Model Search",
        statement="At equal parameter budgets, KFAC-whitened SVD with LEMS's globally searched "
        "per-layer ranks gives lower perplexity than simpler non-uniform allocators (SVD-LLM v2's "
        "energy rule, an ATP-like depth ramp, LEMS without its measured KLs or its search) and "
        "than uniform ranks.",
        paper_figure="Llama3-8B at 60% kept: LEMS 17.86 vs ATP 25.14 vs uniform 48.56 ppl; "
        "KFAC-SVD ~0.85x SVD-LLM's ppl",
        run=lazy("icml26.lems.claim:run"),
        options=claim_options.LEMS,
        area=COMPRESSION,
        resources={"full": Resources(cpus=8, gpus=1, memory_gb=80)},
        paper_value=17.86 / 25.14,  # LEMS / the best other search (ATP), Llama3-8B, 60% kept
        power=PowerSpec(
            control="the best non-uniform allocator against a random per-layer allocation on the same options and budget: it must beat it",
            floor="the unigram model of the train split (a compressed model must still beat it)",
            degeneracy="LEMS's ranks differ from the best non-uniform allocator's",
        ),
        cpu_minutes={
            "tiny": 0.7,  # measured 2026-12-07: 42 CPU-s with issue 37's 15 arms (34 CPU-s with 10; eval 256 tokens in 64-token windows)
            "small": 330,  # estimate at default options (3 seeds, 80%+60%, 15 arms, search
                           # 8 x 256, 16k test tokens), fp32 without native bf16: ~110 CPU-min per
                           # seed from the stage costs measured 2026-12-07 (docs/lems.md): a cut
                           # run (seeds=1 ratios=0.6 n_search=4 eval_tokens=8192, no SVD/ASVD/
                           # FWSVD/SVD-LLM+LEMS) took 34.8 CPU-min in all (stats 5.9, headline
                           # arms 18.7, KFAC L_G^T + LEMS 10.3); 2026-12-02, AMX bf16, seeds=1,
                           # the 10 arms then: 49.6 CPU-min
        },
    ),
    Claim(
        name="cat",
        paper="Dissecting Quantization Error: A Concentration-Alignment Perspective",
        statement="Raising the alignment of weight and activation variation, not only their "
        "concentration, lowers 4-bit error: block CAT matches or beats transform baselines at W4A4.",
        paper_figure="matches or beats QuaRot, SpinQuant and FlatQuant at 4 bits",
        run=lazy("icml26.cat.claim:run"),
        options=claim_options.CAT,
        area=COMPRESSION,
        resources={"full": Resources(cpus=8, gpus=1, memory_gb=80)},
        power=PowerSpec(
            control="the unquantized model against W4A4 round-to-nearest with no transform: quantization must hurt measurably",
            floor="the unigram model of the train split (the quantized models must still beat it)",
            degeneracy_na="each transform is a different fixed map; no shared decisions to compare",
        ),
        cpu_minutes={
            "tiny": 0.7,  # measured 2026-12-07 (issue 37 arms; GPTQ rows for rtn, sq+hadamard,
                          # CAT): 39.8 CPU-s in tests/cat/test_cat_claim.py
            "small": 70,  # docs/cat.md 2026-12-07 (issue 37 arms + GPTQ rows, float32): seed 0
                          # measured at 47 CPU-min (FP, SQNR, FlatQuant-lite, full CAT, 18 evals),
                          # seed 1 at 11, seed 2 at ~12 (627 s wall)
        },
    ),
    Claim(
        name="quartet2",
        paper="Quartet II: Accurate LLM Pre-Training in NVFP4 by Improved Unbiased Gradient "
        "Estimation",
        statement="MS-EDEN is an unbiased NVFP4 gradient estimator with lower error than "
        "stochastic rounding, narrowing the loss gap to BF16.",
        paper_figure=">2x lower error than SR; loss gap to BF16 ~20-25% smaller than NVIDIA's recipe",
        run=lazy("icml26.quartet2.claim:run"),
        options=claim_options.QUARTET2,
        area=TRAINING,
        resources={"full": Resources(cpus=32, gpus=8, memory_gb=512)},
        paper_value=23.5 / 9.8,
        power=PowerSpec(
            control="a biased estimator (deterministic round-to-nearest) against stochastic rounding: the bias measurement must tell them apart",
            floor="the zero estimator (predicting a zero gradient: MSE = E[g^2])",
            degeneracy_na="estimators are compared on the same tensors; nothing is decided",
        ),
        cpu_minutes={
            "tiny": 0.5,  # estimate: a 2-layer byte model, a few hundred steps
            "small": 12,  # docs/quartet2.md: 12.0 CPU-min (small, 3 seeds, 2026-12-07 run)
        },
    ),
    Claim(
        name="sso",
        paper="Controlled LLM Training on Spectral Sphere",
        statement="Steepest descent on the spectral sphere reaches AdamW's final loss in fewer "
        "steps (the headline here; Muon and LR transfer are rows, not the verdict).",
        paper_figure="AdamW's final loss in 19% fewer steps (Muon: 12%) at 1.7B",
        run=lazy("icml26.sso.claim:run"),
        options=claim_options.SSO,
        area=TRAINING,
        resources={"full": Resources(cpus=32, gpus=8, memory_gb=512)},
        paper_value=0.81,
        power=PowerSpec(
            control="AdamW at its tuned LR against AdamW at the worst LR of its bracketed grid: final validation loss at the headline width must separate beyond the seed spread (min..max over seeds; the steps ratio is reported beside it)",
            floor="the byte-unigram loss of the training data (cross-entropy of the validation split under the training split's byte frequencies; every arm must learn beyond it)",
            degeneracy_na="optimizers make no discrete decisions",
        ),
        cpu_minutes={
            "tiny": 0.9,  # docs/sso.md: tiny 52 s CPU
            # docs/sso.md: ~101 CPU-min for the 150-step, 3-point-grid small of 2026-12-02; the
            # issue-36 defaults (300 steps, 5-point grids, MuonSphere tuned) scale that by ~2 x
            # ~1.4 x ~1.15, and the muon_si arm (tuned at the top width, every seed) ~1.15 more:
            # an estimate
            "small": 380,
        },
    ),
    Claim(
        name="quatro",
        paper="Query-Adaptive Trust Region Policy Optimization for LLM Fine-tuning",
        statement="Under policy staleness and high learning rates, a per-query KL trust-region loss "
        "enforced by Lagrangian duality (reconstruction: tr_dual) keeps reward and entropy "
        "stable where clipped GRPO-style losses degrade, giving higher held-out pass@k.",
        paper_figure="higher Pass@k and Unique Correct Count than GRPO/GSPO-style baselines on six math "
        "benchmarks; stable entropy under staleness and aggressive LR (no single number)",
        area=TRAINING,
        resources={"full": Resources(cpus=32, gpus=8, memory_gb=512)},
        run=lazy("icml26.quatro.claim:run"),
        options=claim_options.QUATRO,
        power=PowerSpec(
            control="the stress itself: GRPO under staleness and high LR against on-policy GRPO (mu=1) at its own tuned LR (the stress must degrade a clipped loss)",
            floor="the base policy's held-out pass@1 before training",
            degeneracy_na="training runs make no shared discrete decisions",
        ),
        cpu_minutes={
            "tiny": 1.0,  # estimate: SFT <= 200 steps and 5 rollout batches of a 2-layer model
            "small": 51,  # docs/quatro.md: the tuned small run of 2026-12-02, cpu_time_s 3,081
        },
    ),
    Claim(
        name="uds",
        paper="Utility-Diversity Aware Online Batch Selection for LLM Supervised Fine-tuning",
        statement="Selecting the most useful and diverse examples of each batch beats "
        "online-selection baselines at every data budget.",
        paper_figure="best at every data budget; faster than full-data SFT",
        run=lazy("icml26.uds.claim:run"),
        options=claim_options.UDS,
        area=TRAINING,
        resources={"full": Resources(cpus=16, gpus=1, memory_gb=80)},
        power=PowerSpec(
            control="a single-source selection (one data family only) against random selection at the same budget: selection must move held-out loss",
            floor="the model before fine-tuning (held-out loss with no SFT)",
            degeneracy="the fraction of examples UDS picks that random selection also picks",
        ),
        cpu_minutes={
            "tiny": 0.7,  # docs/uds.md: tiny 40 s CPU
            # docs/uds.md: ~2 CPU-hours for the 2-seed small of 2026-12-02 (the arms' wall times
            # 2.1 h on one thread); 3 seeds and 1-2 more LR points (issue 36): an estimate
            "small": 190,
        },
    ),
    Claim(
        name="atlas",
        paper="Adaptive Testing for LLM Evaluation: A Psychometric Alternative to Static "
        "Benchmarks",
        statement="IRT adaptive testing matches full-benchmark ability estimates from a few "
        "percent of the items.",
        paper_figure="HellaSwag ability with 41 of 5,600 items (MAE 0.157)",
        run=lazy("icml26.atlas.claim:run"),
        options=claim_options.ATLAS,
        area=EVALUATION,
        resources={"full": Resources(cpus=8, memory_gb=32)},
        # the paper's 0.157 / 0.240 is ATLAS / random-100; the headline is ATLAS / random-k
        paper_value=None,
        power=PowerSpec(
            control="random selection of many more items (4x k) against random-k on the held-out "
            "family's examinees: more items must lower theta MAE",
            floor="the calibration population's mean theta (0) for every held-out examinee, no items",
            degeneracy_na="the adaptive and random tests pick items by different rules by construction",
        ),
        cpu_minutes={
            "tiny": 0.5,  # measured 2026-12-07: 24-26 CPU-s (part (c) on tiny Llamas + part (a))
            "small": 120,  # estimate; the 2026-12-07 record took 84 CPU-min with part of its
                           # tables memoised. Part (a) ~35 + (b) ~10 (docs/atlas.md) + part (c) ~75: 12
                           # log-prob tables x 400 items timed per item on a loaded 2-core machine
                           # (SmolLM2 0.64/0.45, Gemma 1.37/0.90, Qwen-0.5B 1.84/1.21 CPU-s per
                           # item letter/logprob, 1 thread); ~0 once the tables are cached
        },
    ),
    Claim(
        name="algosteer",
        paper="The Invisible Lottery: How Subtle Cues Steer Algorithm Choice in LLM Code "
        "Generation",
        statement="Incidental prompt cues shift which algorithm family code LLMs choose among programs "
        "that pass the same tests; semantic cues more than innocuous ones, naming mitigates.",
        paper_figure="shifts up to 100 pp; semantic cues 67.2 pp vs innocuous 26.1 pp",
        area=EVALUATION,
        resources={"full": Resources(cpus=16, gpus=1, memory_gb=48)},
        run=lazy("icml26.algosteer.claim:run"),
        options=claim_options.ALGOSTEER,
        power=PowerSpec(
            control="an explicit instruction naming the algorithm against the resampled no-cue control: the strong cue must shift the family share",
            floor="the no-cue resampled control TVD (sampling noise alone), and test pass rate above zero",
            degeneracy="the number of gated cells where the cue changes the family distribution",
        ),
        cpu_minutes={
            "tiny": 1.0,  # estimate: SmolLM2 load + 16 generations of 64 tokens
            "small": 130,  # measured (issue 38 grid, docs/algosteer.md): 2,300 Qwen2.5-Coder-0.5B
                           # generations with their sandboxed tests in three resumed parts, 48 + ~23
                           # + 59 CPU-min (2026-12-07, fp32, one thread, loaded 2-core machine)
        },
    ),
    Claim(
        name="deepcommit",
        paper="EvoClaw: Evaluating AI Agents on Continuous Software Evolution",
        statement="Agents that implement a project's milestones in one continuously evolving "
        "workspace score lower than on the same milestones in isolation (an LLM command agent "
        "on DeepCommit-lite's verified DAGs of generated repositories); milestone recovery "
        "(ARI of DeepCommit-lite vs baselines) is a row.",
        paper_figure="agents > 80% isolated vs <= 38% continuous (best 38.03, resolve <= 13.37%); "
        "headline here: score continuous / isolated < 1",
        area=EVALUATION,
        resources={"full": Resources(cpus=16, memory_gb=32)},
        run=lazy("icml26.deepcommit.claim:run"),
        options=claim_options.DEEPCOMMIT,
        power=PowerSpec(
            control="a scripted agent of known per-milestone skill (lowest q) on the same DAGs: its continuous / isolated ratio must lie below 1 (the harness can show the drop); with agent=none, oracle-signal clustering against time gaps on ARI",
            floor="the null agent (submits the tree it was handed) in isolated mode: the LLM agent must score above it; with agent=none, one cluster per commit / for all",
            degeneracy="graded milestones resolved in one mode and not the other (none = the modes cannot differ); with agent=none, DeepCommit-lite's partitions vs the nearest in-space ablation",
        ),
        cpu_minutes={
            "tiny": 1.0,  # docs/deepcommit.md: tiny ~60 s under load (one process)
            "small": 71,  # measured 2026-12-07 (docs/deepcommit.md): 4,232 CPU-s at 10 DAGs --
                          # recovery and scripted trials ~6-10, 40 Qwen2.5-Coder-0.5B agent trials
        },
    ),
    Claim(
        name="corrsteer",
        paper="CorrSteer: Generation-Time LLM Steering via Correlated Sparse Autoencoder Features",
        statement="Steering by SAE features whose generation-time activations correlate with "
        "reward improves task accuracy with few side effects.",
        paper_figure="+3.3% MMLU (Gemma-2 2B); +27.1% HarmBench",
        area=INTERP,
        resources={"full": Resources(cpus=8, gpus=1, memory_gb=48)},
        run=lazy("icml26.corrsteer.claim:run"),
        options=claim_options.CORRSTEER,
        power=PowerSpec(
            control="steering at a strength large enough to change answers (CAA at a large coefficient) against the unsteered model",
            floor="always answering the most frequent training letter (majority)",
            degeneracy="the answers CorrSteer changes relative to the unsteered model (zero changed answers = a null intervention)",
        ),
        cpu_minutes={
            "tiny": 1.0,  # estimate: 1 split seed, 32 test items, one layer
            # measured 2026-12-07 (docs/corrsteer.md, fp32, SAEs cached, BBQ skipped without
            # BIG-bench): MMLU with the issue-39 defaults and sft=none 15.5 CPU-min; MMLU's SFT
            # unit ~25 CPU-min; the SAE stage ~6 CPU-min when not cached
            "small": 47,
        },
    ),
    Claim(
        name="cclrec",
        paper="CCLRec: Consensus-driven Contrastive Learning for LLM-enhanced Graph Recommendation",
        statement="Weighting consensus pairs (graph and semantics agree) in contrastive learning "
        "beats LLM-enhanced graph recommenders.",
        paper_figure="beats the state of the art on Netflix and ML-1M (no numbers published)",
        area=APPS,
        resources={"full": Resources(cpus=8, gpus=1, memory_gb=32)},
        run=lazy("icml26.cclrec.claim:run"),
        options=claim_options.CCLREC,
        power=PowerSpec(
            control="LightGCN against MostPop: the paired test NDCG@20 ratio (clustered CI, seeds then users) must lie wholly above 1",
            floor="MostPop (recommend the most popular items); some compared system's mean NDCG@20 must lie above MostPop's CI",
            degeneracy="CCLRec's consensus weights must touch at least 1% of sampled users (w+ or w- != 1); else CCLRec and CCLRec w±=1 are the same model",
        ),
        cpu_minutes={
            "tiny": 0.7,  # measured 38-43 CPU-s (150 users, 2 passes, 2 seeds, 3-point tuning)
            "small": 150,  # docs/cclrec.md, measured 2026-12-08: 43 fits, 5,960 s wall with
                           # --jobs 2 on the loaded 2-core box; fits x CPU-s per fit ~ 140 CPU-min
                           # + data preparation (CCLRec's arms stop early: 6-24 passes)
        },
    ),
    Claim(
        name="chemcensor",
        paper="When Single Answer Is Not Enough: Rethinking Single-Step Retrosynthesis "
        "Benchmarks for LLMs",
        statement="Chemical plausibility levels separate sound from unsound retrosynthesis "
        "proposals that exact-match Top-K scores alike.",
        paper_figure="plausibility matches chemists better than Top-K (no numbers published; "
        "Fig. 1 = level histograms)",
        area=APPS,
        resources={"full": Resources(cpus=16, memory_gb=64)},
        run=lazy("icml26.chemcensor.claim:run"),
        options=claim_options.CHEMCENSOR,
        power=PowerSpec(
            control="a template oracle (knows the generator's rules) must separate (b) valid alternatives from (d) implausible proposals beyond a random score (AUROC (b) vs (d), target-bootstrap intervals)",
            floor="the better of a random score and RDKit validity + balance on AUROC (b) vs (d) (both about 0.5)",
            degeneracy="(b) and (d) proposals on which ChemCensor's decision (level >= 1) differs from exact match's",
        ),
        cpu_minutes={
            "tiny": 1.0,  # estimate: 30 targets, RXNMapper start-up
            "small": 18,  # docs/chemcensor.md: 1,063 CPU-s with the RXNMapper worker and
                          # SmolLM2 (small, 2026-12-07 run, issue 39)
        },
    ),
    Claim(
        name="skillpro",
        paper="Learning Reusable Skills from Experience via Non-Parametric PPO for LLM Agents",
        statement="A PPO-gated, maintained skill pool raises agent return over no skills at small "
        "prompt cost (Mastermind-v0; mechanism check with a scripted policy).",
        paper_figure="Mastermind-v0 reuse 92.5%; Hard/Extreme return 0.463/0.333 [third-party note]",
        area=APPS,
        resources={"full": Resources(cpus=8, gpus=1, memory_gb=48)},
        run=lazy("icml26.skillpro.claim:run"),
        options=claim_options.SKILLPRO,
        power=PowerSpec(
            control="a scripted good policy against the random valid guesser: the environment and return measure must tell skill apart",
            floor="the random valid guesser",
            degeneracy="skills retrieved and evolved (no skill used or evolved = the pool changes nothing)",
        ),
        cpu_minutes={
            "tiny": 0.25,  # estimate: scripted agent, 2 iterations x 2 episodes
            "small": 5,  # docs/skillpro.md: 276 s wall on the loaded 2 cores (scripted agent, one
                         # process: <= 4.6)
        },
    ),
    Claim(
        name="cyberpal",
        paper="CyberPal 2.0: Toward Cybersecurity-Expert Small Language Models",
        statement="SFT on grounded, verified security reasoning traces (SecKnowledge 2.0) beats plain "
        "SFT and the base model on CVE->CWE mapping, most on out-of-distribution CVEs.",
        paper_figure="20B ranks 1st on vulnerability/bug->CWE (above GPT-4o, o1, o3-mini, Sec-Gemini v1), "
        "4B 2nd; no numbers published",
        area=APPS,
        resources={"full": Resources(cpus=32, gpus=8, memory_gb=640)},
        run=lazy("icml26.cyberpal.claim:run"),
        options=claim_options.CYBERPAL,
        power=PowerSpec(
            control="MiniLM nearest CWE definition against the constant label: the task must be doable from the text",
            floor="always answering the most frequent training CWE (constant label)",
            degeneracy="the OOD predictions that differ between the two SFT arms",
        ),
        cpu_minutes={
            "tiny": 1.0,  # estimate: tiny_llama, 10 CWEs, 16 OOD CVEs, MiniLM
            # docs/cyberpal.md, measured 2026-12-07: Qwen2.5-Coder-0.5B + LoRA, 5 seeds x
            # A/B/Atok, rank mode on 40 OOD CVEs every seed, seed 0's generations, MCQ and the
            # base rows: ~4.3 core-hours on the loaded 2-core box (fp32, one thread per worker,
            # three workers + a 375 s merge); rank mode 11-16 CPU-s per CVE
            "small": 260,
        },
    ),
    Claim(
        name="smollm2-perplexity",
        paper="(health check, not a paper) The packaged SmolLM2 reads English",
        statement="The packaged SmolLM2-135M-Instruct predicts Wikipedia text far better than a "
        "unigram model of the train split.",
        paper_figure="unigram ppl / model ppl > 5",
        run=lazy("icml26.core.sanity:run"),
        options=claim_options.SMOLLM2_PERPLEXITY,
        area=HEALTH,
        resources={"full": Resources(cpus=2)},
        power=PowerSpec(
            control="the model on shuffled-token text against real text: perplexity must rise sharply when word order is destroyed",
            floor="the unigram model of the train split",
            degeneracy_na="one model, no decisions",
        ),
        cpu_minutes={
            "tiny": 0.35,  # docs/index.md: tiny ~10 s (at most 2 threads)
            "small": 2.1,  # docs/index.md: 64 s on an idle machine, 2 threads (small, 2026-12-02
                           # run)
        },
    ),
]


def names() -> list[str]:
    return [c.name for c in CLAIMS]


def get(name: str) -> Claim:
    """The claim called ``name``; ``KeyError`` listing the known names otherwise."""
    for claim in CLAIMS:
        if claim.name == name:
            return claim
    raise KeyError(f"unknown claim {name!r}; known: {', '.join(names())}")
