"""A codec built from its config whose checkpoint is read but never loaded into it.

zhenye234/xcodec#3: the reporter builds the SoundStream codec from its YAML config, calls
`torch.load(ckpt_path)` into a variable, and goes straight to `encode`/`decode` without
`load_state_dict`: the codec runs at its random initial weights and the reconstruction is white noise.
The fix: load the state dict into the codec before using it. Reproduced in a user's
reference-style pipeline that builds its codec from the config and "loads" the fitted codebooks the
same way: read, then dropped. A codec LM trained on such tokens learns codes that mean nothing.
"""

from __future__ import annotations

import numpy as np

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline, prep
from signalchain.reference.codec import Codec, default_codec

BUG = RealBug(
    name="data_codec_weights_not_loaded", thread="https://github.com/zhenye234/xcodec/issues/3",
    library="xcodec (torch)",
    idiom="codec built from its config, checkpoint torch.load-ed but never load_state_dict-ed",
    cls="data-semantics",
    cause="the codec's checkpoint is read into a variable and never loaded: encode/decode run at random init weights",
    fix="load the checkpoint into the codec (load_state_dict) before encoding",
    stages=("tokens", "audio.decoded"), cause_ids=("codec.untrained", "codec.round_trip"), symptom="silent")


def checkpoint() -> np.ndarray:
    """What `torch.load(ckpt)` returns: the fitted codebooks."""
    return default_codec().codebooks.copy()


def build_codec(fixed: bool) -> Codec:
    """The user's `build_codec_model(config)` then (in the fix) `load_state_dict(checkpoint)`."""
    cfg = default_codec().config
    rng = np.random.default_rng(1234)  # a freshly constructed module: its parameters at their init
    codec = Codec(rng.normal(0.0, 1.0, (cfg.n_codebooks, cfg.cardinality, cfg.n_bands)).astype(np.float32), cfg)
    state = checkpoint()  # read ...
    if fixed:
        codec = Codec(state, cfg)  # ... and loaded (the fix); the bug never uses `state`
    return codec


class CodecPipeline(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed
        self.codec = build_codec(fixed)


def pipeline(fixed: bool) -> CodecPipeline:
    return CodecPipeline(fixed)


def band_snr(codec: Codec, mono: np.ndarray) -> float:
    """Round-trip SNR (dB) of the codec's own band features: what the codes reconstruct."""
    ref = default_codec()
    feats, silent = ref.features(mono[:, 0])
    codes = codec.encode(mono)
    rec = sum(codec.codebooks[k][codes[:, k]] for k in range(codec.n_codebooks))
    sig, err = feats[~silent], feats[~silent] - rec[~silent]
    return float(10 * np.log10((sig**2).sum() / (err**2).sum()))


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    batch = p.golden_batch(0)
    audio, lengths = prep.collate(batch.clips)
    audio, lengths = prep.resample(audio, lengths, batch.sample_rate, p.sample_rate)
    mono = prep.to_mono(audio)[:, :, : int(p.cfg.segment_seconds * p.sample_rate)]
    snr = band_snr(p.codec, mono)
    return snr < 5.0, f"codec round-trip SNR {snr:.1f} dB on the golden batch's band features"
