"""CVE -> CWE evaluation (generate or rank), hierarchy credit, format compliance; catalogue MCQs.

Scoring of one prediction ``p`` against a CVE's gold CWEs ``G`` (all CWEs listed for the CVE):

- any-gold: ``p in G`` (the headline; a CVE can have several CWEs);
- strict: the same, counted only over CVEs with exactly one CWE (unambiguous items);
- hierarchy: 1 if ``p in G``, 0.5 if ``p`` is a view-1000 parent or child of some ``g in G``,
  else 0.

``generate`` mode decodes greedily and takes the *last* ``CWE-n`` of the answer; ``rank`` mode
scores each label "CWE-n: <name>" as the assistant's reply (summed log-prob) and takes the best.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from icml26.core.hfcache import cache_kw, output_cache
from icml26.core.mcq import MCQItem
from icml26.cyberpal.catalog import AttackCatalog, CweCatalog
from icml26.cyberpal.formats import Format, parse
from icml26.cyberpal.train import render_chat

__all__ = ["parse_cwe", "generate", "rank_labels", "CweScores", "score_cwe",
           "build_mcq", "few_shot_messages"]

_CWE_RE = re.compile(r"CWE[-_ ]?(\d+)", re.IGNORECASE)


def parse_cwe(text: str) -> int | None:
    """The last ``CWE-n`` in ``text`` (None if none)."""
    found = _CWE_RE.findall(text)
    return int(found[-1]) if found else None


@torch.inference_mode()
def generate(model, tok, chats: Sequence[list[dict]], *, max_new_tokens: int = 96,
             batch_size: int = 16, progress=None) -> list[str]:
    """Greedy replies to chats (each a message list ending before the assistant turn).

    Left-padded batches, longest first; stops at EOS (the chat template's end-of-turn)."""
    device = next(model.parameters()).device
    prompts = [render_chat(tok, list(c), add_generation_prompt=True) for c in chats]
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    eos = [tok.eos_token_id] + [tok.convert_tokens_to_ids(t) for t in ("<|im_end|>",)
                                if t in tok.get_vocab()]
    out: list[str] = [""] * len(prompts)
    bar = progress.task("generate", len(prompts)) if progress is not None else (lambda n=1: None)
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        width = max(len(prompts[i]) for i in idx)
        ids = torch.full((len(idx), width), pad, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for r, i in enumerate(idx):
            ids[r, width - len(prompts[i]) :] = torch.tensor(prompts[i])
            attn[r, width - len(prompts[i]) :] = 1
        gen = model.generate(input_ids=ids.to(device), attention_mask=attn.to(device),
                             max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=eos, pad_token_id=pad)
        for r, i in enumerate(idx):
            out[i] = tok.decode(gen[r, width:], skip_special_tokens=True).strip()
        bar(len(idx))
    return out


@torch.inference_mode()
def rank_labels(model, tok, chats: Sequence[list[dict]], labels: Sequence[str], *,
                batch_size: int = 16, prefix_cache: bool = True, progress=None) -> np.ndarray:
    """Summed log p(label tokens | templated prompt), float64 ``(len(chats), len(labels))``.

    ``prefix_cache`` (default): per chat, one forward pass over the prompt plus the labels'
    common leading tokens (e.g. ``CWE-``) fills a KV cache; all labels' remaining tokens are
    then scored as one right-padded batch over copies of that cache. Equal to scoring every
    full sequence (``prefix_cache=False``, the reference) up to float rounding, at about
    ``(prompt + label) / label`` times less compute for long prompts."""
    device = next(model.parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    out = np.zeros((len(chats), len(labels)))
    if not labels:
        return out
    bar = progress.task("rank", len(chats)) if progress is not None else (lambda n=1: None)
    for c, chat in enumerate(chats):
        prompt = render_chat(tok, list(chat), add_generation_prompt=True)
        conts = [render_chat(tok, list(chat) + [{"role": "assistant", "content": lab}])[len(prompt):]
                 for lab in labels]
        if prefix_cache:
            out[c] = _rank_cached(model, prompt, conts, pad, batch_size, device)
        else:
            out[c] = _rank_full(model, prompt, conts, pad, batch_size, device)
        bar(1)
    return out


def _logp(logits):
    return torch.log_softmax(logits if logits.dtype == torch.float64 else logits.float(), -1)


def _rank_full(model, prompt, conts, pad, batch_size, device) -> np.ndarray:
    """Reference: every (prompt + continuation) run in full, right-padded batches."""
    out = np.zeros(len(conts))
    for s in range(0, len(conts), batch_size):
        chunk = conts[s : s + batch_size]
        width = len(prompt) + max(len(x) for x in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        for r, x in enumerate(chunk):
            ids[r, : len(prompt) + len(x)] = torch.tensor(prompt + x)
        attn = (torch.arange(width)[None] < torch.tensor(
            [len(prompt) + len(x) for x in chunk])[:, None]).long()
        logp = _logp(model(input_ids=ids.to(device), attention_mask=attn.to(device)).logits)
        for r, x in enumerate(chunk):
            pos = torch.arange(len(prompt) - 1, len(prompt) + len(x) - 1)
            out[s + r] = float(logp[r, pos, torch.tensor(x)].double().sum())
    return out


def _hidden_and_head(model):
    """(decoder, LM head) when the model separates them (then logits are computed only where
    needed), else (None, None)."""
    dec = getattr(model, "get_decoder", lambda: None)()
    head = model.get_output_embeddings()
    return (dec, head) if dec is not None and head is not None else (None, None)


def _rank_cached(model, prompt, conts, pad, batch_size, device) -> np.ndarray:
    """Prompt (+ the continuations' common leading tokens) once into a KV cache, then the
    continuations' rest, sorted by length into right-padded batches over copies of the cache.
    Positions follow the cache length, so each rest sits at its positions in the full sequence;
    the LM head runs only at scored positions."""
    common = 0
    while all(len(x) > common + 1 for x in conts) and len({x[common] for x in conts}) == 1:
        common += 1  # keep >= 1 token per continuation for the batched pass
    prefix = prompt + list(conts[0][:common])
    dec, head = _hidden_and_head(model)
    ids = torch.tensor([prefix], device=device)
    attn = torch.ones_like(ids)
    scored = slice(len(prompt) - 1, len(prefix))  # positions whose next token is scored
    if dec is not None:
        pre = dec(input_ids=ids, attention_mask=attn, use_cache=True)
        logp_pre = _logp(head(pre.last_hidden_state[0, scored]))
    else:  # pragma: no cover - models without a separable head
        pre = model(input_ids=ids, attention_mask=attn, use_cache=True)
        logp_pre = _logp(pre.logits[0, scored])
    kv = output_cache(pre)
    base = float(sum(logp_pre[k, prefix[len(prompt) + k]].double()
                     for k in range(len(prefix) - len(prompt))))
    first = logp_pre[-1]  # predicts each rest's first token
    out = np.zeros(len(conts))
    order = sorted(range(len(conts)), key=lambda j: len(conts[j]))
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        rest = [conts[j][common:] for j in idx]
        width = max(len(x) for x in rest)
        ids = torch.full((len(rest), width), pad, dtype=torch.long)
        for r, x in enumerate(rest):
            ids[r, : len(x)] = torch.tensor(x)
        valid = torch.arange(width)[None] < torch.tensor([len(x) for x in rest])[:, None]
        attn = torch.cat([torch.ones((len(rest), len(prefix)), dtype=torch.long),
                          valid.long()], 1).to(device)
        cache = copy.deepcopy(kv)
        cache.batch_repeat_interleave(len(rest))
        # position t of a rest predicts its token t+1: score positions t < len - 1
        need = valid.clone()
        need[torch.arange(len(rest)), torch.tensor([len(x) - 1 for x in rest])] = False
        tgt = torch.cat([ids[:, 1:], ids[:, :1]], 1)[need]
        if dec is not None:
            h = dec(input_ids=ids.to(device), attention_mask=attn, **cache_kw(dec, cache),
                    use_cache=True).last_hidden_state
            lp = _logp(head(h[need.to(device)])) if need.any() else None
        else:  # pragma: no cover
            lp = _logp(model(input_ids=ids.to(device), attention_mask=attn,
                             **cache_kw(model, cache), use_cache=True).logits[need.to(device)])
        tok_lp = lp[torch.arange(len(tgt)), tgt.to(device)].double().cpu() if lp is not None \
            else torch.zeros(0, dtype=torch.float64)
        owner = torch.arange(len(rest))[:, None].expand_as(need)[need]
        tails = torch.zeros(len(rest), dtype=torch.float64).index_add_(0, owner, tok_lp)
        for r, (j, x) in enumerate(zip(idx, rest, strict=True)):
            out[j] = base + float(first[x[0]].double()) + float(tails[r])
    return out


@dataclass
class CweScores:
    """Per-CVE arrays (same order as the inputs)."""

    pred: list[int | None]
    any_gold: np.ndarray  # bool
    strict_mask: np.ndarray  # bool: CVE has exactly one CWE
    hierarchy: np.ndarray  # float in {0, 0.5, 1}
    compliant: np.ndarray  # bool

    def summary(self) -> dict:
        s = self.strict_mask
        return {"any_gold": float(self.any_gold.mean()),
                "strict": float(self.any_gold[s].mean()) if s.any() else float("nan"),
                "hierarchy": float(self.hierarchy.mean()),
                "compliance": float(self.compliant.mean()), "n": int(len(self.pred))}


def score_cwe(preds: Sequence[int | None], golds: Sequence[Sequence[int]], cwe: CweCatalog,
              texts: Sequence[str] | None = None, fmt: Format | None = None) -> CweScores:
    """Score predictions. Compliance: with ``fmt``, every slot present; else a parsable id."""
    any_gold, hier, strict, comp = [], [], [], []
    for i, (p, g) in enumerate(zip(preds, golds, strict=True)):
        ok = p is not None and p in g
        any_gold.append(ok)
        hier.append(1.0 if ok else 0.5 if p is not None and any(cwe.related(p, x) for x in g)
                    else 0.0)
        strict.append(len(g) == 1)
        if texts is not None and fmt is not None:
            vals = parse(fmt, texts[i])
            comp.append(all(vals.get(s.label) for s in fmt.slots) and p is not None)
        else:
            comp.append(p is not None)
    return CweScores(list(preds), np.array(any_gold), np.array(strict), np.array(hier),
                     np.array(comp))


def few_shot_messages(system: str, shots: Sequence[tuple[str, str]], user: str) -> list[dict]:
    """A k-shot chat: (user, assistant) example turns, then the question."""
    msgs = [{"role": "system", "content": system}]
    for q, a in shots:
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return msgs + [{"role": "user", "content": user}]


def build_mcq(cwe: CweCatalog, attack: AttackCatalog, n_cwe: int, n_attack: int, *,
              hard: bool, seed: int = 0) -> list[MCQItem]:
    """Four-option items from the catalogues; distractors are never a true answer.

    CWE (half each): id -> name, definition -> id. ATT&CK (half each): technique -> tactic,
    name -> id. ``hard``: CWE distractors are view-1000 siblings (then cousins), technique
    distractors share a tactic; otherwise random entries.
    """
    rng = np.random.default_rng(seed)
    ws = sorted(w.id for w in cwe.weaknesses.values()
                if not w.deprecated and cwe.parents(w.id, 1000))
    techs = sorted(t for t, x in attack.techniques.items() if x.active and x.tactics)
    items: list[MCQItem] = []

    def pick(pool, exclude, k):
        pool = [x for x in dict.fromkeys(pool) if x not in exclude]
        return [pool[j] for j in rng.permutation(len(pool))[:k]] if len(pool) >= k else None

    def add(qid, task, question, right, wrong):
        opts = [right] + wrong
        perm = rng.permutation(4)
        items.append(MCQItem(qid, task, question, tuple(opts[j] for j in perm),
                             int(np.where(perm == 0)[0][0])))

    for i in rng.permutation(len(ws)):
        if sum(it.task.startswith("cwe") for it in items) >= n_cwe:
            break
        w = cwe[ws[i]]
        pool = list(cwe.siblings(w.id)) + [c for p in cwe.parents(w.id) for s in cwe.parents(p)
                                           for c in cwe.children(s)] if hard else ws
        pool = [c for c in pool if c in cwe and not cwe[c].deprecated
                and cwe[c].name != w.name]
        wrong = pick(pool, {w.id}, 3)
        if wrong is None:
            continue
        if len(items) % 2 == 0:
            add(f"cwe-name-{w.id}", "cwe_id2name", f"What is the name of CWE-{w.id}?",
                w.name, [cwe[c].name for c in wrong])
        else:
            add(f"cwe-def-{w.id}", "cwe_def2id", f"Which CWE is defined as: {w.description}",
                f"CWE-{w.id}", [f"CWE-{c}" for c in wrong])
    n0 = len(items)
    for i in rng.permutation(len(techs)):
        if len(items) - n0 >= n_attack:
            break
        t = attack[techs[i]]
        if (len(items) - n0) % 2 == 0:
            wrong = pick([x for x in attack.tactics if x not in t.tactics], set(), 3)
            if wrong is None:
                continue
            add(f"att-tac-{t.id}", "attack_tactic",
                f"Which MITRE ATT&CK tactic does technique {t.id} ({t.name}) serve?",
                t.tactics[0], wrong)
        else:
            pool = [x for x in techs if (set(attack[x].tactics) & set(t.tactics)) or not hard]
            wrong = pick([x for x in pool if attack[x].name != t.name], {t.id}, 3)
            if wrong is None:
                continue
            add(f"att-id-{t.id}", "attack_name2id",
                f"What is the MITRE ATT&CK id of the technique '{t.name}'?", t.id, wrong)
    return items
