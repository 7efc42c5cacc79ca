"""Datasets on disk for the audit tests (fixtures in conftest.py), written with the reference data generator.

`planted` holds one example of every defect the audit owes a finding for, each on its own file,
and `clean` holds none. Both are AudioCraft datasets (data.jsonl + sidecar JSON per file) with a
train and a valid split. `PLANTED` maps each planted defect to (finding id, file name).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr

from signalchain.reference.data import INSTRUMENTS, Clip, generate_clip, write_audiocraft_dataset

SR = 32000
SEED = 21  # a collection of its own, apart from the reference pipeline's


def variant(clip: Clip, new_id: str, audio: np.ndarray | None = None, **meta: Any) -> Clip:
    """`clip` renamed (file, name, source id, title) with other audio or metadata if given."""
    metadata = {**clip.metadata, "name": new_id, "source_id": new_id, "title": f"Title of {new_id}", **meta}
    return replace(clip, audio=np.ascontiguousarray(clip.audio if audio is None else audio, dtype=np.float32),
                   metadata=metadata, source_id=new_id, caption=metadata["description"])


def _edit_manifest(manifest: Path, edit: dict[str, dict[str, Any]], extra_lines: list[bytes] = ()) -> None:
    """Change fields of the lines whose file stem is a key of `edit`; append raw lines."""
    out = []
    for line in manifest.read_bytes().splitlines():
        row = json.loads(line)
        row.update(edit.get(Path(row["path"]).stem, {}))
        out.append(json.dumps(row).encode())
    manifest.write_bytes(b"\n".join(out + list(extra_lines)) + b"\n")


def _write_sidecar(wav: Path, data: bytes) -> None:
    wav.with_suffix(".json").write_bytes(data)


# defect -> (finding id, file stem or None for a manifest line)
PLANTED = {
    "missing file": ("file.missing", "t-missing"),
    "corrupt file": ("file.unreadable", "t-corrupt"),
    "zero-length file": ("file.unreadable", "t-empty"),
    "NaN samples": ("audio.nonfinite", "t-nan"),
    "silence": ("audio.silent", "t-silent"),
    "clipping": ("audio.clipped", "t-clipped"),
    "DC offset": ("audio.dc_offset", "t-dc"),
    "channel cancellation": ("audio.channel_cancel", "t-cancel"),
    "stale duration": ("manifest.duration_mismatch", "t-duration"),
    "wrong sample rate": ("manifest.sample_rate_mismatch", "t-rate"),
    "sidecar missing": ("metadata.missing", "t-nosidecar"),
    "sidecar lacks fields": ("metadata.missing", "t-fields"),
    "sidecar not UTF-8": ("metadata.missing", "t-badsidecar"),
    "empty caption": ("caption.empty", "t-emptycap"),
    "placeholder caption": ("caption.duplicate", "t-dupcap-0"),
    "long caption": ("caption.truncated", "t-longcap"),
    "shared source id": ("split.shared_id", "v-shared"),
    "exact duplicate": ("split.duplicate", "v-exact"),
    "near-duplicate: gain": ("split.near_duplicate", "v-gain"),
    "near-duplicate: resampled": ("split.near_duplicate", "v-resampled"),
    "near-duplicate: MP3": ("split.near_duplicate", "v-mp3"),
    "near-duplicate: shifted crop": ("split.near_duplicate", "v-crop"),
    "near-duplicate: noise": ("split.near_duplicate", "v-noise"),
    "overlapping windows": ("split.overlapping_windows", "v-window"),
    "alternate version": ("split.alternate_version", "v-version"),
    "cache before split": ("split.cache_before_split", "v-cache"),
}


def build_planted(root: Path) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    base = [generate_clip(i, SEED, SR) for i in range(30)]
    train = [variant(c, f"t-{i:02d}") for i, c in enumerate(base[:14])]
    special = {name: variant(base[14 + k], name) for k, name in enumerate(
        ["t-missing", "t-corrupt", "t-empty", "t-nan", "t-silent", "t-clipped", "t-dc", "t-cancel", "t-duration",
         "t-rate", "t-nosidecar", "t-fields", "t-badsidecar", "t-emptycap", "t-longcap"])}
    special["t-silent"] = variant(special["t-silent"], "t-silent", np.zeros_like(special["t-silent"].audio))
    special["t-clipped"] = variant(special["t-clipped"], "t-clipped", np.clip(special["t-clipped"].audio * 20, -1, 1))
    special["t-dc"] = variant(special["t-dc"], "t-dc", special["t-dc"].audio * 0.3 + 0.2)
    left = special["t-cancel"].audio[:1]
    special["t-cancel"] = variant(special["t-cancel"], "t-cancel", np.concatenate([left, -left]))
    special["t-emptycap"] = variant(special["t-emptycap"], "t-emptycap", description="")
    special["t-longcap"] = variant(special["t-longcap"], "t-longcap", description=" ".join(["ambient drone"] * 40))
    dup = [variant(generate_clip(40 + i, SEED, SR), f"t-dupcap-{i}", description="music") for i in range(4)]
    # The 6 s source cut into two windows sharing 1.5 s, one per split.
    source = generate_clip(50, SEED, SR, seconds=6.5)
    win_train = variant(source, "t-window", source.audio[:, : int(3.5 * SR)])
    train += list(special.values()) + dup + [win_train]

    o = {k: train[k] for k in range(6)}  # originals the valid side copies
    x = o[2].audio
    shift = int(0.37 * SR)
    valid = [
        variant(generate_clip(60, SEED, SR), "v-shared", source_id="t-00"),  # other audio, same recording id
        variant(o[0], "v-exact"),
        variant(o[1], "v-gain", o[1].audio * 10 ** (-6 / 20)),
        variant(o[2], "v-resampled", soxr.resample(soxr.resample(x.T, SR, 22050), 22050, SR).T),
        variant(o[4], "v-crop", o[4].audio[:, shift : shift + int(0.7 * o[4].audio.shape[1])]),
        variant(o[5], "v-noise", o[5].audio + rng.normal(0, 0.003, o[5].audio.shape)),
        variant(source, "v-window", source.audio[:, 2 * SR :]),
        variant(generate_clip(61, SEED, SR, attributes={**{k: base[6].attributes[k] for k in
                ("tempo", "key_root", "mode", "pattern", "register", "dynamics", "drums")},
                "instrument": INSTRUMENTS[(INSTRUMENTS.index(base[6].attributes["instrument"]) + 1) % 4]}),
                "v-version", title="Title of t-06 (live)", artist=base[6].metadata["artist"]),
        variant(generate_clip(62, SEED, SR), "v-cache"),
    ] + [variant(generate_clip(70 + i, SEED, SR), f"v-{i:02d}") for i in range(6)]
    t_manifest = write_audiocraft_dataset(train, root / "train")
    v_manifest = write_audiocraft_dataset(valid, root / "valid")
    # The MP3 copy: a file of its own format, added to the valid manifest.
    mp3 = root / "valid" / "audio" / "v-mp3.mp3"
    sf.write(mp3, o[3].audio.T, SR, format="MP3")
    shutil.copy(root / "train" / "audio" / "t-03.json", mp3.with_suffix(".json"))
    info = json.loads(mp3.with_suffix(".json").read_text())
    mp3.with_suffix(".json").write_text(json.dumps({**info, "name": "v-mp3", "source_id": "v-mp3", "title": "mp3"}))

    ta = root / "train" / "audio"
    (ta / "t-missing.wav").unlink()
    (ta / "t-corrupt.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEfmt garbage" + bytes(range(200)))
    (ta / "t-empty.wav").write_bytes(b"")
    nan = special["t-nan"].audio.copy()
    nan[:, 1000:1010] = np.nan
    sf.write(ta / "t-nan.wav", nan.T, SR, subtype="FLOAT")
    (ta / "t-nosidecar.json").unlink()
    fields = json.loads((ta / "t-fields.json").read_text())
    for k in ("artist", "bpm"):
        fields.pop(k)
    (ta / "t-fields.json").write_text(json.dumps(fields))
    _write_sidecar(ta / "t-badsidecar.wav", b'{"description": "caf\xe9 ambient", "title": "x"}')
    cache = root / "cache"
    cache.mkdir()
    (cache / "tokens-0003.npy").write_bytes(b"\x93NUMPY cached tokens of position 3")
    _edit_manifest(t_manifest, {"t-duration": {"duration": special["t-duration"].audio.shape[1] / SR + 2.0},
                                "t-rate": {"sample_rate": 44100},
                                "t-07": {"tokens_path": str(cache / "tokens-0003.npy")}},
                   [b'{"path": "broken', b'{"path": "caf\xe9.wav", "duration": 1.0}', b'{"duration": 2.0}'])
    dur = sf.info(str(mp3)).frames / SR
    _edit_manifest(v_manifest, {"v-cache": {"tokens_path": str(cache / "tokens-0003.npy")}},
                   [json.dumps({"path": str(mp3), "duration": dur, "sample_rate": SR}).encode()])
    return {"root": root, "train": t_manifest, "valid": v_manifest, "train_lines": len(train), "extra_lines": 3}


def build_clean(root: Path) -> dict[str, Any]:
    train = [generate_clip(i, SEED + 1, SR) for i in range(24)]
    valid = [generate_clip(i, SEED + 1, SR) for i in range(100, 108)]
    return {"root": root, "train": write_audiocraft_dataset(train, root / "train"),
            "valid": write_audiocraft_dataset(valid, root / "valid")}


def _takes(n: int, seed: int, seconds: float = 7.2) -> list[Clip]:
    return [generate_clip(t, seed, SR, seconds=seconds) for t in range(n)]


def _chunks(take: Clip, chunk: float = 2.0) -> list[np.ndarray]:
    n = int(chunk * SR)
    return [np.ascontiguousarray(take.audio[:, s : s + n]) for s in range(0, take.audio.shape[1], n)]


def build_conventions(root: Path) -> dict[str, Any]:
    """Clean datasets in the conventions real fine-tuning sets follow, each in its own folder of splits:

    - `audiocraft/`: long takes cut into 2 s chunk files (`takeNN_chunkNNN.wav`, the tail shorter), each
      chunk's MusicInfo sidecar copied from its take (every field present, some empty; no source id:
      MusicInfo has none), a take in one split only;
    - `audiofolder/`: the same cut as an HF audiofolder, `metadata.csv` holding only `file_name` and `text`.
    Every chunk keeps its take's caption, so each caption is on four clips: pieces of one recording.
    """
    takes = {"train": _takes(6, SEED + 2), "valid": _takes(2, SEED + 3)}
    for split, clips in takes.items():
        rows, folder = [], root / "audiofolder" / split
        folder.mkdir(parents=True)
        chunks = []
        for t, take in enumerate(clips):
            info = {k: v for k, v in take.metadata.items() if k != "source_id"}
            info.update(keywords="" if t % 2 else info["keywords"], moods=[] if t % 3 == 1 else info["moods"],
                        title=f"{split} take {t}", artist="" if t % 2 else info["artist"])
            for k, audio in enumerate(_chunks(take)):
                name = f"{split}-take{t:02d}_chunk{k:03d}"
                chunks.append(replace(take, audio=audio, source_id=name, metadata={**info, "name": name}))
                sf.write(folder / f"{name}.wav", audio.T, SR)
                rows.append(f'{name}.wav,"{take.caption}"')
        write_audiocraft_dataset(chunks, root / "audiocraft" / split)
        for wav in (root / "audiocraft" / split / "audio").glob("*.json"):  # MusicInfo carries no source id
            info = json.loads(wav.read_text())
            info.pop("source_id", None)
            wav.write_text(json.dumps(info))
        (folder / "metadata.csv").write_text("file_name,text\n" + "\n".join(rows) + "\n")
    return {"audiocraft": root / "audiocraft", "audiofolder": root / "audiofolder"}
