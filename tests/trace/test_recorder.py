import threading

import numpy as np
import pytest
import torch

from signalchain import TraceError, record, tap
from signalchain.trace import recording


def test_tap_outside_a_recording_returns_the_same_object():
    x = torch.randn(3)
    assert tap("tokens", x) is x
    assert tap("caption", "hello", anything=1) == "hello"
    assert recording() is None


def test_every_kind_of_value_is_recorded():
    with record(values=True) as trace:
        tap("audio.original", torch.randn(2, 2, 800) * 0.1, sample_rate=8000)
        tap("caption", ["a slow tune", ""])
        tap("caption.single", "just one")
        tap("metadata", [{"bpm": 90}, {"bpm": None}])
        tap("config", {"lr": 1e-3})
        tap("tokens", np.arange(12).reshape(1, 3, 4))
        tap("mask.padding", torch.ones(2, 5, dtype=torch.bool))
        tap("loss", torch.tensor(4.2, requires_grad=True) * 1.0)
        tap("lr", 3e-4)
        tap("step", 7)
        tap("embedding", torch.randn(2, 3, 4, dtype=torch.bfloat16))
        tap("stack", [torch.zeros(2), torch.ones(2)])
    kinds = {r.name: r.kind for r in trace}
    assert kinds == {"audio.original": "audio", "caption": "text", "caption.single": "text", "metadata": "json",
                     "config": "json", "tokens": "tensor", "mask.padding": "tensor", "loss": "scalar",
                     "lr": "scalar", "step": "scalar", "embedding": "tensor", "stack": "tensor"}
    assert trace["audio.original"].sample_rate == 8000
    assert trace["audio.original"].summary["audio"]["batch"] == 2
    assert trace["caption"].value == ["a slow tune", ""]
    assert trace["loss"].value == pytest.approx(4.2)
    assert trace["embedding"].dtype == "bfloat16" and trace["embedding"].value.dtype == np.float32
    assert trace["stack"].shape == [2, 2]
    assert [r.order for r in trace] == list(range(len(trace)))


def test_kept_values_are_private_copies():
    x = torch.zeros(4)
    with record(values=True) as trace:
        tap("tokens", x)
    x += 1  # training mutates tensors in place afterwards
    assert trace.value("tokens").tolist() == [0, 0, 0, 0]


def test_values_off_keeps_summaries_only():
    with record() as trace:
        tap("tokens", torch.arange(5))
    assert trace["tokens"].value is None and trace["tokens"].summary["max"] == 4
    with pytest.raises(TraceError, match="recorded without its value"):
        trace.value("tokens")


def test_values_and_stages_can_be_selected():
    with record(values={"loss"}, stages={"loss", "tokens"}) as trace:
        tap("tokens", torch.arange(3))
        tap("logits", torch.randn(3))
        tap("loss", 1.0)
    assert trace.names() == ["tokens", "loss"]
    assert trace["tokens"].value is None and trace["loss"].value == 1.0


def test_repeated_stage_names_are_numbered():
    with record() as trace:
        for i in range(3):
            tap("loss", float(i))
    assert trace.names() == ["loss", "loss#1", "loss#2"]


def test_a_failing_tap_becomes_a_finding_not_a_crash():
    class Weird:
        shape = (2,)

    with record() as trace:
        tap("tokens", torch.randn(2, 2), sample_rate="not a number")  # audio summary will choke
        tap("ok", 1.0)
    assert trace.names() == ["ok"]
    assert trace.problems and trace.problems[0].id == "trace.tap_failed" and trace.problems[0].stage == "tokens"


def test_strict_recording_raises():
    with pytest.raises((TypeError, ValueError)):
        with record(strict=True):
            tap("tokens", torch.randn(2, 2), sample_rate="not a number")


def test_recording_is_per_context_and_nested_recordings_shadow():
    seen = []

    def other_thread():
        seen.append(recording())

    with record() as outer:
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        with record() as inner:
            tap("a", 1.0)
        tap("b", 2.0)
    assert seen == [None]
    assert inner.names() == ["a"] and outer.names() == ["b"]
    assert recording() is None


def test_unknown_stage_lookup_names_the_stages_present():
    with record() as trace:
        tap("loss", 1.0)
    with pytest.raises(TraceError, match="no stage 'tokens' in this trace; it has: loss"):
        trace["tokens"]


def test_cuda_style_device_is_reported_for_cpu_tensors():
    with record() as trace:
        tap("x", torch.ones(2))
    assert trace["x"].device == "cpu"
