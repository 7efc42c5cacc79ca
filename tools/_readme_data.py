"""The inputs of the README's `listen` and `audit` examples, written into a run's folder by
`tools/readme_blocks.py` before the run (deterministic: the reference data generator, fixed seeds)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def takes(folder: Path) -> None:
    """Two takes of one 4 s stereo clip at 32 kHz: `take-01.wav` written as int16, `take-02.wav`
    divided by 32768 first and written as float (audio already in [-1, 1], made inaudible)."""
    sys.path.insert(0, str(ROOT / "src"))
    import soundfile as sf

    from signalchain.reference.data import generate_clip

    clip = generate_clip(3, seed=0, sample_rate=32000, seconds=4.0, attributes={"channels": 2})
    audio = clip.audio.T  # soundfile wants [T, C]
    sf.write(folder / "take-01.wav", audio, 32000, subtype="PCM_16")
    sf.write(folder / "take-02.wav", audio / 32768.0, 32000, subtype="FLOAT")


def audit_set(folder: Path) -> None:
    """An AudioCraft dataset, `sc-audit/train` (8 clips of 3 s) and `sc-audit/valid` (4), with planted
    defects: `v-copy` is `t-00` copied, `v-quieter` is `t-01` at -6 dB, `t-05` is digital silence, the
    sidecar of `t-06` is deleted, and the manifest line of `t-07` says 2 s more than the file holds."""
    sys.path.insert(0, str(ROOT / "src"))
    from signalchain.reference.data import generate_clip, write_audiocraft_dataset

    def named(c, name: str):  # a clip under its own name and recording id
        return dataclasses.replace(c, source_id=name, metadata={**c.metadata, "name": name, "source_id": name})

    def clip(i: int, name: str):
        return named(generate_clip(i, seed=0, sample_rate=16000, seconds=3.0), name)

    train = [clip(i, f"t-{i:02d}") for i in range(8)]
    train[5] = dataclasses.replace(train[5], audio=train[5].audio * 0)
    valid = [named(train[0], "v-copy"), named(dataclasses.replace(train[1], audio=train[1].audio * 0.5), "v-quieter"),
             clip(20, "v-02"), clip(21, "v-03")]
    root = folder / "sc-audit"
    write_audiocraft_dataset(train, root / "train", relative_paths=True)  # paths as the README shows them
    write_audiocraft_dataset(valid, root / "valid", relative_paths=True)
    (root / "train" / "audio" / "t-06.json").unlink()
    manifest = root / "train" / "data.jsonl"
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    rows[7]["duration"] += 2.0
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))


#: run name -> the function that writes its inputs into the run's folder
MAKERS = {"listen-takes": takes, "audit-set": audit_set}
