"""Plain records of the output route: one audio file as a player reads it, the decoder's locality
probe, the route from generated tokens to the written file. Experiments (and `listen`) fill them;
`checks/output.py` judges them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["FileMeasurement", "DecoderProbe", "RouteMeasurement"]


@dataclass
class FileMeasurement:
    """One audio file as a player reads it (filled by audio.measure.measure_file)."""

    path: str
    error: str | None = None
    sample_rate: int | None = None
    subtype: str | None = None
    format: str | None = None
    channels: int = 0
    frames: int = 0
    stats: dict[str, Any] = field(default_factory=dict)  # stats.audio_example_summary of the content
    denormal_share: float = 0.0  # nonzero samples below 1e-30: int data read as float
    reread: dict[str, Any] | None = None  # the data bytes read as 16-bit PCM when the header says float
    # finite samples beyond full scale by more than one 16-bit step (|x| > 1 + 2**-15): a PCM writer or a
    # player changes them (float files only; an integer file cannot hold them)
    over_samples: int = 0


@dataclass
class DecoderProbe:
    """Decode real tokens, then the same tokens with one frame changed: how far does the change reach?"""

    frames: int
    changed: list[int]
    far_share: float | None  # share of the difference beyond `window` frames (the smaller of waveform, log-mel)
    window: int
    error: str | None = None
    # The codec's round trip on the golden batch: the audio stage the tokens were made from, and per
    # example the decoded level minus that stage's (dB) and their log-mel correlation.
    round_trip_stage: str | None = None
    round_trip_db: list[float] = field(default_factory=list)
    round_trip_similarity: list[float] = field(default_factory=list)


@dataclass
class RouteMeasurement:
    tokens_shape: list[int]
    cardinality: int | None
    invalid: int  # generated tokens outside [0, cardinality)
    special: list[int]  # the out-of-range values seen
    silence_pattern: list[int] | None  # the frame of codes the training tokens show for silence
    silent_frames: float | None  # share of generated frames equal to it
    decoded_dbfs: list[float] = field(default_factory=list)  # per example, RMS
    decoded_clipping: float = 0.0  # float audio beyond full scale is fine until it is written
    decoded_rate: int | None = None
    written_dbfs: list[float] = field(default_factory=list)
    files: list[FileMeasurement] = field(default_factory=list)
    error: str | None = None  # what the route raised (e.g. the decoder refusing codes)
    audio_only: str | None = None  # generate returned audio without codes ("audio [2, 1, 16000]")
