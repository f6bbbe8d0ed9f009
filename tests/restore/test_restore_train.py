"""The claim's model build: per-token vision targets, balanced QA, the stage-2 forward equals
LLaVA's own, and a (very short) build reloads with ``from_pretrained``."""

import json

import numpy as np
import torch

from icml26.restore import scenes
from icml26.restore.train import (
    N_IMAGE_TOKENS,
    _balanced,
    build_tiny_llava,
    text_hidden,
    vision_features,
)
from icml26.restore.vlm import tiny_llava


def test_token_targets_match_pixel_geometry():
    images, _, layouts = scenes.make_dataset(6, seed=3, return_layouts=True)
    tg = scenes.token_targets(layouts)
    assert tg.shape == (6, N_IMAGE_TOKENS, 4)
    colors = list(scenes.COLORS)
    for s, layout in enumerate(layouts):
        for t in range(N_IMAGE_TOKENS):
            y, x = 4 * (t // 12) + 2, 4 * (t % 12) + 2  # the patch's centre pixel
            r, c = y // scenes.CELL, x // scenes.CELL
            assert tg[s, t, 3] == 3 * r + c
            v = layout.get((r, c))
            want = (
                (0, 0, 0)
                if v is None
                else (0, 5, 1 + int(v[1]))
                if v[0] == "digit"
                else (1 + colors.index(v[1]), 1 + scenes.SHAPES.index(v[0]), 0)
            )
            assert tuple(tg[s, t, :3].tolist()) == want
    # the layouts are the scenes' own: an occupied cell's centre region is not background
    for s, layout in enumerate(layouts):
        for (r, c), v in layout.items():
            if v[0] != "digit":
                cy, cx = r * scenes.CELL + scenes.CELL // 2, c * scenes.CELL + scenes.CELL // 2
                assert tuple(images[s, cy, cx]) == scenes.COLORS[v[1]]


def test_return_layouts_keeps_the_same_draws():
    a_img, a_q = scenes.make_dataset(5, seed=11, per_scene=4)
    b_img, b_q, lay = scenes.make_dataset(5, seed=11, per_scene=4, return_layouts=True)
    assert np.array_equal(a_img, b_img) and a_q == b_q and len(lay) == 5


def test_balanced_questions():
    _, qs = scenes.make_dataset(30, seed=5, dense=True)
    rng = np.random.default_rng(0)
    for s in range(30):
        mine = [q for q in qs if q.scene == s]
        got = _balanced(mine, rng)
        for kind in ("color", "shape", "digit"):
            assert sum(q.kind == kind for q in got) == sum(q.kind == kind for q in mine)
        assert sum(q.kind == "count" for q in got) == 3 and sum(q.kind == "cell" for q in got) == 3
        assert len(set(got)) == len(got)


def test_stage2_forward_equals_llava_forward():
    torch.manual_seed(0)
    m = tiny_llava(
        len(scenes.VOCAB),
        image_size=scenes.IMAGE,
        patch=4,
        vision_width=32,
        vision_layers=3,
        hidden=32,
        image_token_id=scenes.IMAGE_ID,
        dtype=torch.float64,
    )
    images, qs = scenes.make_dataset(3, seed=2, dense=True)
    qs = [
        next(q for q in qs if q.scene == s and q.kind == "cell") for s in range(3)
    ]  # equal lengths
    ids = torch.tensor([scenes.encode(q, N_IMAGE_TOKENS) for q in qs])
    px = scenes.pixel_values(images[[q.scene for q in qs]]).double()
    with torch.no_grad():
        want = m(input_ids=ids, pixel_values=px).logits
        got = m.lm_head(
            text_hidden(m, ids, vision_features(m, images[[q.scene for q in qs]]).double())
        )
    assert torch.allclose(got, want, atol=1e-10)


def test_short_build_reloads_and_learns(tmp_path):
    from transformers import LlavaForConditionalGeneration

    out = build_tiny_llava(
        tmp_path / "m",
        vision_steps=20,
        qa_steps=6,
        n_scenes=40,
        vision_width=32,
        vision_layers=2,
        hidden=32,
        layers=1,
        log=None,
    )
    meta = json.loads((out / "restore-vocab.json").read_text())
    assert meta["vocab"] == scenes.VOCAB and meta["vision_steps"] == 20
    m = LlavaForConditionalGeneration.from_pretrained(out)
    assert m.config.image_token_id == scenes.IMAGE_ID
    images, qs = scenes.make_dataset(2, seed=9, dense=True)
    qs = [next(q for q in qs if q.scene == s and q.kind == "count") for s in range(2)]
    ids = torch.tensor([scenes.encode(q, N_IMAGE_TOKENS) for q in qs])
    with torch.no_grad():
        logits = m(input_ids=ids, pixel_values=scenes.pixel_values(images)).logits
    assert logits.shape == (2, ids.shape[1], len(scenes.VOCAB)) and torch.isfinite(logits).all()
    # vision pre-training lowers its loss (an EMA of the sum of four cross-entropies)
    assert len(meta["vision_loss"]) == 2 and meta["vision_loss"][-1] < meta["vision_loss"][0] - 0.5
    # stage 1 is deterministic: reusing the tower (vision_from) rebuilds the very same model
    again = build_tiny_llava(
        tmp_path / "m2",
        vision_steps=20,
        qa_steps=6,
        n_scenes=40,
        vision_width=32,
        vision_layers=2,
        hidden=32,
        layers=1,
        log=None,
        vision_from=out,
    )
    m2 = LlavaForConditionalGeneration.from_pretrained(again)
    sd, sd2 = m.state_dict(), m2.state_dict()
    assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k]) for k in sd)


def test_caption_and_caption_batches():
    from icml26.restore.train import _qa_batch

    _, qs, layouts = scenes.make_dataset(4, seed=8, dense=True, return_layouts=True)
    cap = scenes.caption(layouts[0])
    assert [w for w, _ in cap].count("cell") == 9 and all(w in scenes.WORD for w, _ in cap)
    targets = [w for w, t in cap if t]
    objs = sum(v[0] != "digit" for v in layouts[0].values())
    digits = sum(v[0] == "digit" for v in layouts[0].values())
    assert len(targets) == 2 * objs + 2 * digits + (9 - len(layouts[0]))
    by_scene = {}
    for q in qs:
        by_scene.setdefault(q.scene, []).append(q)
    ids, tg = _qa_batch(by_scene, [0, 1], np.random.default_rng(0), layouts, caption_frac=1.0)
    assert (tg[:, 0] == 0).sum() == len(targets)
    for row, pos, want in tg.tolist():  # every target is the token that follows its position
        assert ids[row, pos + 1] == want
    ids, tg = _qa_batch(by_scene, [0, 1], np.random.default_rng(0), layouts, caption_frac=0.0)
    assert all(ids[r, p] == scenes.WORD["answer"] and ids[r, p + 1] == w for r, p, w in tg.tolist())


def test_scene_targets():
    _, _, layouts = scenes.make_dataset(12, seed=4, return_layouts=True)
    tg = scenes.scene_targets(layouts)
    for s, layout in enumerate(layouts):
        objs = [v for v in layout.values() if v[0] != "digit"]
        assert {scenes.VOCAB[scenes.WORD[c]] for _, c in objs} == {
            list(scenes.COLORS)[i] for i in range(6) if tg[s, i] == 1
        }
        assert {sh for sh, _ in objs} == {scenes.SHAPES[i] for i in range(4) if tg[s, 6 + i] == 1}
        digits = [v[1] for v in layout.values() if v[0] == "digit"]
        assert [str(i) for i in range(10) if tg[s, 10 + i] == 1] == digits
    assert set(tg.unique().tolist()) <= {0.0, 1.0}


def test_questions_do_not_depend_on_hash_seed():
    import os
    import subprocess
    import sys

    code = (
        "from icml26.restore import scenes; _, qs = scenes.make_dataset(20, seed=10_000, per_scene=4); "
        "print([(q.scene, q.words, q.answer) for q in qs])"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": h},
        ).stdout
        for h in ("1", "2", "3")
    }
    assert len(outs) == 1


def test_smollm2_llava_language_model_is_smollm2():
    """The SmolLM2-LM LLaVA (the claim's off-by-default ``lm=smollm2``): on words that are one
    SmolLM2 token each, its language model's hidden states equal SmolLM2's on those tokens."""
    import torch

    from icml26.core.lm import load_lm
    from icml26.restore import scenes
    from icml26.restore.train import model_dir, smollm2_llava

    smol, tok = load_lm(dtype=torch.float32)
    m = smollm2_llava(seed=0, vision_width=32, vision_layers=1)
    words = [
        w
        for w in ("red", "blue", "circle", "square", "count", "color")
        if w in scenes.WORD and len(tok(" " + w, add_special_tokens=False)["input_ids"]) == 1
    ]
    assert len(words) >= 3
    tids = [tok(" " + w, add_special_tokens=False)["input_ids"][0] for w in words]
    with torch.no_grad():
        got = m.model.language_model(
            input_ids=torch.tensor([[scenes.WORD[w] for w in words]])
        ).last_hidden_state
        want = smol.model(input_ids=torch.tensor([tids])).last_hidden_state
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert m.config.text_config.num_hidden_layers == 30 and m.config.text_config.head_dim == 64
    assert model_dir(seed=1, lm="smollm2", autocast=True).name.endswith("-bf16-smollm2-seed1")
