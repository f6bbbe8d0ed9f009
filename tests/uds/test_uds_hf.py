import torch
from torch.utils.data import SequentialSampler

from icml26.core.lm import tiny_llama
from icml26.uds.data import PoolConfig, make_pool
from icml26.uds.loop import TrainConfig, collate, encode, train_online
from icml26.uds.selectors import UDSSelector


def test_trainer_and_plain_loop_pick_the_same_samples(tmp_path):
    from transformers import TrainingArguments

    from icml26.uds.hf import OnlineSelectionTrainer

    model, tok = tiny_llama(32, 1, 2, max_len=64, seed=0)
    pool, _ = make_pool(PoolConfig(n_train=32, n_test=5), seed=1)
    enc, _ = encode(tok, pool, 40)
    pad = tok.pad_token_id
    # a learning rate so small the model does not move: picks then depend only on the plumbing
    # (window order, top-k, the FIFO of picks), which must be identical in both paths.
    cfg = TrainConfig(lr=1e-12, candidates=8, budget=0.25, epochs=1, shuffle=False, grad_clip=0.0)
    ref_model = type(model)(model.config)
    ref_model.load_state_dict(model.state_dict())
    log = train_online(ref_model, enc, UDSSelector(max_len=48, seed=0), cfg, pad)

    trained: list[list[int]] = []

    class Recording(OnlineSelectionTrainer):
        def _get_train_sampler(self, *a, **k):
            return SequentialSampler(self.train_dataset)

        def compute_loss(self, model, inputs, *a, **k):
            trained.append([row[row != pad].tolist() for row in inputs["input_ids"]])
            return super().compute_loss(model, inputs, *a, **k)

    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=1e-12,
        num_train_epochs=1,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        dataloader_num_workers=0,
        seed=0,
        max_grad_norm=0.0,
    )
    trainer = Recording(
        model=model,
        args=args,
        train_dataset=enc,
        data_collator=lambda items: collate(items, pad),
        selector=UDSSelector(max_len=48, seed=0),
        budget=0.25,
        pad_token_id=pad,
    )
    trainer.train()
    hf_ids = [ids for mb in trained for ids in mb]
    plain_ids = [enc[i].input_ids for i in log.selected]
    assert trainer.selected_counts == [2] * 4  # effective batch: budget x 8 candidates per step
    assert [len(mb) for mb in trained] == [1] * 8  # two micro-batches per step, one pick each
    assert hf_ids == plain_ids


def test_regroup_keeps_rows_and_repads():
    import pytest

    from icml26.uds.hf import regroup

    a = collate_rows([[5, 6, 7], [8, 9]])
    b = collate_rows([[1, 2, 3, 4]])
    out = regroup([a, b], [torch.tensor([1]), torch.tensor([0])], pad_id=0)
    assert [mb["input_ids"].tolist() for mb in out] == [[[8, 9]], [[1, 2, 3, 4]]]
    assert out[0]["labels"].tolist() == [[8, 9]] and out[1]["attention_mask"].tolist() == [
        [1, 1, 1, 1]
    ]
    with pytest.raises(ValueError, match="cannot fill 2 micro-batches"):
        regroup([a, b], [torch.tensor([0]), torch.tensor([], dtype=torch.long)], pad_id=0)


def collate_rows(rows):
    from icml26.uds.loop import Encoded

    return collate([Encoded(r, list(r)) for r in rows], 0)


def test_trainer_rejects_a_budget_outside_unit_interval():
    import pytest

    from icml26.uds.hf import OnlineSelectionTrainer

    for budget in (0.0, 1.5):
        with pytest.raises(ValueError, match=rf"budget must be in \(0, 1\]; got {budget}"):
            OnlineSelectionTrainer(selector=UDSSelector(), budget=budget)
