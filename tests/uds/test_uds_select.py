import json

import pytest
import torch

from icml26.core.errors import UserError
from icml26.core.lm import tiny_llama
from icml26.uds.data import PoolConfig, make_pool
from icml26.uds.loop import (
    SFTExample,
    TrainConfig,
    budget_k,
    collate,
    encode,
    read_jsonl,
    select_window,
    train_online,
)
from icml26.uds.selectors import (
    GradNormSelector,
    MaxLossSelector,
    RandomSelector,
    Selector,
    UDSSelector,
    make_selector,
    top_k,
)


@pytest.fixture(scope="module")
def lm():
    model, tok = tiny_llama(32, 1, 2, max_len=64, seed=0, dtype=torch.float64)
    pool, _ = make_pool(PoolConfig(n_train=24, n_test=5), seed=0)
    enc, _ = encode(tok, pool, 40)
    return model, tok, enc


@pytest.mark.parametrize("name", ["maxloss", "gradnorm", "uds"])
def test_scores_invariant_to_padding_and_neighbours(lm, name):
    model, tok, enc = lm
    pad = tok.pad_token_id
    sel = make_selector(name, max_len=48)
    alone = torch.stack([sel.scores(model, collate([e], pad))[0] for e in enc[:4]])
    together = sel.scores(model, collate(enc[:4], pad))
    long = enc[:4] + [type(enc[0])(enc[0].input_ids * 3, enc[0].labels * 3)]  # forces more padding
    padded = sel.scores(model, collate(long, pad))[:4]
    torch.testing.assert_close(together, alone, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(padded, alone, rtol=1e-9, atol=1e-9)


def _left_pad(batch: dict, pad: int) -> dict:
    """The same rows, padded on the left instead of the right."""
    out = {k: torch.empty_like(v) for k, v in batch.items()}
    for i in range(batch["input_ids"].shape[0]):
        n = int(batch["attention_mask"][i].sum())
        shift = batch["input_ids"].shape[1] - n
        for k, fill in (("input_ids", pad), ("labels", -100), ("attention_mask", 0)):
            out[k][i] = fill
            out[k][i, shift:] = batch[k][i, :n]
    return out


@pytest.mark.parametrize("name", ["maxloss", "gradnorm", "uds"])
def test_scores_equal_on_left_and_right_padding_with_a_labelled_first_token(lm, name):
    """train_on_inputs-style labels on every token but the first: left padding used to score the
    pad row in front of the first real token; now both sides give the unpadded scores."""
    model, tok, enc = lm
    pad = tok.pad_token_id
    items = [type(e)(e.input_ids, [-100, *e.input_ids[1:]]) for e in enc[:4]]
    items[0] = type(items[0])(items[0].input_ids, list(items[0].input_ids))  # first labelled too
    right = collate(items, pad)
    left = _left_pad(right, pad)
    assert bool((left["attention_mask"][:, 0] == 0).any())  # some rows really are left-padded
    s_right = make_selector(name, max_len=48).scores(model, right)
    s_left = make_selector(name, max_len=48).scores(model, left)
    alone = torch.stack([make_selector(name, max_len=48).scores(model, collate([e], pad))[0]
                         for e in items])
    torch.testing.assert_close(s_right, alone, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(s_left, alone, rtol=1e-9, atol=1e-9)


def test_score_mode_train_keeps_dropout_on_and_restores_the_mode():
    model, tok = tiny_llama(32, 1, 2, max_len=64, seed=0, dtype=torch.float64)
    model.config.attention_dropout = 0.5
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = 0.5
    pool, _ = make_pool(PoolConfig(n_train=6, n_test=2), seed=0)
    enc, _ = encode(tok, pool, 40)
    b = collate(enc[:4], tok.pad_token_id)
    model.eval()
    ev = MaxLossSelector()
    assert torch.equal(ev.scores(model, b), ev.scores(model, b))  # eval: deterministic
    assert not model.training
    tr = make_selector("maxloss", score_mode="train")
    torch.manual_seed(0)
    s1 = tr.scores(model, b)
    s2 = tr.scores(model, b)
    assert not torch.allclose(s1, s2)  # dropout on in the scoring forward
    assert not model.training  # and the caller's eval mode is back
    with pytest.raises(ValueError, match="score_mode"):
        make_selector("uds", score_mode="inference")


def test_uds_queue_filled_by_selected_only_and_inter_term(lm):
    model, tok, enc = lm
    sel = UDSSelector(max_len=48, queue_size=5, r_time=4, r_vocab=16)
    b = collate(enc[:6], tok.pad_token_id)
    intra, inter, emb = sel.terms(model, b)
    assert torch.equal(inter, torch.zeros(6, dtype=torch.float64))
    chosen = sel.select(model, b, 2)
    assert len(sel.fifo) == 2
    torch.testing.assert_close(sel.fifo.items, emb[chosen].to(sel.fifo.items))
    _, inter2, emb2 = sel.terms(model, b)
    torch.testing.assert_close(
        inter2, torch.cdist(emb2.double(), emb[chosen].double()).mean(-1), rtol=1e-6, atol=1e-6
    )
    s = sel.scores(model, b)
    torch.testing.assert_close(s, intra + 2.5e-3 * inter2)


def test_scoring_runs_no_backward(lm):
    model, tok, enc = lm
    calls = []
    hooks = [p.register_hook(lambda g: calls.append(1)) for p in model.parameters()]
    for sel in (MaxLossSelector(), GradNormSelector(), UDSSelector(max_len=48), RandomSelector()):
        sel.select(model, collate(enc[:4], tok.pad_token_id), 1)
    for h in hooks:
        h.remove()
    assert calls == []
    assert all(isinstance(s, Selector) for s in (MaxLossSelector(), RandomSelector()))


def test_window_step_scope_is_global_topk():
    class Fixed:
        def __init__(self):
            self.seen = None

        def scores(self, model, batch):
            return batch["s"].double()

        def observe(self, chosen):
            self.seen = chosen

        def select(self, model, batch, k):
            return top_k(self.scores(model, batch), k)

    mbs = [
        {"input_ids": torch.zeros(3, 2), "s": torch.tensor([5.0, 1.0, 0.0])},
        {"input_ids": torch.zeros(3, 2), "s": torch.tensor([4.0, 6.0, 2.0])},
    ]
    sel = Fixed()
    got = select_window(None, mbs, sel, 3, "step")
    assert [g.tolist() for g in got] == [[0], [0, 1]]
    assert sel.seen.tolist() == [0, 3, 4]
    assert [g.tolist() for g in select_window(None, mbs, sel, 1, "micro_batch")] == [[0], [1]]


def test_trained_samples_equal_budget_times_n(lm):
    model, tok, enc = lm
    m = type(model)(model.config).double()
    m.load_state_dict(model.state_dict())
    log = train_online(
        m,
        enc,
        RandomSelector(0),
        TrainConfig(lr=1e-3, candidates=8, budget=0.25, epochs=2),
        tok.pad_token_id,
    )
    assert len(log.selected) == 2 * 24 // 4 and log.steps == 6
    assert len(set(log.selected[:6])) == 6


def test_bad_input(tmp_path, lm):
    _, tok, _ = lm
    for budget, b in ((0.0, 8), (1.5, 8), (0.1, 4)):
        with pytest.raises(ValueError, match="budget"):
            budget_k(budget, b)
    with pytest.raises(ValueError, match="alpha"):
        UDSSelector(alpha=-1)
    with pytest.raises(ValueError, match="queue_size"):
        UDSSelector(queue_size=0)
    with pytest.raises(ValueError, match="unknown selector 'foo'"):
        make_selector("foo")
    with pytest.raises(ValueError, match=r"k must be in \[1, 2\]"):
        RandomSelector().select(None, {"input_ids": torch.zeros(2, 3)}, 3)
    f = tmp_path / "d.jsonl"
    f.write_text(
        json.dumps({"prompt": "a", "response": "b"}) + "\n" + json.dumps({"prompt": "a"}) + "\n"
    )
    with pytest.raises(UserError, match=r"d.jsonl:2: expected fields"):
        read_jsonl(f)
    f.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yo"},
                ]
            }
        )
        + "\n"
    )
    assert read_jsonl(f) == [SFTExample("hi", "yo")]
    enc, skipped = encode(tok, [SFTExample("x" * 50, "y"), SFTExample("q", "r")], max_len=20)
    assert skipped == 1 and len(enc) == 1


def test_pool_composition_and_disjoint_held_out():
    from icml26.uds.data import make_val

    cfg = PoolConfig(n_train=400, n_test=50, n_val=40, dup_frac=0.5, noise_frac=0.1)
    pool, test = make_pool(cfg, seed=3)
    val = make_val(cfg, seed=3)
    assert (len(pool), len(test), len(val)) == (400, 50, 40)
    assert sum(e.noisy for e in pool) == 40
    assert sum(e.source.startswith("dup:") for e in pool) <= 200
    assert len({e.prompt for e in pool if e.source.startswith("dup:")}) <= cfg.n_templates
    prompts = {e.prompt for e in pool}
    assert not prompts & {e.prompt for e in test} and not prompts & {e.prompt for e in val}
    assert not {e.prompt for e in test} & {e.prompt for e in val}
    assert all(not e.noisy for e in test + val)
    assert make_pool(cfg, seed=3) == (pool, test)
    with pytest.raises(ValueError, match="noise_frac"):
        PoolConfig(noise_frac=1.0)


@pytest.mark.parametrize("budget", [0.0, -0.25, 1.5, float("nan")])
def test_budget_outside_unit_interval_is_an_error_naming_option_and_value(tmp_path, budget):
    from typer.testing import CliRunner

    from icml26.core.claims import RunContext
    from icml26.uds.claim import scale_for
    from icml26.uds.cli import app

    shown = f"{budget:g}"
    with pytest.raises(ValueError, match=rf"budget must be in \(0, 1\]; got {shown}"):
        budget_k(budget, 8)
    with pytest.raises(ValueError, match=rf"budget must be in \(0, 1\]; got {shown}"):
        TrainConfig(budget=budget)
    # the command line names the flag, before any model is loaded
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n")
    res = CliRunner().invoke(app, ["sft", "--data", str(data), "-o", str(tmp_path / "o"),
                                   "--budget", str(budget)])  # fmt: skip
    assert isinstance(res.exception, UserError)
    assert str(res.exception) == f"--budget must be in (0, 1]; got {shown}"
    with pytest.raises(UserError, match=rf"option budgets: each budget must be in \(0, 1\]; got {shown}"):
        scale_for(RunContext(scale="tiny", options={"budgets": f"0.25,{budget}"}))
