"""LLM retrosynthesis proposals (candidate class (e)): few-shot prompting of any chat model.

The paper benchmarks general-purpose and chemistry LLMs that propose K reactant sets per target
and scores every proposal with ChemCensor. :func:`propose` does this with any
:class:`icml26.core.chat.ChatModel` (SmolLM2 through ``LocalChat`` here, a vLLM / OpenAI endpoint
at paper scale): a system instruction, ``shots`` worked examples from a precedent corpus
(the products most similar to the target by Morgan-fingerprint Tanimoto, or random ones), then the
target. Each answer is parsed with :func:`parse_reactants` into ``reactants>>target``; what does not
parse stays as written, so ChemCensor scores it -1 at its validator (data, never an exception).

With a ``LocalChat`` the ``n`` samples of one target are drawn in one batched ``generate`` call
(``num_return_sequences=n``); other chat models are called ``n`` times with seeds ``seed + j``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from rdkit import Chem, DataStructs
from rdkit.Chem import rdFingerprintGenerator

from icml26.core.chat import ChatModel, LocalChat, check_messages
from icml26.core.errors import UserError

__all__ = ["SYSTEM", "few_shot_messages", "nearest_examples", "parse_reactants", "propose"]

SYSTEM = (
    "You are an expert synthetic chemist. Given the SMILES of a product, propose the reactants "
    "of one single-step reaction that makes it. Answer with the reactant SMILES only, separated "
    "by '.', on one line."
)
_SMILES_TOKEN = re.compile(r"[A-Za-z0-9@+\-\[\]\(\)=#$%/\\.:*~]+")


def few_shot_messages(target: str, examples: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """Chat messages: the instruction, ``examples`` as (product, reactants) turns, the target."""
    msgs = [{"role": "system", "content": SYSTEM}]
    for prod, reac in examples:
        msgs.append({"role": "user", "content": f"Product: {prod}"})
        msgs.append({"role": "assistant", "content": reac})
    msgs.append({"role": "user", "content": f"Product: {target}"})
    return check_messages(msgs)


def parse_reactants(text: str) -> str:
    """The reactant SMILES in a model answer: the first line, a leading ``Reactants:`` label and
    markdown quotes dropped, then the first SMILES-looking token that RDKit parses (canonical,
    molecules sorted); when none parses, the first token as written ('' for an empty answer)."""
    line = next((ln for ln in text.strip().splitlines() if ln.strip()), "")
    line = re.sub(r"^\s*(reactants?|answer)\s*[:=]\s*", "", line.strip(), flags=re.I)
    line = line.replace("`", " ").replace(">>", " ")
    tokens = [t.strip(".") for t in _SMILES_TOKEN.findall(line)]
    tokens = [t for t in tokens if t]
    for tok in tokens:
        mols = [Chem.MolFromSmiles(s) for s in tok.split(".") if s]
        if mols and all(m is not None for m in mols):
            return ".".join(sorted(Chem.MolToSmiles(m) for m in mols))
    return tokens[0] if tokens else ""


def nearest_examples(
    targets: Sequence[str],
    corpus: Sequence[tuple[str, str]],
    k: int = 3,
    mode: str = "nearest",
    seed: int = 0,
) -> list[list[tuple[str, str]]]:
    """For each target, ``k`` (product, reactants) examples from ``corpus``: the most similar
    products (Morgan radius 2, 2048 bits, Tanimoto; ``mode="nearest"``) or a random draw."""
    if mode not in ("nearest", "random"):
        raise ValueError(f"mode must be 'nearest' or 'random'; got {mode!r}")
    if not corpus:
        raise ValueError("the few-shot corpus is empty")
    if mode == "random":
        rng = random.Random(seed)
        return [rng.sample(list(corpus), min(k, len(corpus))) for _ in targets]
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    fps = [gen.GetFingerprint(Chem.MolFromSmiles(p)) for p, _ in corpus]
    out = []
    for t in targets:
        m = Chem.MolFromSmiles(t)
        if m is None:
            raise ValueError(f"target {t!r} is not valid SMILES")
        sims = DataStructs.BulkTanimotoSimilarity(gen.GetFingerprint(m), fps)
        order = sorted(range(len(corpus)), key=lambda i: (-sims[i], i))
        picked = [corpus[i] for i in order if corpus[i][0] != t][:k]
        out.append(picked[::-1])  # most similar example last, nearest the question
    return out


def _cut(text: str, stop: Sequence[str]) -> str:
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
    return text[:cut]


def _local_samples(chat: LocalChat, msgs, n, max_new_tokens, temperature, seed, stop):
    import torch

    ids = chat.prompt_ids(msgs)
    greedy = temperature <= 0  # greedy answers are identical: decode once, repeat
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        pad_token_id=chat.tokenizer.eos_token_id,
        num_return_sequences=1 if greedy else n,
        stop_strings=list(stop),
        tokenizer=chat.tokenizer,
    )
    if greedy:
        kwargs.update(do_sample=False)
    else:
        kwargs.update(do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0)
    dev = chat.device
    with torch.random.fork_rng(devices=[] if dev.type == "cpu" else [dev]):
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = chat.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    texts = chat.tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
    return [_cut(t, stop) for t in texts] * (n if greedy else 1)


def propose(
    chat: ChatModel,
    targets: Sequence[str],
    examples: Sequence[Sequence[tuple[str, str]]],
    n: int = 5,
    *,
    max_new_tokens: int | None = None,
    temperature: float = 0.7,
    seed: int = 0,
    progress=None,
) -> list[list[dict[str, str]]]:
    """``n`` proposals per target: dicts ``raw`` (the answer), ``reactants`` (parsed) and
    ``rxn_smiles`` (``reactants>>target``). ``examples[i]``: the few-shot turns for target i.
    ``temperature=0`` gives greedy decoding (then ``n`` identical answers from a LocalChat).
    ``max_new_tokens``: None = 1.5x the target's token count + 16 for a LocalChat (reactants are
    about as long as the product plus a leaving group), 256 for other chat models."""
    if len(examples) != len(targets):
        raise UserError(f"{len(targets)} targets but {len(examples)} example lists")
    if n < 1:
        raise UserError(f"n must be >= 1, got {n}")
    stop = ("\n",)
    out = []
    it = progress.track(targets, len(targets), "LLM proposals") if progress else targets
    for i, target in enumerate(it):
        msgs = few_shot_messages(target, examples[i])
        if isinstance(chat, LocalChat):
            budget = max_new_tokens or int(1.5 * len(chat.tokenizer(target)["input_ids"])) + 16
            texts = _local_samples(chat, msgs, n, budget, temperature, seed + i, stop)
        else:
            texts = [
                chat.chat(
                    msgs,
                    max_new_tokens=max_new_tokens or 256,
                    temperature=temperature,
                    seed=seed + 1000 * i + j,
                    stop=stop,
                )
                for j in range(n)
            ]
        props = []
        for t in texts:
            reac = parse_reactants(t)
            props.append({"raw": t, "reactants": reac, "rxn_smiles": f"{reac}>>{target}"})
        out.append(props)
    return out
