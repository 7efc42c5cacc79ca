"""Layer 1: stage taps and traces."""

from .record import KINDS, StageRecord, make_record
from .recorder import Recording, Tap, record, recording, redirect, tap
from .trace import Trace
from .vocabulary import STAGES, VIRTUAL_STAGES, StageInfo, is_audio_stage, stage_info, stage_rank

__all__ = [
    "KINDS",
    "STAGES",
    "StageInfo",
    "VIRTUAL_STAGES",
    "StageRecord",
    "Recording",
    "Tap",
    "Trace",
    "is_audio_stage",
    "make_record",
    "record",
    "recording",
    "redirect",
    "stage_info",
    "stage_rank",
    "tap",
]
