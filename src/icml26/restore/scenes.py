"""Generated visual QA where the answer depends on image detail, and a tiny LLaVA trained on it.

Scenes: 48x48 RGB, a 3x3 grid; 3-6 cells hold a shape (square, circle, triangle, cross) in one of
6 colours, and one free cell may hold a white digit (a 5x7 bitmap font, scaled 2x, randomly
shifted; scikit-learn's ``load_digits`` would need scikit-learn as a dependency). Questions have one-word answers (a word-level vocabulary, so
each answer is one token) and are scored by the next-token log-likelihood restricted to the
question type's answer set:

- ``color <shape> ?`` (the shape is unique in the scene) -> colour;
- ``shape <colour> ?`` (the colour is unique) -> shape;
- ``count <colour> ?`` -> 0-3;
- ``cell <row> <col> ?`` -> colour or ``empty``;
- ``digit ?`` -> 0-9 (scenes with a digit).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "COLORS",
    "SHAPES",
    "VOCAB",
    "Question",
    "make_scene",
    "make_dataset",
    "encode",
    "answer_ids",
]

COLORS = {
    "red": (230, 40, 40),
    "green": (40, 200, 60),
    "blue": (50, 80, 240),
    "yellow": (235, 220, 40),
    "magenta": (220, 50, 220),
    "cyan": (40, 220, 230),
}
SHAPES = ("square", "circle", "triangle", "cross")
ROWS, COLS = ("top", "middle", "bottom"), ("left", "center", "right")
COUNTS = ("0", "1", "2", "3")
DIGITS = tuple(str(i) for i in range(10))
SPECIAL = ("<pad>", "<bos>", "?", "answer", "color", "shape", "count", "cell", "digit", "empty")
VOCAB = list(dict.fromkeys(SPECIAL + tuple(COLORS) + SHAPES + ROWS + COLS + COUNTS + DIGITS)) + [
    "<image>"
]
WORD = {w: i for i, w in enumerate(VOCAB)}
IMAGE_ID = WORD["<image>"]
ANSWER_SETS = {
    "color": tuple(COLORS),
    "shape": SHAPES,
    "count": COUNTS,
    "cell": tuple(COLORS) + ("empty",),
    "digit": DIGITS,
}
IMAGE = 48
CELL = IMAGE // 3


@dataclass(frozen=True)
class Question:
    scene: int  # index of the scene (image) it asks about
    kind: str  # color | shape | count | cell | digit
    words: tuple[str, ...]
    answer: str


def _draw(img: np.ndarray, r: int, c: int, shape: str, rgb, rng) -> None:
    s = int(rng.integers(9, 15))
    cy = r * CELL + CELL // 2 + int(rng.integers(-1, 2))
    cx = c * CELL + CELL // 2 + int(rng.integers(-1, 2))
    yy, xx = np.mgrid[0:IMAGE, 0:IMAGE]
    dy, dx = yy - cy, xx - cx
    h = s / 2
    if shape == "square":
        m = (np.abs(dy) <= h * 0.8) & (np.abs(dx) <= h * 0.8)
    elif shape == "circle":
        m = dy**2 + dx**2 <= h**2
    elif shape == "triangle":
        m = (dy <= h * 0.8) & (dy >= -h) & (np.abs(dx) <= (dy + h) / 2)
    else:
        m = ((np.abs(dy) <= h) & (np.abs(dx) <= h / 3)) | (
            (np.abs(dx) <= h) & (np.abs(dy) <= h / 3)
        )
    img[m] = rgb


_FONT = {  # 5x7 bitmaps, rows top to bottom
    "0": ("01110", "10001", "10011", "10101", "11001", "10001", "01110"),
    "1": ("00100", "01100", "00100", "00100", "00100", "00100", "01110"),
    "2": ("01110", "10001", "00001", "00010", "00100", "01000", "11111"),
    "3": ("11110", "00001", "00001", "01110", "00001", "00001", "11110"),
    "4": ("00010", "00110", "01010", "10010", "11111", "00010", "00010"),
    "5": ("11111", "10000", "11110", "00001", "00001", "10001", "01110"),
    "6": ("00110", "01000", "10000", "11110", "10001", "10001", "01110"),
    "7": ("11111", "00001", "00010", "00100", "01000", "01000", "01000"),
    "8": ("01110", "10001", "10001", "01110", "10001", "10001", "01110"),
    "9": ("01110", "10001", "10001", "01111", "00001", "00010", "01100"),
}


def _digit_mask(d: str) -> np.ndarray:
    bits = np.array([[int(ch) for ch in row] for row in _FONT[d]], dtype=float)
    return np.kron(bits, np.ones((2, 2)))  # (14, 10)


def make_scene(rng: np.random.Generator, digits=None) -> tuple[np.ndarray, dict]:
    """One scene: uint8 image (48, 48, 3) and its layout ``{(r, c): (shape, colour) | ("digit", d)}``."""
    img = (rng.normal(30, 6, size=(IMAGE, IMAGE, 3))).clip(0, 255).astype(np.uint8)
    cells = rng.permutation(9)
    n = int(rng.integers(3, 7))
    layout = {}
    for k in cells[:n]:
        r, c = divmod(int(k), 3)
        shape, color = SHAPES[rng.integers(4)], list(COLORS)[rng.integers(6)]
        _draw(img, r, c, shape, COLORS[color], rng)
        layout[(r, c)] = (shape, color)
    if rng.random() < 0.5:
        r, c = divmod(int(cells[n]), 3)
        digit = str(int(rng.integers(10)))
        d = _digit_mask(digit)
        y0 = r * CELL + 1 + int(rng.integers(0, 2))
        x0 = c * CELL + 2 + int(rng.integers(0, 4))
        patch = img[y0 : y0 + 14, x0 : x0 + 10].astype(float)
        img[y0 : y0 + 14, x0 : x0 + 10] = (patch * (1 - d[..., None]) + 250 * d[..., None]).astype(
            np.uint8
        )
        layout[(r, c)] = ("digit", digit)
    return img, layout


def _questions(scene: int, layout: dict, rng, dense: bool = False) -> list[Question]:
    objs = [(rc, v) for rc, v in layout.items() if v[0] != "digit"]
    shapes = [v[0] for _, v in objs]
    colors = [v[1] for _, v in objs]
    qs = []
    for sh in dict.fromkeys(shapes):  # first-seen order: a set's order depends on PYTHONHASHSEED
        if shapes.count(sh) == 1:
            qs.append(Question(scene, "color", ("color", sh), colors[shapes.index(sh)]))
    for co in dict.fromkeys(colors):
        if colors.count(co) == 1:
            qs.append(Question(scene, "shape", ("shape", co), shapes[colors.index(co)]))
    for co in COLORS if dense else [list(COLORS)[rng.integers(6)]]:
        qs.append(Question(scene, "count", ("count", co), str(min(3, colors.count(co)))))
    cells = (
        [divmod(k, 3) for k in range(9)]
        if dense
        else [(int(rng.integers(3)), int(rng.integers(3)))]
    )
    for r, c in cells:
        v = layout.get((r, c))
        qs.append(
            Question(
                scene,
                "cell",
                ("cell", ROWS[r], COLS[c]),
                "empty" if v is None or v[0] == "digit" else v[1],
            )
        )
    for v in layout.values():
        if v[0] == "digit":
            qs.append(Question(scene, "digit", ("digit",), v[1]))
    return qs


def make_dataset(
    n_scenes: int,
    seed: int,
    per_scene: int | None = None,
    dense: bool = False,
    return_layouts: bool = False,
):
    """``(images uint8 (S, 48, 48, 3), questions)``; ``per_scene`` caps questions per scene
    (chosen at random), ``None`` keeps all; ``dense`` asks every cell and every colour count
    (training supervision) instead of one random each. ``return_layouts`` appends the scenes'
    layouts (same draws: the images and questions do not change)."""
    rng = np.random.default_rng(seed)
    images, qs, layouts = [], [], []
    for s in range(n_scenes):
        img, layout = make_scene(rng)
        images.append(img)
        layouts.append(layout)
        q = _questions(s, layout, rng, dense)
        if per_scene is not None and len(q) > per_scene:
            q = [q[i] for i in rng.choice(len(q), per_scene, replace=False)]
        qs.extend(q)
    if return_layouts:
        return np.stack(images), qs, layouts
    return np.stack(images), qs


def caption(layout: dict) -> list[tuple[str, bool]]:
    """A dense caption, cell by cell in reading order: ``cell <row> <col>`` then ``<colour>
    <shape>``, ``digit <d>`` or ``empty``. Returns ``(word, is_target)`` pairs; the words after
    each cell's name are the targets (its position words are given)."""
    out = []
    for r in range(3):
        for c in range(3):
            out += [("cell", False), (ROWS[r], False), (COLS[c], False)]
            v = layout.get((r, c))
            words = ["empty"] if v is None else ["digit", v[1]] if v[0] == "digit" else [v[1], v[0]]
            out += [(w, True) for w in words]
    return out


def scene_targets(layouts: list[dict]) -> torch.Tensor:
    """Per scene, a multi-hot summary for the tower's CLS token: colours present (6), shapes
    present (4), the digit (10; all zero without one). Float (S, 20)."""
    out = torch.zeros(len(layouts), 20)
    colors = list(COLORS)
    for s, layout in enumerate(layouts):
        for v in layout.values():
            if v[0] == "digit":
                out[s, 10 + int(v[1])] = 1.0
            else:
                out[s, colors.index(v[1])] = out[s, 6 + SHAPES.index(v[0])] = 1.0
    return out


ATTRIBUTES = {"color": 7, "shape": 6, "digit": 11, "cell": 9}  # classes of :func:`token_targets`


def token_targets(layouts: list[dict], patch: int = 4) -> torch.Tensor:
    """Per patch token, the attributes of the grid cell it lies in: long (S, N, 4) with columns
    colour (0 none/digit, 1-6), shape (0 none, 1-4, 5 digit), digit (0 none, 1-10 for 0-9) and the
    cell index 0-8 (row-major). The vision tower's pre-training targets."""
    side = IMAGE // patch
    per = CELL // patch
    out = torch.zeros(len(layouts), side * side, 4, dtype=torch.long)
    colors = list(COLORS)
    for s, layout in enumerate(layouts):
        for t in range(side * side):
            r, c = divmod(t, side)
            rc = (r // per, c // per)
            out[s, t, 3] = rc[0] * 3 + rc[1]
            v = layout.get(rc)
            if v is None:
                continue
            if v[0] == "digit":
                out[s, t, 1], out[s, t, 2] = 5, 1 + int(v[1])
            else:
                out[s, t, 0], out[s, t, 1] = 1 + colors.index(v[1]), 1 + SHAPES.index(v[0])
    return out


def pixel_values(images: np.ndarray) -> torch.Tensor:
    """uint8 (B, H, W, 3) -> float32 (B, 3, H, W) in [-1, 1]."""
    return torch.from_numpy(np.array(images, copy=True)).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def encode(q: Question, n_image_tokens: int) -> list[int]:
    """Prompt ids: ``<bos> <image>*N question ? answer`` (the answer is the next token)."""
    return (
        [WORD["<bos>"]]
        + [IMAGE_ID] * n_image_tokens
        + [WORD[w] for w in q.words]
        + [WORD["?"], WORD["answer"]]
    )


def answer_ids(kind: str) -> list[int]:
    return [WORD[w] for w in ANSWER_SETS[kind]]


def chance(qs: list[Question]) -> float:
    """Accuracy of always answering each type's most frequent answer (a 'blind' baseline)."""
    from collections import Counter

    by = {}
    for q in qs:
        by.setdefault(q.kind, Counter())[q.answer] += 1
    return sum(c.most_common(1)[0][1] for c in by.values()) / max(1, len(qs))
