"""The history bed's catalogue: each log, the writer that made it, the fault, the finding it must
raise and the steps where the fault was injected; and `score`, which reads and judges every log.

    python -m signalchain.reference.history_bed.catalogue [LOGS_DIR] [--json PATH]

A fault is *detected* when one of its expected ids is raised (as a warning or error, and of the
expected kind where one is named), *localised* when that finding's step lies in the injected window.
A clean log must raise no warning and no error.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Entry", "ENTRIES", "LOGS", "score", "log_path"]

LOGS = Path(__file__).resolve().parent / "logs"
INF = math.inf


@dataclass(frozen=True)
class Entry:
    name: str  # folder under logs/
    writer: str  # "tensorboard" (plain loop), "lightning", "hf-trainer"
    fault: str | None  # None: a clean log
    expected: tuple[str, ...] = ()  # finding ids, any of which detects the fault
    window: tuple[float, float] = (0, INF)  # the steps where the fault shows (inclusive)
    kind: str | None = None  # the evidence "kind" the finding must carry, where one is named
    twin: str = ""  # the clean log of the same writer and settings
    cause: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _e(name, writer, fault, expected, window, twin, cause, kind=None) -> Entry:
    return Entry(name, writer, fault, tuple(expected), window, kind, twin, cause)


_TB, _LT, _HF = "tensorboard", "lightning", "hf-trainer"
ENTRIES: tuple[Entry, ...] = (
    Entry("tb_clean", _TB, None, cause="warm-up + cosine, clipping, fresh shuffled batches"),
    Entry("tb_clean_resumed", _TB, None, cause="died at step 130, resumed from step 120 with everything restored"),
    _e("tb_empty_labels_nan", _TB, "empty_labels_nan", ["history.nonfinite"], (150, 150), "tb_clean",
       "a batch whose labels are all ignore-index at step 150: the mean over no element is NaN"),
    _e("tb_lr_runaway", _TB, "lr_runaway", ["history.loss_spike", "history.grad_explosion", "history.nonfinite"],
       (120, 135), "tb_clean", "from step 120 the rate is multiplied by 3 each step, and no clipping"),
    _e("tb_corrupt_batch_spike", _TB, "corrupt_batch_spike", ["history.loss_spike"], (140, 140), "tb_clean",
       "one batch of step 140 with tokens that are not its audio's"),
    _e("tb_corrupt_shard", _TB, "corrupt_shard", ["history.loss_spike"], (140, 140), "tb_clean",
       "every batch from step 140 from a corrupted shard"),
    _e("tb_loss_weight_explodes", _TB, "loss_weight_explodes",
       ["history.grad_explosion", "history.loss_spike", "history.nonfinite"], (120, 125), "tb_clean",
       "a loss weight warmed up without a cap from step 120"),
    _e("tb_lr_integer_division", _TB, "lr_integer_division", ["history.lr_schedule"], (0, 240), "tb_clean",
       "a warm-up written with integer division: the rate is 0 for the whole run", "stuck_zero"),
    _e("tb_scheduler_per_epoch", _TB, "scheduler_per_epoch", ["history.lr_schedule"], (79, 82), "tb_clean",
       "the scheduler rebuilt inside the epoch loop every 80 steps: the warm-up runs again", "warmup_restarted"),
    _e("tb_optimizer_wrong_params", _TB, "optimizer_wrong_params", ["history.plateau"], (0, 1), "tb_clean",
       "the optimizer holds copies of the parameters, not the model's", "from_start"),
    _e("tb_codebook_logits_detached", _TB, "codebook_logits_detached", ["history.codebook_stalled"], (0, 1),
       "tb_clean", "a .detach() left on codebook 3's logits"),
    _e("tb_upload_blocks", _TB, "upload_blocks", ["history.throughput_drop"], (148, 152), "tb_clean",
       "a checkpoint upload on the training thread from step 150"),
    _e("tb_resume_lexicographic_checkpoint", _TB, "resume_lexicographic_checkpoint", ["history.resume_jump"],
       (120, 121), "tb_clean_resumed", "resumed from the step-20 checkpoint: sorted() puts 'ckpt-20' last"),
    _e("tb_resume_fresh_scheduler", _TB, "resume_fresh_scheduler", ["history.lr_schedule"], (120, 121),
       "tb_clean_resumed", "resumed with the scheduler built afresh", "restarted_on_resume"),
    _e("tb_sorted_by_quality", _TB, "sorted_by_quality", ["history.epoch_boundary"], (59, 62), "tb_clean",
       "clips sorted by quality and never shuffled: each epoch goes from clean to noisy"),
    Entry("lt_clean", _LT, None, cause="Adam at the configured rate, shuffled, validation each epoch"),
    Entry("lt_clean_dropout", _LT, None, cause="dropout 0.3 in training only: validation a little below training",
          extra={"dropout": 0.3}),
    _e("lt_random_targets", _LT, "random_targets", ["history.plateau"], (0, 1), "lt_clean",
       "labels drawn independently of the inputs: nothing to learn", "uniform"),
    _e("lt_tiny_train_set", _LT, "tiny_train_set", ["history.overfit_gap"], (0, INF), "lt_clean",
       "4 training clips for 60 epochs"),
    _e("lt_valid_easier_subset", _LT, "valid_easier_subset", ["history.valid_below_train"], (0, INF), "lt_clean",
       "the validation split filtered to the most typical clips"),
    _e("lt_cached_eval", _LT, "cached_eval", ["history.valid_constant"], (0, 20), "lt_clean",
       "the first validation result kept and logged every epoch"),
    _e("lt_lr_not_as_configured", _LT, "lr_not_as_configured", ["history.lr_schedule"], (0, INF), "lt_clean",
       "the optimizer built with a hard-coded rate 10x the configured one", "differs_from_config"),
    Entry("hf_clean", _HF, None, cause="AdamW, warm-up + cosine, clipping, evaluation every 10 steps"),
    _e("hf_silent_clip_inf_gain", _HF, "silent_clip_inf_gain", ["history.nonfinite"], (25, 25), "hf_clean",
       "a silent clip in the batch of step 25 normalised by its RMS (gain 1/0): the weights go NaN"),
    _e("hf_empty_labels_nan", _HF, "empty_labels_nan", ["history.nonfinite"], (25, 25), "hf_clean",
       "the batch of step 25 has every label -100: its loss is NaN, the Trainer's running total logs NaN from "
       "there while the weights train on"),
    _e("hf_lr_zero", _HF, "lr_zero", ["history.lr_schedule"], (0, 60), "hf_clean",
       "learning_rate=0.0 in TrainingArguments", "stuck_zero"),
    _e("hf_tiny_train_set", _HF, "tiny_train_set", ["history.overfit_gap"], (0, INF), "hf_clean",
       "4 training clips repeated"),
    _e("hf_corrupt_batch_spike", _HF, "corrupt_batch_spike", ["history.loss_spike"], (25, 25), "hf_clean",
       "one batch of step 25 with labels that are not its tokens'"),
)


def log_path(e: Entry, root: Path = LOGS) -> Path:
    """The folder `signalchain history` reads for an entry (Lightning's CSVLogger writes into version_/)."""
    return root / e.name


def score(root: str | Path = LOGS, names: Any = None) -> list[dict[str, Any]]:
    import signalchain  # the reference is a user of signalchain: its public API only

    rows = []
    for e in ENTRIES:
        if names is not None and e.name not in names:
            continue
        result = signalchain.history(log_path(e, Path(root)))
        found = [f for f in result.findings if f.severity.value != "info"]
        row: dict[str, Any] = {"name": e.name, "writer": e.writer, "fault": e.fault, "cause": e.cause,
                               "expected": list(e.expected), "window": [e.window[0], None if e.window[1] == INF
                                                                        else e.window[1]],
                               "found": [{"id": f.id, "severity": f.severity.value, "step": f.evidence.get("step"),
                                          "kind": f.evidence.get("kind")} for f in found]}
        if e.fault is None:
            row["ok"] = not found
        else:
            hits = [f for f in found if f.id in e.expected and (e.kind is None or f.evidence.get("kind") == e.kind)]
            row["detected"] = bool(hits)
            row["localised"] = any(isinstance(f.evidence.get("step"), int)
                                   and e.window[0] <= f.evidence["step"] <= e.window[1] for f in hits)
            row["step_found"] = min((f.evidence.get("step") for f in hits), default=None)
            row["ok"] = row["detected"] and row["localised"]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="?", default=str(LOGS))
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = score(args.logs)
    for r in rows:
        if r["fault"] is None:
            print(f"{r['name']:38s} clean   {'silent' if r['ok'] else 'FALSE ALARM'} {r['found'] or ''}")
        else:
            lo, hi = r["window"]
            print(f"{r['name']:38s} {'ok  ' if r['ok'] else 'MISS'}    expected {'/'.join(r['expected'])} at "
                  f"{lo}..{'end' if hi is None else hi}, found at {r['step_found']}; all: "
                  + ", ".join(f"{f['id']}@{f['step']}" for f in r["found"]))
    faults = [r for r in rows if r["fault"]]
    clean = [r for r in rows if not r["fault"]]
    print(f"faults {sum(r['detected'] for r in faults)}/{len(faults)} detected, "
          f"{sum(r['localised'] for r in faults)}/{len(faults)} localised; clean logs silent "
          f"{sum(r['ok'] for r in clean)}/{len(clean)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"logs": str(args.logs), "rows": rows}, indent=2, default=str))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
