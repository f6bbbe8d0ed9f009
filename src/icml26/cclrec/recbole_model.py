"""CCLRec as a RecBole model: ``CCLRecRecBole(config, dataset)`` for RecBole's trainer and
evaluator, and :func:`run_recbole`, RecBole's quick-start loop for it.

Importing this module imports RecBole (``pip install recbole==1.2.1`` and its dependencies);
the model body is :class:`icml26.cclrec.recbole_core.RecBoleCCLRecMixin`. A RecBole user runs::

    from icml26.cclrec.recbole_model import config_file, run_recbole
    run_recbole("ml-100k", data_path="path/to/folder/holding/ml-100k",
                config_file_list=[config_file()])

or builds the pieces by hand (``Config(model=CCLRecRecBole, dataset=..., config_file_list=...)``,
``create_dataset``, ``data_preparation``, ``CCLRecRecBole(config, train_data.dataset)``,
``Trainer(config, model).fit(train_data, valid_data)``). The config keys and their defaults are
:data:`icml26.cclrec.recbole_core.DEFAULTS`; ``config_file()`` is the ML-100K dataset config.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from recbole.model.abstract_recommender import GeneralRecommender
from recbole.utils import InputType

from icml26.cclrec.recbole_core import RecBoleCCLRecMixin
from icml26.core.errors import UserError

__all__ = ["CCLRecRecBole", "check_pandas", "config_file", "numpy2_aliases", "run_recbole"]


class CCLRecRecBole(RecBoleCCLRecMixin, GeneralRecommender):
    """CCLRec for RecBole (pairwise input: user, item, ``neg_`` item per row)."""

    input_type = InputType.PAIRWISE

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self._build(config, dataset)


def numpy2_aliases() -> None:
    """Give NumPy >= 2 the aliases RecBole 1.2.1 expects (``np.float_``, ``np.complex_``,
    ``np.unicode_``; NumPy 2 removed them). RecBole's ``Config`` re-creates ``np.float`` and kin
    from these on every construction and fails without them. Adds only missing attributes;
    :func:`run_recbole` calls it; call it before building a ``Config`` by hand on NumPy 2."""
    import numpy as np

    for old, new in (("float_", np.float64), ("complex_", np.complex128), ("unicode_", np.str_)):
        if old not in np.__dict__:
            setattr(np, old, new)


def check_pandas() -> None:
    """RecBole 1.2.1's dataset code assigns through chained indexing, which pandas >= 3
    (copy-on-write) turns into errors or silent no-ops: refuse early with what works (tested:
    pandas 2.3.3 with numpy 2.4 and 2.2.3 with numpy 1.26.4)."""
    import pandas as pd

    if int(pd.__version__.split(".")[0]) >= 3:
        raise UserError(
            f"RecBole 1.2.1 does not run with pandas {pd.__version__} (its dataset code relies on "
            "chained assignment, an error under pandas >= 3); use pandas < 3 (tested: pandas "
            "2.3.3 with numpy 2.4, and 2.2.3 with numpy 1.26.4; `make setup` puts pandas 2.3.3 in "
            "$VENV/pandas2 for PYTHONPATH)"
        )


def config_file() -> Path:
    """The packaged RecBole YAML for ML-100K: fields, CCLRec's semantic and profile fields,
    chronological 8:1:1 per user, full ranking, Recall/NDCG@10/20/50, early stopping."""
    return Path(str(files("icml26.cclrec") / "data" / "recbole_ml-100k.yaml"))


def run_recbole(
    dataset: str = "ml-100k",
    *,
    data_path: str | os.PathLike | None = None,
    config_file_list: list | None = None,
    config_dict: dict | None = None,
    saved: bool = True,
) -> dict:
    """RecBole's ``run_recbole`` loop for :class:`CCLRecRecBole` (RecBole's own looks models up
    by name in its registry). Returns ``{"best_valid_score", "valid", "test", "model"}``.

    The best checkpoint is read back with ``weights_only=False``: RecBole 1.2.1 pickles its config
    into the checkpoint, which torch >= 2.6 refuses by default; the file is the one this call
    wrote.
    """
    import torch
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.trainer import Trainer
    from recbole.utils import init_seed

    check_pandas()
    numpy2_aliases()
    cfg = dict(config_dict or {})
    if data_path is not None:
        cfg["data_path"] = str(data_path)
    config = Config(
        model=CCLRecRecBole,
        dataset=dataset,
        config_file_list=[str(p) for p in (config_file_list or [config_file()])],
        config_dict=cfg,
    )
    init_seed(config["seed"], config["reproducibility"])
    data = create_dataset(config)
    train_data, valid_data, test_data = data_preparation(config, data)
    init_seed(config["seed"], config["reproducibility"])
    model = CCLRecRecBole(config, train_data.dataset).to(config["device"])
    trainer = Trainer(config, model)
    best, best_valid = trainer.fit(train_data, valid_data, saved=saved, show_progress=False)
    if saved and os.path.isfile(trainer.saved_model_file):
        ckpt = torch.load(
            trainer.saved_model_file, map_location=config["device"], weights_only=False
        )
        model.load_state_dict(ckpt["state_dict"])
    test = trainer.evaluate(test_data, load_best_model=False, show_progress=False)
    return {"best_valid_score": best, "valid": dict(best_valid), "test": dict(test), "model": model}
