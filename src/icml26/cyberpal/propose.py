"""Format proposals and a pairwise LLM judge (``icml26 cyberpal build --judge SPEC``).

The paper has experts define the reasoning formats and an LLM propose variants that a judge
compares. Here, for each task:

1. **Proposals.** The judge model (any :class:`~icml26.core.chat.ChatModel`: a local HF model,
   an OpenAI-compatible endpoint, or a :class:`~icml26.core.chat.StubChat` in tests) is shown the
   current format as YAML and the slot types, and asked for ``n`` alternative formats, one YAML
   document per call (temperature ``temperature``, seeds 0..n-1). A reply that is not a valid
   format for the task (bad YAML, unknown slot type, no final ``answer`` slot...) is dropped with
   its reason; so is a format whose template traces fail the verifier on the sample tasks (a slot
   the facts cannot fill, or a check that fails).
2. **Pairwise judge.** Every pair of surviving candidates (the current format included) is
   compared on the same ``n_examples`` grounded tasks: the judge sees the question and the two
   template-written traces and answers ``A`` or ``B``. Each pair is asked in both orders, so a
   judge that always says ``A`` gives every format the same score (position bias cancels).
   Unparsable verdicts count for neither. Score = share of comparisons won.
3. **Choice.** The best score wins; ties keep the earlier candidate, so the current (expert)
   format stays unless a proposal strictly beats it.

The chosen formats are written as YAML (user-editable) next to the build, with the full table.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from icml26.core.errors import UserError
from icml26.cyberpal.formats import SLOT_TYPES, Format

__all__ = ["FormatChoice", "propose_formats", "judge_pairwise", "choose_format",
           "format_yaml", "JUDGE_SYSTEM"]

JUDGE_SYSTEM = ("You are a senior security analyst grading reasoning written for training "
                "security models. Prefer answers whose steps are specific, grounded in MITRE "
                "catalogue facts, ordered from evidence to conclusion, and not padded.")
_FENCE = re.compile(r"```(?:ya?ml)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def format_yaml(fmt: Format) -> str:
    import yaml

    return yaml.safe_dump(fmt.to_dict(), sort_keys=False, allow_unicode=True, width=1000)


def _proposal_prompt(fmt: Format) -> list[dict]:
    return [
        {"role": "system", "content": "You design step-by-step reasoning formats for security "
                                      "question answering. Reply with one YAML document only."},
        {"role": "user", "content": (
            f"Here is the current reasoning format for the task '{fmt.task}':\n\n"
            f"{format_yaml(fmt)}\n"
            f"Propose a different, better format for the same task. Keep the fields name, task, "
            f"system, slots. Each slot is {{label, type}}; types: {', '.join(SLOT_TYPES)}. "
            f"Exactly one slot of type answer, and it must be last. Labels must be distinct and "
            f"contain no ':'.")},
    ]


def _parse_proposal(reply: str, task: str, where: str) -> Format:
    import yaml

    m = _FENCE.search(reply)
    text = m.group(1) if m else reply
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{where}: not YAML ({str(exc).splitlines()[0]})") from None
    fmt = Format.from_dict(data, where=where)
    if fmt.task != task:
        raise UserError(f"{where}: task {fmt.task!r}, expected {task!r}")
    return fmt


@dataclass
class FormatChoice:
    """What :func:`choose_format` did for one task."""

    task: str
    chosen: Format
    candidates: list[Format]
    scores: list[float]  # share of pairwise comparisons won, per candidate
    wins: list[list[int]]  # wins[i][j]: comparisons i won against j (both orders)
    rejected: list[dict] = field(default_factory=list)  # {"proposal", "reason"}
    n_judged: int = 0
    n_unparsed: int = 0

    def to_dict(self) -> dict:
        return {"task": self.task, "chosen": self.chosen.name,
                "candidates": [{"name": f.name, "score": s, "slots": [x.type for x in f.slots]}
                               for f, s in zip(self.candidates, self.scores, strict=True)],
                "wins": self.wins, "rejected": self.rejected, "judged": self.n_judged,
                "unparsed": self.n_unparsed}


def propose_formats(fmt: Format, chat, *, n: int = 3, temperature: float = 0.7,
                    max_new_tokens: int = 400) -> tuple[list[Format], list[dict]]:
    """``n`` proposals from ``chat``: (valid formats, [{"proposal": i, "reason": ...}]).
    Proposals get distinct names (``<name>-pN`` when the model reuses a name)."""
    out, rejected, names = [], [], {fmt.name}
    for i in range(n):
        reply = chat.chat(_proposal_prompt(fmt), max_new_tokens=max_new_tokens,
                          temperature=temperature, seed=i)
        try:
            p = _parse_proposal(reply, fmt.task, f"proposal {i}")
        except UserError as exc:
            rejected.append({"proposal": i, "reason": str(exc)})
            continue
        if p.name in names:
            p = Format(f"{fmt.name}-p{i}", p.task, p.slots, p.system)
        if any(x.slots == p.slots for x in [fmt, *out]):
            rejected.append({"proposal": i, "reason": "same slots as an earlier candidate"})
            continue
        names.add(p.name)
        out.append(p)
    return out, rejected




def _parse_verdict(reply: str) -> str | None:
    """"A"/"B" from a judge reply: the whole reply is one letter (any case, punctuation
    allowed), or exactly one of the capital letters A, B stands alone in it; else None."""
    text = reply.strip()
    if text.rstrip(".):").lstrip("(").upper() in ("A", "B"):
        return text.rstrip(".):").lstrip("(").upper()
    found = set(re.findall(r"\b([AB])\b", text))
    return found.pop() if len(found) == 1 else None


def judge_pairwise(question_traces: Sequence[tuple[str, Sequence[str]]], chat, *,
                   max_new_tokens: int = 8) -> tuple[list[list[int]], int, int]:
    """``question_traces``: per example, (question, trace of candidate 0, 1, ...). Every pair of
    candidates, in both orders, on every example. Returns (wins matrix, judged, unparsed)."""
    k = len(question_traces[0][1]) if question_traces else 0
    wins = [[0] * k for _ in range(k)]
    judged = unparsed = 0
    for question, traces in question_traces:
        if len(traces) != k:
            raise ValueError("every example needs one trace per candidate")
        for i, j in itertools.permutations(range(k), 2):  # (i as A, j as B) and (j as A, i as B)
            reply = chat.chat([
                {"role": "system", "content": JUDGE_SYSTEM},
                {"role": "user", "content": (
                    f"Question:\n{question}\n\nAnswer A:\n{traces[i]}\n\nAnswer B:\n{traces[j]}"
                    "\n\nWhich answer is the better expert reasoning? Reply with one letter: A "
                    "or B.")}], max_new_tokens=max_new_tokens, temperature=0.0, seed=0)
            v = _parse_verdict(reply)
            judged += 1
            if v is None:
                unparsed += 1
            elif v == "A":
                wins[i][j] += 1
            else:
                wins[j][i] += 1
    return wins, judged, unparsed


def choose_format(fmt: Format, tasks: list[dict], chat, cwe, attack, *, n_proposals: int = 3,
                  n_examples: int = 3, temperature: float = 0.7) -> FormatChoice:
    """Propose, filter by the verifier on ``tasks`` (grounded, of ``fmt.task``), judge pairwise,
    choose (ties keep the earlier candidate; candidate 0 is ``fmt``)."""
    from icml26.cyberpal.enrich import verify_records, write_template

    sample = [t for t in tasks if t["task"] == fmt.task][:n_examples]
    if not sample:
        raise UserError(f"no grounded {fmt.task} task to judge formats on")
    proposals, rejected = propose_formats(fmt, chat, n=n_proposals, temperature=temperature)
    cands, traces = [], []
    for f in [fmt, *proposals]:
        recs = write_template(sample, {fmt.task: f})
        kept, _, rep = verify_records(recs, {fmt.task: f}, cwe, attack)
        if len(kept) < len(sample) and f is not fmt:
            fails = {c: n for c, n in rep.to_dict()["by_check"].items() if n}
            rejected.append({"proposal": f.name, "reason": f"template traces fail the verifier "
                             f"({len(sample) - len(kept)}/{len(sample)}; {fails})"})
            continue
        cands.append(f)
        traces.append([r["messages"][-1]["content"] for r in recs])
    qt = [(sample[e]["user"], [traces[c][e] for c in range(len(cands))])
          for e in range(len(sample))]
    if len(cands) > 1:
        wins, judged, unparsed = judge_pairwise(qt, chat)
    else:
        wins, judged, unparsed = [[0]], 0, 0
    per = 2 * (len(cands) - 1) * len(sample)
    scores = [sum(wins[i]) / per if per else 1.0 for i in range(len(cands))]
    best = max(range(len(cands)), key=lambda i: (scores[i], -i))
    return FormatChoice(fmt.task, cands[best], cands, scores, wins, rejected, judged, unparsed)
