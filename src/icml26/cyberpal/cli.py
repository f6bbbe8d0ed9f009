"""``icml26 cyberpal ...``: build grounded reasoning SFT data, verify it, fine-tune, evaluate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from icml26.core.errors import exit_on_user_error as _user_errors

app = typer.Typer(help="CyberPal 2.0 / SecKnowledge 2.0: grounded, verified security reasoning "
                  "data from CWE/ATT&CK (+ your CVE records), SFT, CVE->CWE and MCQ evaluation.",
                  no_args_is_help=True)


@app.command("build")
def build_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output chat JSONL.")],
    tasks: Annotated[str, typer.Option(help="Comma list: cve2cwe, cwe_qa, attack_qa.")] =
        "cve2cwe,cwe_qa,attack_qa",
    writer: Annotated[str, typer.Option(help="template | lm")] = "template",
    formats: Annotated[Path | None, typer.Option(help="Folder of format YAML files "
                                                 "(default: the shipped ones).")] = None,
    records: Annotated[Path | None, typer.Option(help="CSV with cve_id, description, cwe "
                                                 "(default: CWE observed examples).")] = None,
    chat: Annotated[str, typer.Option(help="Writer model for --writer lm: local, local:PATH, "
                                      "http(s)://HOST/v1#MODEL.")] = "local",
    plain: Annotated[bool, typer.Option(help="Also write the terse-answer twin records.")] = False,
    work_dir: Annotated[Path | None, typer.Option(help="Stage files (resume); default OUT.work")]
        = None,
    ood_field: Annotated[str | None, typer.Option(help="With --records: hold out records OOD "
                                                  "by this column (vendor, product, ...); train "
                                                  "on the rest's train split.")] = None,
    ood_values: Annotated[str | None, typer.Option(help="Comma list of --ood-field values that "
                                                   "are OOD (default: the rarest values, "
                                                   "--ood-share of the records).")] = None,
    ood_share: Annotated[float, typer.Option(help="OOD share when --ood-values is not given.")]
        = 0.2,
    id_test: Annotated[float, typer.Option(help="ID test records held out: a count, or a share "
                                           "if < 1.")] = 0.2,
    judge: Annotated[str | None, typer.Option(help="Judge model (local, local:PATH, "
                                              "http(s)://HOST/v1#MODEL): it proposes formats and "
                                              "picks per task by pairwise comparison.")] = None,
    proposals: Annotated[int, typer.Option(help="Format proposals per task (with --judge).")]
        = 3,
) -> None:
    """Tasks -> grounding -> writer -> verifier -> dedup/decontamination, resumable."""
    with _user_errors():
        from icml26.cyberpal.formats import load_formats
        from icml26.cyberpal.pipeline import BuildConfig, build

        cfg = BuildConfig(tasks=tuple(t.strip() for t in tasks.split(",") if t.strip()),
                          writer=writer, plain=plain, ood_field=ood_field,
                          ood_values=tuple(v for v in (ood_values or "").split(",") if v.strip())
                          or None, ood_share=ood_share, n_id_test=id_test, n_proposals=proposals)
        chat_model = None
        if writer == "lm":
            from icml26.core.chat import get_chat

            chat_model = get_chat(chat)
        judge_model = None
        if judge:
            from icml26.core.chat import get_chat

            judge_model = get_chat(judge)
        rep = build(out, cfg, formats=load_formats(formats) if formats else None,
                    records=records, chat=chat_model, judge=judge_model, work_dir=work_dir)
        typer.echo(json.dumps(rep, indent=1))


@app.command("verify")
def verify_cmd(
    data: Annotated[Path, typer.Argument(help="Chat JSONL written by build (meta kept).")],
    formats: Annotated[Path | None, typer.Option(help="Format folder used to build.")] = None,
) -> None:
    """Re-run every check on DATA; print kept/dropped and failures per check (exit 1 if any)."""
    with _user_errors():
        from icml26.core.errors import UserError
        from icml26.cyberpal.catalog import load_attack, load_cwe
        from icml26.cyberpal.enrich import read_jsonl, verify_records
        from icml26.cyberpal.formats import default_formats, load_formats

        fm = load_formats(formats) if formats else default_formats()
        recs = read_jsonl(data)
        for n, r in enumerate(recs, 1):
            if r["meta"].get("format") == "plain":
                continue
            if r["meta"].get("task") not in fm or "gold" not in r["meta"]:
                raise UserError(f"{data}: record {n} has no meta.task/meta.gold of a known format")
        _, _, rep = verify_records([r for r in recs if r["meta"].get("format") != "plain"],
                                   fm, load_cwe(), load_attack())
        d = rep.to_dict()
        typer.echo(json.dumps(d, indent=1))
        if d["dropped"]:
            raise typer.Exit(1)


@app.command("sft")
def sft_cmd(
    data: Annotated[Path, typer.Option(help="Chat JSONL.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output HF model folder.")],
    model: Annotated[str, typer.Option(help="HF folder, .gguf, or 'smollm2'.")] = "smollm2",
    lora: Annotated[bool, typer.Option(help="LoRA (merged into the saved weights).")] = False,
    epochs: Annotated[int, typer.Option()] = 2,
    lr: Annotated[float, typer.Option(help="Peak AdamW learning rate.")] = 1e-4,
    batch_size: Annotated[int, typer.Option()] = 8,
    max_len: Annotated[int, typer.Option(help="Tokens per chat; longer are skipped.")] = 384,
    device: Annotated[str, typer.Option()] = "cpu",
    autocast: Annotated[
        bool | None, typer.Option("--autocast/--no-autocast",
                                  help="bf16 autocast (default: only where bf16 is native).")
    ] = None,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Fine-tune MODEL on DATA (assistant-token loss); resumable per epoch."""
    with _user_errors():
        import torch

        from icml26.core.io import atomic_write_json
        from icml26.core.lm import load_lm
        from icml26.cyberpal.enrich import read_jsonl
        from icml26.cyberpal.train import SFTConfig, sft

        recs = read_jsonl(data)
        m, tok = load_lm(model, dtype=torch.float32, device=device)
        cfg = SFTConfig(epochs=epochs, lr=lr, batch_size=batch_size, max_len=max_len, lora=lora,
                        autocast=autocast, seed=seed)
        _, st = sft(m, tok, recs, cfg, out_dir=out, device=device)
        atomic_write_json(out / "train_ids.json", sorted({str(r["meta"].get("id")) for r in recs
                                                          if r["meta"].get("id")}))
        typer.echo(f"{st.steps} steps, {st.tokens_trained} assistant tokens, "
                   f"{st.tokens_per_s:.0f} tokens/s -> {out}")


@app.command("eval")
def eval_cmd(
    model: Annotated[str, typer.Option(help="HF folder (e.g. from `sft`), .gguf, 'smollm2'.")],
    split: Annotated[str, typer.Option(help="id | ood | mcq | cti-rcm | cti-mcq")] = "ood",
    mode: Annotated[str, typer.Option(help="generate | rank (CVE splits)")] = "generate",
    n_cwes: Annotated[int, typer.Option(help="Label set: most frequent CWEs.")] = 50,
    limit: Annotated[int | None, typer.Option(help="First N items only.")] = None,
    allow_overlap: Annotated[bool, typer.Option(help="Evaluate even if training saw a CVE.")]
        = False,
    device: Annotated[str, typer.Option()] = "cpu",
    dtype: Annotated[str, typer.Option(help="auto: bf16 on CUDA and on CPUs with native bf16, else float32")] = "auto",
    records: Annotated[Path | None, typer.Option(help="id/ood on your records CSV (with "
                                                 "--ood-field) instead of CWE's examples.")]
        = None,
    ood_field: Annotated[str | None, typer.Option(help="Column that splits --records OOD; same "
                                                  "values as for `build`.")] = None,
    ood_values: Annotated[str | None, typer.Option(help="Comma list of OOD values.")] = None,
    ood_share: Annotated[float, typer.Option(help="OOD share without --ood-values.")] = 0.2,
    id_test: Annotated[float, typer.Option(help="ID test: count, or share if < 1.")] = 0.2,
    data: Annotated[Path | None, typer.Option(help="CTIBench file for cti-rcm / cti-mcq "
                                              "(cti-rcm.tsv, cti-mcq.tsv as published).")]
        = None,
    prompt: Annotated[str, typer.Option(help="cti-rcm: 'published' (the file's Prompt column, "
                                        "verbatim) or 'ours' (the training prompt).")]
        = "published",
) -> None:
    """Any-gold / strict / hierarchy accuracy and compliance, or MCQ accuracy (hard, easy)."""
    with _user_errors():
        from icml26.core.errors import UserError
        from icml26.core.lm import load_lm
        from icml26.cyberpal.catalog import load_attack, load_cwe
        from icml26.cyberpal.enrich import cve2cwe_prompt
        from icml26.cyberpal.evaluate import build_mcq, generate, parse_cwe, rank_labels, score_cwe
        from icml26.cyberpal.pipeline import catalogue_splits, record_splits
        from icml26.cyberpal.splits import SplitConfig

        splits_ok = ("id", "ood", "mcq", "cti-rcm", "cti-mcq")
        if split not in splits_ok or mode not in ("generate", "rank"):
            raise UserError(f"split must be {'|'.join(splits_ok)} and mode generate|rank; got "
                            f"{split}, {mode}")
        if split.startswith("cti-") and data is None:
            raise UserError(f"--split {split} needs --data FILE (CTIBench {split}.tsv)")
        if prompt not in ("published", "ours"):
            raise UserError(f"--prompt must be published|ours; got {prompt!r}")
        if ood_field and records is None:
            raise UserError("--ood-field needs --records")
        if records is not None and split not in ("id", "ood"):
            raise UserError(f"--records applies to --split id|ood, not {split}")
        if records is not None and not ood_field:
            raise UserError("--records needs --ood-field (the column to split OOD by)")
        cwe = load_cwe()
        if split == "cti-mcq":
            from icml26.cyberpal.ctibench import read_cti_mcq

            items = read_cti_mcq(data)[:limit]
        elif split == "cti-rcm":
            from icml26.cyberpal.ctibench import read_rcm

            rcm = read_rcm(data)[:limit]
        m, tok = load_lm(model, dtype=dtype, device=device)
        if split in ("mcq", "cti-mcq"):
            from icml26.core.mcq import score_mcq

            res = {}
            sets = ({"cti": items} if split == "cti-mcq" else
                    {("hard" if hard else "easy"): build_mcq(cwe, load_attack(), 100, 100,
                                                             hard=hard)[:limit]
                     for hard in (True, False)})
            for name, its in sets.items():
                for meth in ("logprob", "letter"):
                    res[f"{name}/{meth}"] = score_mcq(m, tok, its, method=meth).accuracy
            res["n"] = sum(len(x) for x in sets.values())
            typer.echo(json.dumps(res, indent=1))
            return
        from icml26.cyberpal.release import PLAIN_SYSTEM

        if split == "cti-rcm":
            ids = [x.cve_id for x in rcm]
            golds = [(x.gold,) for x in rcm]
            users = [x.prompt if prompt == "published" and x.prompt else
                     cve2cwe_prompt(x.description) for x in rcm]
            labels = sorted({x.gold for x in rcm})
            extra = {"prompt": prompt, "labels": len(labels)}
        else:
            if records is not None:
                sp, info = record_splits(
                    records, ood_field, ood_share=ood_share, n_id_test=id_test, cwe=cwe,
                    ood_values=[v for v in (ood_values or "").split(",") if v.strip()] or None)
                extra = {"ood_field": info["field"], "ood_values": info["ood_values"]}
            else:
                sp, extra = catalogue_splits(SplitConfig(n_cwes=n_cwes)), {}
            pairs = list(sp.id_test if split == "id" else sp.ood_test)[:limit]
            ids, golds = [p.cve_id for p in pairs], [p.cwes for p in pairs]
            users = [cve2cwe_prompt(p.description) for p in pairs]
            labels = list(sp.labels)
        seen = Path(model) / "train_ids.json"
        if seen.is_file() and not allow_overlap:
            overlap = sorted(set(json.loads(seen.read_text())) & {i for i in ids if i})
            if overlap:
                raise UserError(f"{len(overlap)} eval CVE(s) were in the training data "
                                f"(first: {', '.join(overlap[:5])}); pass --allow-overlap")
        chats = [[{"role": "system", "content": PLAIN_SYSTEM},
                  {"role": "user", "content": u}] for u in users]
        if mode == "rank":
            names = [f"CWE-{c}: {cwe[c].name}" if c in cwe else f"CWE-{c}" for c in labels]
            lp = rank_labels(m, tok, chats, names)
            preds = [int(labels[j]) for j in lp.argmax(1)]
        else:
            preds = [parse_cwe(t) for t in generate(m, tok, chats)]
        out = score_cwe(preds, golds, cwe).summary()
        typer.echo(json.dumps({**out, **extra}, indent=1))


@app.command("export-hf")
def export_hf_cmd(
    data: Annotated[Path, typer.Argument(help="Chat JSONL written by build (meta kept).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset folder to write.")],
    name: Annotated[str, typer.Option(help="Pretty name on the dataset card.")] =
        "icml26 CyberPal SFT data",
) -> None:
    """DATA as a Hugging Face dataset folder: data/train.jsonl + a dataset card with the schema."""
    with _user_errors():
        from icml26.cyberpal.enrich import read_jsonl
        from icml26.cyberpal.release import export_dataset

        report = Path(str(data) + ".work") / "report.json"
        rep = json.loads(report.read_text()) if report.is_file() else None
        recs = read_jsonl(data)
        export_dataset(recs, out, name=name, report=rep)
        typer.echo(f"wrote {len(recs)} rows to {out}/data/train.jsonl and {out}/README.md; "
                   f"datasets.load_dataset('{out}', split='train')")


@app.command("lm-eval-task")
def lm_eval_task_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the task YAMLs + items.")],
    split: Annotated[str, typer.Option(help="id | ood (the catalogue's CVE -> CWE splits).")] =
        "ood",
    n_cwes: Annotated[int, typer.Option(help="Candidate CWEs (the most frequent).")] = 50,
) -> None:
    """CVE -> CWE as lm-eval tasks (rank: multiple_choice over the candidate CWEs; gen)."""
    with _user_errors():
        from icml26.core.errors import UserError
        from icml26.cyberpal.catalog import load_cwe
        from icml26.cyberpal.pipeline import catalogue_splits
        from icml26.cyberpal.release import eval_rows, lm_eval_task
        from icml26.cyberpal.splits import SplitConfig

        if split not in ("id", "ood"):
            raise UserError(f"--split must be id or ood; got {split!r}")
        sp = catalogue_splits(SplitConfig(n_cwes=n_cwes))
        rows = eval_rows(sp.id_test if split == "id" else sp.ood_test, sp.labels, load_cwe())
        paths = lm_eval_task(rows, out, split=f"{split}_test")
        typer.echo(f"wrote {len(rows)} items and {', '.join(p.name for p in paths[1:])} to "
                   f"{out}; lm_eval --include_path {out} --tasks icml26_cve2cwe_rank "
                   "--apply_chat_template ...")
