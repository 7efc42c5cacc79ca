import pytest

from signalchain import PipelineError, StepOutput, UsageError, load_pipeline
from signalchain.pipeline import as_step_output, capabilities, missing_capability, validate_pipeline

TOY = "tests/toy_pipeline.py"


def test_load_from_file_with_factory_class_and_instance(tmp_path):
    assert load_pipeline(f"{TOY}:make").name == "toy"
    assert load_pipeline(f"{TOY}:ToyPipeline").name == "toy"
    f = tmp_path / "p.py"
    f.write_text(
        "import sys\nsys.path.insert(0, 'tests')\nfrom toy_pipeline import ToyPipeline\npipe = ToyPipeline('crop')\n"
    )
    assert load_pipeline(f"{f}:pipe").change == "crop"


def test_load_from_module():
    p = load_pipeline("toy_pipeline:make")
    assert p.name == "toy"
    assert {"decode", "config", "sample_rate"} <= capabilities(p)


def test_a_module_in_the_working_folder_is_found_as_python_finds_it(tmp_path):
    """`signalchain doctor my_pipeline:Pipe` beside my_pipeline.py: the console script's sys.path has
    no working folder, `python -m` has; the module is found either way."""
    import subprocess
    import sys
    from pathlib import Path

    toy = Path(TOY).resolve()
    spec = f"{toy}:make"
    (tmp_path / "mine.py").write_text(f"from signalchain import load_pipeline\npipe = load_pipeline({spec!r})\n")
    code = ("import os, sys; sys.path[:] = [p for p in sys.path if p not in ('', os.getcwd())]; "
            "from signalchain import load_pipeline; print(load_pipeline('mine:pipe').name)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "toy"


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(UsageError, match="has no ':attr'"):
        load_pipeline("toy_pipeline")
    with pytest.raises(PipelineError, match="no such file or folder"):
        load_pipeline("nowhere/p.py:x")
    with pytest.raises(PipelineError, match="has no attribute 'nope'"):
        load_pipeline(f"{TOY}:nope")
    with pytest.raises(PipelineError, match="cannot import module 'no_such_module_x'"):
        load_pipeline("no_such_module_x:p")
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('broken at import')\n")
    with pytest.raises(PipelineError, match="importing .* failed: RuntimeError: broken at import"):
        load_pipeline(f"{bad}:x")
    half = tmp_path / "half.py"
    half.write_text("class P:\n    name = 'p'\n    def step(self, m, b, t): pass\n")
    with pytest.raises(PipelineError, match="lacks golden_batch, build_model, build_optimizer"):
        load_pipeline(f"{half}:P")


def test_step_output_coercion():
    assert as_step_output(1.5).loss == 1.5
    out = as_step_output({"loss": 2.0, "logits": "L", "aux": 3})
    assert out.logits == "L" and out.extras == {"aux": 3}
    s = StepOutput(loss=1.0)
    assert as_step_output(s) is s
    with pytest.raises(PipelineError, match="without 'loss'"):
        as_step_output({"logits": 1})
    with pytest.raises(PipelineError, match="returned None"):
        as_step_output(None)


def test_missing_capability_is_an_info_finding(toy):
    assert missing_capability(toy, "decode", "inspect") is None
    f = missing_capability(toy, "generate", "checks.generation")
    assert f.severity.value == "info" and "has no generate" in f.message and "generate(model" in f.hint
    with pytest.raises(PipelineError):
        validate_pipeline(object())


def test_protocol_view_hides_configuration_and_fault_names():
    from signalchain.pipeline import ProtocolView
    from toy_pipeline import ToyPipeline

    p = ToyPipeline("crop")
    view = ProtocolView(p)
    assert view.name == "toy" and view.decode is not None and view.golden_batch(0)["captions"]
    for hidden in ("config", "change", "with_faults", "fault_catalogue"):
        with pytest.raises(AttributeError):
            getattr(view, hidden)
    assert "config" not in capabilities(view) and "decode" in capabilities(view)
    with pytest.raises(AttributeError, match="read-only"):
        view.name = "x"
