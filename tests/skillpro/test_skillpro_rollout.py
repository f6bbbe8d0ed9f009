"""Batched KV-cached rollouts equal the one-episode path (float64 tiny Llama, exact)."""

import pytest
import torch

from icml26.core.lm import tiny_llama
from icml26.skillpro.agent import SkillAgent
from icml26.skillpro.env import make_env
from icml26.skillpro.rollout import BatchedLocalChat, GenRequest, KVEngine, run_episodes
from icml26.skillpro.skill import SkillPool


@pytest.fixture(scope="module")
def chat():
    model, tok = tiny_llama(hidden=64, layers=2, heads=4, kv_heads=2, vocab="smollm2", seed=3,
                            dtype=torch.float64)
    return BatchedLocalChat((model, tok))


class LongEnv:
    """Every reply is accepted; the observation grows by one line per turn; ends after n turns
    (so episodes are long enough for the per-episode caches to matter)."""

    def __init__(self, n=4):
        self.n = n

    def reset(self, seed):
        self.lines, self.seed = [f"Game {seed}. Say something."], seed
        return "\n".join(self.lines)

    def step(self, action):
        self.lines.append(f"Turn {len(self.lines)}: you said {action.strip()[:12]!r}.")
        done = len(self.lines) > self.n
        return "\n".join(self.lines), done, float(len(action) % 3) / 2


def _ref_logprob(model, prompt, gen):
    """log p(gen | prompt) from one plain forward of the whole sequence (no cache, no batch)."""
    ids = torch.tensor([prompt + gen])
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0].double(), -1)
    return sum(float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(gen))


def test_engine_matches_generate_and_teacher_forcing_with_mixed_cache_lengths(chat):
    tok, model = chat.tokenizer, chat.model
    eng = KVEngine(model, [tok.eos_token_id])
    msgs = [
        [{"role": "user", "content": "Mastermind. " + "x" * k}] for k in (3, 40, 11)
    ]
    # turn 1 fills three slots; turn 2 extends two of them by different lengths and adds a new one
    turns = [
        [(m, slot) for slot, m in enumerate(msgs)],
        [
            ([{"role": "user", "content": msgs[0][0]["content"] + " Guess [1 2 3 4]: 0 black."}], 0),
            ([{"role": "user", "content": msgs[1][0]["content"] + " ok"}], 1),
            ([{"role": "user", "content": "Fresh prompt with no cache"}], 7),
        ],
    ]
    for turn in turns:
        ids = [chat.ids(m) for m, _ in turn]
        replies = eng.generate([GenRequest(i, 9, 0.0, None, slot) for i, (_, slot) in zip(ids, turn, strict=True)])
        for prompt, r in zip(ids, replies, strict=True):
            ref = model.generate(torch.tensor([prompt]), max_new_tokens=9, do_sample=False,
                                 pad_token_id=tok.eos_token_id)[0, len(prompt):].tolist()
            assert r.ids == ref  # same greedy tokens as transformers' generate
            assert r.logprob == pytest.approx(_ref_logprob(model, prompt, r.ids), abs=1e-9)
    assert eng.tokens_cached > 0
    # the extended prompts only ran their new tokens
    assert replies[0].computed < len(chat.ids(turns[1][0][0])) and replies[2].computed > 0


def test_sampling_does_not_depend_on_batch_company(chat):
    ids = [chat.ids([{"role": "user", "content": f"prompt {k}" * (k + 1)}]) for k in range(3)]
    reqs = [GenRequest(i, 8, 1.0, 100 + k, None) for k, i in enumerate(ids)]
    together = KVEngine(chat.model, [chat.tokenizer.eos_token_id]).generate(reqs)
    alone = [KVEngine(chat.model, [chat.tokenizer.eos_token_id]).generate([q])[0] for q in reqs]
    assert [r.ids for r in together] == [r.ids for r in alone]
    assert [r.logprob for r in together] == pytest.approx([r.logprob for r in alone], abs=1e-9)
    other_seed = KVEngine(chat.model, [0]).generate([GenRequest(ids[0], 8, 1.0, 999, None)])[0]
    assert other_seed.ids != together[0].ids  # the seed matters (8 tokens over 49k ids)


def _agents(chat, pools=True):
    return [
        SkillAgent(chat, SkillPool.seeded() if pools else None, meta=chat if k % 2 else None,
                   select=("llm_model", "llm_topk_lcb")[k % 2], epsilon=0.4, seed=k,
                   temperature=0.0, max_new_tokens=5)
        for k in range(3)
    ]


def test_batched_episodes_equal_one_episode_path(chat):
    """Greedy: the batched, KV-cached rollouts pick exactly the actions (and skills, and meta
    decisions) of per-step transformers ``generate``, episode by episode; their recorded action
    log-probs equal the gate's teacher-forced scorer."""
    ref = [a.run_episode(LongEnv(3), 10 + k) for k, a in enumerate(_agents(chat))]
    ref.append(SkillAgent(chat, None, temperature=0.0, max_new_tokens=6, seed=9).run_episode(
        make_env("Mastermind-v0"), 3))
    chat.engine.tokens_cached = 0
    jobs = [(a, LongEnv(3), 10 + k) for k, a in enumerate(_agents(chat))]
    jobs.append((SkillAgent(chat, None, temperature=0.0, max_new_tokens=6, seed=9),
                 make_env("Mastermind-v0"), 3))
    got = run_episodes(jobs)
    for r, g in zip(ref, got, strict=True):
        assert [s.action for s in g.steps] == [s.action for s in r.steps]
        assert [s.skill for s in g.steps] == [s.skill for s in r.steps]
        assert g.ret == r.ret and g.calls == r.calls
    assert max(len(r.steps) for r in ref) == 3 and chat.engine.tokens_cached > 0
    assert not chat.engine.slots  # finished episodes leave the batch (retired as prefixes)
    # continuous batching: at most 2 live episodes, refilled as they finish; same episodes
    jobs = [(a, LongEnv(3), 10 + k) for k, a in enumerate(_agents(chat))]
    again = run_episodes(jobs, max_live=2)
    assert [[s.action for s in t.steps] for t in again] == [
        [s.action for s in t.steps] for t in got[:3]
    ]


def test_llm_claim_path_runs_batched(tmp_path, chat):
    """The claim's LLM arm end to end on a tiny model folder (all seven conditions batched)."""
    from icml26 import claims_index
    from icml26.core.claims import run_claim

    chat.model.float().save_pretrained(tmp_path / "m")
    chat.tokenizer.save_pretrained(tmp_path / "m")
    chat.model.double()
    r = run_claim(
        claims_index.get("skillpro"), scale="tiny", out_root=tmp_path,
        options={"agent": str(tmp_path / "m"), "iters": "1", "episodes": "1", "eval": "1",
                 "hard": "1", "meta": "0", "precondition": "0"},
    )
    assert r.get("error") is None, r.get("error")
    names = [row["system"] for row in r["rows"]]
    assert {"wo_sg", "Skill-Pro (template mutator)", "naive memory"} <= set(names)
    assert "evolver JSON failures / calls" in r["rows"][2] and "guidance tokens/step" in r["rows"][2]
    assert any("KV engine" in n for n in r["notes"])
    assert [c["kind"] for c in r["power"]["checks"]] == ["control", "floor", "degeneracy"]
