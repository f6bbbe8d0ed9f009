"""CCLRec as a RecBole model.

The fake tests always run: they check the model body against RecBole's documented interface
(``calculate_loss`` / ``predict`` / ``full_sort_predict``, pairwise input, parameters visible to
RecBole's optimizer and checkpoint, config keys naming dataset fields). The last tests run
RecBole's own trainer and evaluator (``make setup`` installs RecBole's imports). RecBole 1.2.1's
dataset code needs pandas < 3 while the project runs pandas 3, so under pandas >= 3 they run in a
subprocess with the pandas 2 that ``make setup`` puts in ``$VENV/pandas2`` first on the path; they
are skipped only where neither works.
"""

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import yaml

from icml26.cclrec.recbole_core import DEFAULTS, RecBoleCCLRecMixin, field_texts, item_semantics
from icml26.cclrec.semantics import hash_encoder
from icml26.core.errors import UserError

N_U, N_I = 41, 31  # RecBole ids: 0 is padding, so 40 users and 30 items


class _Type:
    def __init__(self, value):
        self.value = value


class _Feat(dict):
    @property
    def columns(self):
        return list(self)


class FakeDataset:
    """The part of ``recbole.data.dataset.Dataset`` the model reads (training split)."""

    dataset_name = "fake"

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        topic_u, topic_i = np.arange(N_U) % 3, np.arange(N_I) % 3
        R = rng.random((N_U, N_I)) < np.where(topic_u[:, None] == topic_i[None, :], 0.5, 0.05)
        R[:, 1] = True
        R[0, :] = R[:, 0] = False  # padding row and column
        self.R = sp.csr_matrix(R.astype(np.float32))
        self.genres = ["[PAD]", "action", "comedy", "drama"]
        seq = np.zeros((N_I, 2), np.int64)
        seq[1:, 0] = topic_i[1:] + 1
        seq[1::4, 1] = 3
        self.field2type = {
            "user_id": _Type("token"),
            "item_id": _Type("token"),
            "genre": _Type("token_seq"),
            "vec": _Type("float_seq"),
            "age": _Type("float"),
        }
        self.field2id_token = {"genre": np.array(self.genres)}
        self.item = _Feat(
            item_id=torch.arange(N_I),
            genre=torch.from_numpy(seq),
            vec=torch.from_numpy(rng.normal(size=(N_I, 5)).astype(np.float32)),
        )
        self.user = _Feat(user_id=torch.arange(N_U), age=torch.arange(N_U).float())

    def num(self, field):
        return {"user_id": N_U, "item_id": N_I}[field]

    def inter_matrix(self, form="coo"):
        assert form == "csr"
        return self.R.copy()

    def get_item_feature(self):
        return self.item

    def get_user_feature(self):
        return self.user


class FakeGeneral(torch.nn.Module):
    """What ``GeneralRecommender.__init__`` sets."""

    def __init__(self, config, dataset):
        super().__init__()
        self.USER_ID, self.ITEM_ID = config["USER_ID_FIELD"], config["ITEM_ID_FIELD"]
        self.NEG_ITEM_ID = config["NEG_PREFIX"] + self.ITEM_ID
        self.n_users, self.n_items = dataset.num(self.USER_ID), dataset.num(self.ITEM_ID)
        self.device = config["device"]


class FakeModel(RecBoleCCLRecMixin, FakeGeneral):
    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self._build(config, dataset)


def _config(**kw):
    return {
        "USER_ID_FIELD": "user_id",
        "ITEM_ID_FIELD": "item_id",
        "NEG_PREFIX": "neg_",
        "device": "cpu",
        "seed": 0,
        "embedding_size": 8,
        "cclrec_semantic_fields": ["genre"],
        "cclrec_encoder": "hash",
        **kw,
    }


def _batch(ds, n=16, seed=0):
    coo = ds.R.tocoo()
    pick = np.random.default_rng(seed).choice(coo.nnz, n, replace=False)
    return {
        "user_id": torch.from_numpy(coo.row[pick].astype(np.int64)),
        "item_id": torch.from_numpy(coo.col[pick].astype(np.int64)),
        "neg_item_id": torch.randint(1, N_I, (n,)),
    }


def test_loss_trains_every_parameter_through_recbole_optimizer_view():
    ds = FakeDataset()
    m = FakeModel(_config(), ds)
    names = [n for n, _ in m.named_parameters()]
    assert names and all(n.startswith("cclrec_params.") for n in names)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)  # what RecBole's trainer builds
    before = [p.detach().clone() for p in m.parameters()]
    m.train()
    loss = m.calculate_loss(_batch(ds))
    assert loss.ndim == 0 and torch.isfinite(loss)
    opt.zero_grad()
    loss.backward()
    opt.step()
    moved = [not torch.equal(a, b) for a, b in zip(before, m.parameters(), strict=True)]
    assert all(moved)


def test_full_sort_predict_equals_pairwise_predict_brute_force():
    ds = FakeDataset()
    m = FakeModel(_config(), ds)
    m.eval()
    users = torch.tensor([1, 5, 7])
    full = m.full_sort_predict({"user_id": users})
    assert full.shape == (3 * N_I,)
    pairs = {"user_id": users.repeat_interleave(N_I), "item_id": torch.arange(N_I).repeat(3)}
    torch.testing.assert_close(full, m.predict(pairs))


def test_state_dict_round_trip_restores_scores():
    """RecBole saves and restores ``state_dict()``: every trained tensor must be in it."""
    ds = FakeDataset()
    a = FakeModel(_config(), ds)
    a.train()
    opt = torch.optim.Adam(a.parameters(), lr=1e-2)
    for s in range(3):
        opt.zero_grad()
        a.calculate_loss(_batch(ds, seed=s)).backward()
        opt.step()
    b = FakeModel(_config(seed=7), ds)
    b.load_state_dict(a.state_dict())
    a.eval(), b.eval()
    u = {"user_id": torch.arange(1, N_U)}
    torch.testing.assert_close(a.full_sort_predict(u), b.full_sort_predict(u))


def test_semantics_from_token_seq_and_float_seq_fields():
    ds = FakeDataset()
    texts = field_texts(ds, ds.item, "genre")
    assert texts[:4] == ["", "comedy drama", "drama", "action"]
    enc = hash_encoder(64)
    ref = enc(texts)
    ref = ref / np.maximum(np.linalg.norm(ref, axis=1, keepdims=True), 1e-12)
    np.testing.assert_allclose(item_semantics(_config(), ds), ref, atol=1e-6)
    vec = item_semantics(_config(cclrec_semantic_fields=["vec"]), ds)
    raw = ds.item["vec"].numpy()
    np.testing.assert_allclose(vec, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)


def test_config_naming_an_unknown_field_is_a_user_error():
    ds = FakeDataset()
    with pytest.raises(UserError, match=r"cclrec_semantic_fields.*'director'.*load_col"):
        FakeModel(_config(cclrec_semantic_fields=["genre", "director"]), ds)
    with pytest.raises(UserError, match=r"cclrec_profile_fields.*'zip'"):
        FakeModel(_config(cclrec_profile_fields=["zip"]), ds)
    with pytest.raises(UserError, match="cclrec_semantic_fields"):
        FakeModel(_config(cclrec_semantic_fields=None), ds)
    with pytest.raises(ValueError, match="cl_space"):
        FakeModel(_config(cl_space="nowhere"), ds)


def test_packaged_yaml_names_loaded_fields_and_known_keys():
    from importlib.resources import files

    cfg = yaml.safe_load((files("icml26.cclrec") / "data" / "recbole_ml-100k.yaml").read_text())
    assert set(cfg["cclrec_semantic_fields"]) <= set(cfg["load_col"]["item"])
    assert set(cfg["cclrec_profile_fields"]) <= set(cfg["load_col"]["user"])
    model_keys = {k for k in cfg if k in DEFAULTS}
    assert {"embedding_size", "cl_weight", "w_pos", "w_neg"} <= model_keys
    assert cfg["eval_args"]["mode"] == "full" and cfg["valid_metric"] == "NDCG@20"


# ---------------------------------------------------------------- RecBole's own trainer

PANDAS2 = Path(sys.prefix) / "pandas2"  # `make setup`: pandas 2.3.3 installed with --target
_PROBE = "import pandas, recbole.trainer; print(pandas.__version__)"


def _pandas_major() -> int:
    import pandas as pd

    return int(pd.__version__.split(".")[0])


def _env_with_pandas2() -> dict:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join([str(PANDAS2), src, env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    return env


@functools.cache
def _recbole_mode() -> str | None:
    """'here' when RecBole 1.2.1 and its imports load under this pandas (< 3), 'pandas2' when
    they load in a subprocess with the side-installed pandas 2, None when neither."""
    if importlib.util.find_spec("recbole") is None:
        return None
    if _pandas_major() < 3:
        try:
            import recbole.trainer  # noqa: F401
        except Exception:  # noqa: BLE001 - a missing import of RecBole's (tensorboard, sklearn...)
            return None
        return "here"
    if not PANDAS2.is_dir():
        return None
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], env=_env_with_pandas2(), capture_output=True, text=True
    )
    if probe.returncode != 0 or not probe.stdout.strip().startswith("2."):
        return None
    return "pandas2"


def _skip_without_recbole() -> str:
    """Probed when a RecBole test runs, not at collection (importing RecBole takes seconds)."""
    mode = _recbole_mode()
    if mode is None:
        pytest.skip(
            f"recbole 1.2.1 or its imports missing, and no pandas < 3 here or in {PANDAS2} "
            "(run `make setup`)"
        )
    return mode


def _in_recbole_env(cases: list[str], tmp_path) -> None:
    """Run each ``case(folder)`` (functions of this module, one fresh folder each) where RecBole
    runs: in this process, or in one subprocess with pandas 2 first on the path (RecBole's
    imports take seconds, paid once); their assertions fail the test."""
    folders = []
    for case in cases:
        folders.append(tmp_path / case)
        folders[-1].mkdir()
    if _skip_without_recbole() == "here":
        for case, folder in zip(cases, folders):
            globals()[case](folder)
        return
    code = (
        "import sys, pathlib; sys.path.insert(0, sys.argv[1]); import test_cclrec_recbole as t\n"
        "for case, folder in zip(sys.argv[2::2], sys.argv[3::2]):\n"
        "    getattr(t, case)(pathlib.Path(folder))\n"
    )
    args = [a for case, folder in zip(cases, folders) for a in (case, str(folder))]
    run = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), *args],
        env=_env_with_pandas2(),
        cwd=tmp_path,  # RecBole's trainer writes ./log_tensorboard and ./log
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"{cases} under pandas 2 failed:\n{run.stderr[-4000:]}"


def _atomic(tmp_path):
    rng = np.random.default_rng(0)
    d = tmp_path / "tiny"
    d.mkdir()
    rows = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    for u in range(30):
        for j, i in enumerate(rng.choice(40, 12, replace=False)):
            rows.append(f"u{u}\ti{(i + 5 * (u % 3)) % 40}\t4\t{u * 100 + j}")
    (d / "tiny.inter").write_text("\n".join(rows) + "\n")
    items = ["item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq"]
    genres = ["Action", "Comedy", "Drama", "Horror"]
    items += [f"i{i}\tMovie {i}\t{1990 + i % 7}\t{genres[i % 4]}" for i in range(40)]
    (d / "tiny.item").write_text("\n".join(items) + "\n")
    users = ["user_id:token\tage:token\tgender:token\toccupation:token"]
    users += [f"u{u}\t{20 + u % 3}\t{'MF'[u % 2]}\tstudent" for u in range(30)]
    (d / "tiny.user").write_text("\n".join(users) + "\n")
    return tmp_path


def case_trainer_and_evaluator(tmp_path):
    from icml26.cclrec.recbole_model import CCLRecRecBole, run_recbole

    os.chdir(tmp_path)  # RecBole's trainer writes ./log_tensorboard
    out = run_recbole(
        "tiny",
        data_path=_atomic(tmp_path),
        config_dict={
            "epochs": 2,
            "cclrec_encoder": "hash",
            "embedding_size": 16,
            "checkpoint_dir": str(tmp_path / "saved"),
            "train_batch_size": 64,
            "topk": [10, 20],  # 40 items
            "seed": 0,
        },
    )
    assert isinstance(out["model"], CCLRecRecBole)
    test = out["test"]
    assert {"recall@10", "recall@20", "ndcg@20"} <= set(test)
    assert all(0 <= float(v) <= 1 for v in test.values())
    assert 0 <= float(out["best_valid_score"]) <= 1
    # 30 users, 40 items: some user's held-out item must be ranked in a top 20 of 40
    assert float(test["recall@20"]) > 0


def case_unknown_field(tmp_path):
    from icml26.cclrec.recbole_model import run_recbole

    os.chdir(tmp_path)
    with pytest.raises(UserError, match="'director'"):
        run_recbole(
            "tiny",
            data_path=_atomic(tmp_path),
            config_dict={
                "cclrec_semantic_fields": ["director"],
                "cclrec_encoder": "hash",
                "checkpoint_dir": str(tmp_path / "saved"),
            },
        )


def test_recbole_trainer_and_evaluator_run_cclrec_and_config_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _in_recbole_env(["case_trainer_and_evaluator", "case_unknown_field"], tmp_path)


def test_run_recbole_refuses_pandas_3_naming_the_version(monkeypatch):
    """Under pandas >= 3 ``run_recbole`` refuses before RecBole's dataset code corrupts fields."""
    import pandas as pd

    from icml26.cclrec import recbole_model

    monkeypatch.setattr(pd, "__version__", "3.0.0")
    with pytest.raises(UserError, match="pandas 3.0.0"):
        recbole_model.check_pandas()
