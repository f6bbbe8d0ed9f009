"""SecKnowledge-2.0-style enrichment: tasks -> grounding -> writer -> verifier -> dedup.

Stages (each a list of record dicts; :func:`build` writes each stage as JSONL and skips a stage
whose file already exists, so an interrupted run resumes):

1. tasks: ``cve2cwe`` (a CVE description, CWE ids masked -> its CWE), ``cwe_qa`` (a CWE id ->
   its view-1000 category, definition and name), ``attack_qa`` (a technique -> its tactic);
2. grounding (multi-step, per record): MiniLM top-k CWE definitions for the description, then the
   gold CWE's definition, its view-1000 parents, CAPEC ids and consequences (``meta["facts"]``);
3. writer: ``template`` fills the format's slots from those facts; ``lm`` asks a chat model
   (local or an endpoint) to write the trace in the format, given the facts;
4. verifier (:mod:`.verify`): failures are dropped with their reasons;
5. dedup and decontamination: identical prompts once; no eval CVE id; no prompt whose MiniLM
   cosine to an eval prompt is >= 0.95.

A record is ``{"messages": [system, user, assistant], "meta": {...}}``, what TRL's
``SFTTrainer`` reads. The plain arm (:func:`plain_record`) keeps the same records with a terse
answer ("CWE-79: <name>").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from icml26.core.errors import UserError
from icml26.core.io import atomic_open
from icml26.cyberpal.catalog import AttackCatalog, CweCatalog, Pair, mask_cwe_ids
from icml26.cyberpal.formats import Format, parse, render
from icml26.cyberpal.verify import VerifyReport, verify_trace

__all__ = ["cve2cwe_prompt", "cve2cwe_tasks", "cwe_qa_tasks", "attack_qa_tasks", "CweRetriever",
           "ground", "write_template", "write_lm", "lm_prompts", "records_from_replies", "verify_records", "plain_record",
           "dedup", "decontaminate", "read_jsonl", "write_jsonl", "QUOTE_WORDS"]

QUOTE_WORDS = 12  # words quoted from a definition: short traces (<= ~96 tokens) on CPU


def cve2cwe_prompt(description: str) -> str:
    """The user turn of a CVE -> CWE question; CWE ids in the description are masked."""
    return f"Vulnerability: {mask_cwe_ids(description)}\nWhich CWE weakness is this?"


def _record(system: str, user: str, assistant: str, meta: dict) -> dict:
    return {"messages": [{"role": "system", "content": system},
                         {"role": "user", "content": user},
                         {"role": "assistant", "content": assistant}], "meta": meta}


def cve2cwe_tasks(pairs: Iterable[Pair], labels: Sequence[int] | None = None) -> list[dict]:
    """One task per CVE; ``gold`` keeps every CWE of the CVE within ``labels`` (if given)."""
    keep = set(labels) if labels is not None else None
    out = []
    for p in pairs:
        gold = [c for c in p.cwes if keep is None or c in keep]
        if gold:
            out.append({"task": "cve2cwe", "id": p.cve_id, "year": p.year,
                        "user": cve2cwe_prompt(p.description), "gold": gold,
                        "all_cwes": list(p.cwes)})
    return out


def cwe_qa_tasks(cwe: CweCatalog, ids: Iterable[int]) -> list[dict]:
    return [{"task": "cwe_qa", "id": f"CWE-{i}", "gold": [i],
             "user": f"What is CWE-{i}? Give its category in CWE view 1000 and its definition."}
            for i in ids if i in cwe and not cwe[i].deprecated]


def attack_qa_tasks(attack: AttackCatalog, ids: Iterable[str] | None = None) -> list[dict]:
    ids = sorted(attack.techniques) if ids is None else ids
    return [{"task": "attack_qa", "id": t, "technique": t, "gold": list(attack[t].tactics),
             "user": f"Which MITRE ATT&CK tactic does technique {t} serve?"}
            for t in ids if t in attack and attack[t].active and attack[t].tactics]


class CweRetriever:
    """MiniLM nearest CWE definitions ("CWE-n: name. description") for a text.

    ``ids``: the candidate CWEs (default: every non-deprecated weakness). ``embed``: a function
    texts -> (n, d) unit rows (default :func:`icml26.core.embed.embed`).
    """

    def __init__(self, cwe: CweCatalog, ids: Sequence[int] | None = None, embed=None):
        if embed is None:
            from icml26.core.embed import embed
        self.embed = embed
        self.ids = np.array(sorted(ids if ids is not None else
                                   [w.id for w in cwe.weaknesses.values() if not w.deprecated]))
        self.matrix = embed([f"{cwe[i].name}. {cwe[i].description}" for i in self.ids])

    def scores(self, texts: Sequence[str]) -> np.ndarray:
        """Cosine similarities, (len(texts), len(ids)) float32."""
        return self.embed(list(texts)) @ self.matrix.T

    def top_k(self, texts: Sequence[str], k: int = 5) -> list[list[int]]:
        s = self.scores(texts)
        order = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return [[int(self.ids[j]) for j in row] for row in order]


def ground(tasks: list[dict], cwe: CweCatalog, attack: AttackCatalog | None = None,
           retriever: CweRetriever | None = None, k: int = 5) -> list[dict]:
    """Attach grounding facts (``facts``) to each task; returns new dicts.

    For cve2cwe: retrieved top-k CWEs; the answer CWE (the gold ranked highest by retrieval, else
    the smallest gold id); its definition, view-1000 parents, CAPEC ids and consequences.
    """
    out = [dict(t) for t in tasks]
    cve = [t for t in out if t["task"] == "cve2cwe"]
    if cve and retriever is not None:
        for t, top in zip(cve, retriever.top_k([t["user"] for t in cve], k), strict=True):
            t["retrieved"] = top
    for t in out:
        if t["task"] in ("cve2cwe", "cwe_qa"):
            gold = [int(g) for g in t["gold"]]
            ranked = [c for c in t.get("retrieved", []) if c in gold]
            answer = ranked[0] if ranked else min(gold)
            w = cwe[answer]
            t["facts"] = {
                "answer": answer, "name": w.name, "definition": w.description,
                "parents": [(p, cwe[p].name) for p in cwe.parents(answer, 1000) if p in cwe],
                "capec": list(w.capec[:5]),
                "impacts": [i.strip() for _, imp in w.consequences for i in imp.split(";")
                            if i.strip()],
            }
        elif t["task"] == "attack_qa":
            if attack is None:
                raise UserError("attack_qa tasks need the ATT&CK catalogue")
            tech = attack[t["technique"]]
            t["facts"] = {"name": tech.name, "description": tech.description,
                          "truncated": tech.truncated, "tactics": list(tech.tactics)}
    return out


def _quote(text: str, n: int = QUOTE_WORDS) -> str:
    return '"' + " ".join(text.split()[:n]) + '"'


def _slot_value(kind: str, t: dict) -> str | None:
    f = t["facts"]
    if t["task"] == "attack_qa":
        return {"attack_name": f["name"], "attack_id": t["technique"],
                "quote": _quote(f["description"]) if f["description"] else None,
                "tactic": f["tactics"][0], "answer": f["tactics"][0]}.get(kind)
    a = f"CWE-{f['answer']}: {f['name']}"
    return {
        "cwe_id": f"CWE-{f['answer']}", "cwe_name": f["name"], "cwe_label": a, "answer": a,
        "parent_cwe": f"CWE-{f['parents'][0][0]}: {f['parents'][0][1]}" if f["parents"] else None,
        "quote": _quote(f["definition"]) if f["definition"] else None,
        "consequence": f["impacts"][0] if f["impacts"] else None,
        "capec": f"CAPEC-{f['capec'][0]}" if f["capec"] else None,
    }.get(kind)


def write_template(tasks: list[dict], formats: dict[str, Format]) -> list[dict]:
    """Records with traces whose slots are filled from the retrieved facts (no LM). A task whose
    facts cannot fill a slot (e.g. a pillar without a parent) gets no trace (``assistant`` "")."""
    out = []
    for t in tasks:
        fmt = formats[t["task"]]
        vals = {s.label: _slot_value(s.type, t) for s in fmt.slots}
        text = render(fmt, vals) if all(vals.values()) else ""
        out.append(_record(fmt.system, t["user"], text, _meta(t, fmt, "template")))
    return out


def _meta(t: dict, fmt: Format, writer: str) -> dict:
    return {k: v for k, v in t.items() if k != "user"} | {"format": fmt.name, "writer": writer}


def _lm_prompt(t: dict, fmt: Format) -> str:
    f = t["facts"]
    facts = json.dumps({k: v for k, v in f.items() if k != "answer"}, ensure_ascii=False)
    lines = "\n".join(f"{s.label}: <{s.type}>" for s in fmt.slots)
    return (f"Facts from the MITRE catalogues: {facts}\n\nQuestion: {t['user']}\n\n"
            f"Write exactly these lines, using only the facts (quotes verbatim, in double "
            f"quotes):\n{lines}")


def lm_prompts(tasks: list[dict], formats: dict[str, Format]) -> list[list[dict]]:
    """The writer's chats: system prompt of the format, then facts + format instructions."""
    return [[{"role": "system", "content": formats[t["task"]].system},
             {"role": "user", "content": _lm_prompt(t, formats[t["task"]])}] for t in tasks]


def records_from_replies(tasks: list[dict], formats: dict[str, Format],
                         replies: Sequence[str], writer: str = "lm") -> list[dict]:
    """Records whose traces are the writer's replies, normalised to the format's lines when
    every slot is present (the verifier judges the rest)."""
    out = []
    for t, reply in zip(tasks, replies, strict=True):
        fmt = formats[t["task"]]
        vals = parse(fmt, reply)
        text = render(fmt, vals) if all(vals.get(s.label) for s in fmt.slots) else reply.strip()
        out.append(_record(fmt.system, t["user"], text, _meta(t, fmt, writer)))
    return out


def write_lm(tasks: list[dict], formats: dict[str, Format], chat, *, max_new_tokens: int = 128,
             progress=None) -> list[dict]:
    """Records whose traces a chat model (:class:`icml26.core.chat.ChatModel`) writes from the
    facts, in the format; verify them with :func:`verify_records`."""
    chats = lm_prompts(tasks, formats)
    it = progress.track(chats, len(chats), "LM writer") if progress is not None else chats
    replies = [chat.chat(c, max_new_tokens=max_new_tokens, temperature=0.0) for c in it]
    return records_from_replies(tasks, formats, replies)


def verify_records(records: list[dict], formats: dict[str, Format], cwe: CweCatalog,
                   attack: AttackCatalog | None = None) -> tuple[list[dict], list[dict], VerifyReport]:
    """(kept, rejected with ``meta["rejected"]`` reasons, report)."""
    report, kept, rejected = VerifyReport(), [], []
    for r in records:
        meta = r["meta"]
        v = verify_trace(r["messages"][-1]["content"], formats[meta["task"]], meta, cwe, attack)
        report.add(v)
        if v.ok:
            kept.append(r)
        else:
            rejected.append({**r, "meta": {**meta, "rejected": [list(f) for f in v.failures]}})
    return kept, rejected, report


def plain_record(r: dict) -> dict:
    """The same record with a terse answer: "CWE-79: <name>" (or the tactic)."""
    f = r["meta"]["facts"]
    answer = f["tactics"][0] if r["meta"]["task"] == "attack_qa" else f"CWE-{f['answer']}: {f['name']}"
    msgs = [dict(m) for m in r["messages"]]
    msgs[0]["content"] = msgs[0]["content"].replace(" Reason in the given steps, then answer.",
                                                    " Answer with the CWE id and name.")
    msgs[-1]["content"] = answer
    return {"messages": msgs, "meta": {**r["meta"], "format": "plain"}}


def dedup(records: list[dict]) -> list[dict]:
    """First record of each (task, user prompt)."""
    seen, out = set(), []
    for r in records:
        key = (r["meta"]["task"], " ".join(r["messages"][1]["content"].split()).lower())
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def decontaminate(records: list[dict], eval_ids: Iterable[str], eval_texts: Sequence[str] = (),
                  *, threshold: float = 0.95, embed=None) -> tuple[list[dict], dict]:
    """Drop training records whose ``meta["id"]`` is an eval id, or (cve2cwe records) whose user
    prompt has MiniLM cosine >= ``threshold`` with any eval prompt. Returns (kept, counts)."""
    ids = set(eval_ids)
    kept = [r for r in records if r["meta"]["id"] not in ids]
    counts = {"by_id": len(records) - len(kept), "near_duplicate": 0}
    cand = [i for i, r in enumerate(kept) if r["meta"].get("task", "cve2cwe") == "cve2cwe"]
    if eval_texts and cand:  # only CVE prompts can be near-duplicates of CVE eval prompts
        if embed is None:
            from icml26.core.embed import embed
        a = embed([kept[i]["messages"][1]["content"] for i in cand])
        b = embed(list(eval_texts))
        near = {cand[j] for j in np.flatnonzero((a @ b.T).max(axis=1) >= threshold)}
        counts["near_duplicate"] = len(near)
        kept = [r for i, r in enumerate(kept) if i not in near]
    return kept, counts


def read_jsonl(path: str | Path) -> list[dict]:
    """Chat records from JSONL (read by :func:`icml26.core.tables.read_table`: a byte-order mark,
    bad JSON, a key given twice name the row); a clear error with the line number for a record
    that is not a chat. An empty file gives no records."""
    from icml26.core.tables import read_table

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    t = read_table(path, format="jsonl", strip=False, allow_empty=True, what="records")
    out = []
    for r, n in zip(t.rows, t.lines, strict=True):
        msgs = r.get("messages")
        if (not isinstance(msgs, list) or len(msgs) < 2
                or any(not isinstance(m, dict) or not isinstance(m.get("content"), str)
                       or m.get("role") not in ("system", "user", "assistant") for m in msgs)
                or msgs[-1]["role"] != "assistant"):
            raise UserError(f"{path}:{n}: not a chat record (need 'messages': "
                            f"[{{role, content}}...] ending with an assistant turn)")
        if not isinstance(r.setdefault("meta", {}), dict):
            raise UserError(f"{path}:{n}: 'meta' must be an object; got {type(r['meta']).__name__}")
        out.append(r)
    return out


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    n = 0
    with atomic_open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
            n += 1
    return n
