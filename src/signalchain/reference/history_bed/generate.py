"""Regenerate the history bed's logs by really training the bed's model (seeded, a few minutes on 2 cores).

    python -m signalchain.reference.history_bed.generate [OUT] [--only NAME ...]

Each log is written by its writer into OUT/<name>/ (default: the bundled logs folder). Checkpoints
are kept only where a Trainer saves them (HF), weights only; the Trainer's pickled
`training_args.bin` is removed: signalchain never reads it, and the repository keeps no pickle.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
import warnings
from pathlib import Path

from .catalogue import ENTRIES, LOGS, Entry

__all__ = ["generate_one", "main"]


def generate_one(e: Entry, root: Path, seed: int = 0) -> Path:
    out = root / e.name
    shutil.rmtree(out, ignore_errors=True)
    if e.writer == "tensorboard":
        from .plain import train_plain

        train_plain(out, e.fault, seed, resumed=e.name.endswith("_resumed"))
    elif e.writer == "lightning":
        from .lightning_run import train_lightning

        train_lightning(out, e.fault, seed, dropout=float(e.extra.get("dropout", 0.0)))
    else:
        from .hf_run import train_hf

        train_hf(out, e.fault, seed)
        for p in out.rglob("training_args.bin"):
            p.unlink()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=str(LOGS))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore")
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    for e in ENTRIES:
        if args.only and e.name not in args.only:
            continue
        t = time.perf_counter()
        generate_one(e, root, args.seed)
        print(f"{e.name:38s} {time.perf_counter() - t:5.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
