"""A small MIDI dataset with planted leaks, from the symbolic bed's real pieces (the README's audit example).

    python benchmarks/make_midi_demo.py /tmp/sc-midi && signalchain audit /tmp/sc-midi --no-cache

train/ and valid/ hold 24 and 6 pieces; planted: a copy of a train piece 3 semitones up, one 10 %
faster and one re-voiced for violin in valid/, a truncated file and an empty one in train/.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

from signalchain.reference.symbolic.data import load_pieces
from signalchain.symbolic import COL, score_to_midi_bytes, to_score


def write(path: Path, rows: np.ndarray, tempo: float, ts: tuple[int, int]) -> None:
    path.write_bytes(score_to_midi_bytes(to_score(rows, tempo, ts)))


def main(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    (root / "train").mkdir(parents=True)
    (root / "valid").mkdir()
    pieces = load_pieces()
    train, valid = pieces[:24], pieces[24:30]
    for split, chosen in (("train", train), ("valid", valid)):
        for p in chosen:
            write(root / split / f"{p.id.replace('/', '-')}.mid", p.notes, p.tempo, p.time_signature)
    a, b, c = train[3], train[7], train[11]
    up = a.notes.copy()
    pitched = up[:, COL["drum"]] == 0
    up[pitched, COL["pitch"]] += 3
    write(root / "valid" / "transposed-up-3.mid", up, a.tempo, a.time_signature)
    write(root / "valid" / "tempo-plus-10pc.mid", b.notes, b.tempo * 1.1, b.time_signature)
    violin = c.notes.copy()
    violin[:, COL["program"]] = np.where(violin[:, COL["drum"]] == 0, 40, violin[:, COL["program"]])
    write(root / "valid" / "revoiced-violin.mid", violin, c.tempo, c.time_signature)
    whole = score_to_midi_bytes(to_score(train[0].notes, 100, (4, 4)))
    (root / "train" / "truncated.mid").write_bytes(whole[:40])
    write(root / "train" / "empty.mid", np.zeros((0, 7), np.float32), 120, (4, 4))
    print(f"{sum(1 for _ in root.rglob('*.mid'))} MIDI files in {root}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "sc-midi"))
