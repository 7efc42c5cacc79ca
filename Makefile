# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Both create .venv when it is missing (with the [dev], [hf], [lightning], [symbolic] and [ray] extras: the HF MusicGen bed's, the trainer callbacks', the symbolic bed's and the Ray audit's tests run). torch==2.13.0 is installed first, on its own: it is the CPU
# wheel on this machine's disk, and a bare torch requirement would pull a multi-GB CUDA build.
# Set-up also installs FluidSynth and a General MIDI soundfont for the symbolic players where apt-get
# can run (root, or sudo without a password); elsewhere it says in one line that the players will use
# the additive fallback (tools/setup_fluidsynth.sh).

VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
SC     := $(VENV)/bin/signalchain
STAMP  := $(VENV)/.signalchain-setup
DEMO   ?= demo-out
PYTHON ?= python3

.PHONY: setup test demo docs screenshots bench real-bugs lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
	$(PIP) install -q torch==2.13.0 2>&1 | grep -v "is ignored" || true
	$(PIP) install -q -e '.[dev,hf,lightning,symbolic,ray]' 2>&1 | grep -v "is ignored" || true
	@$(PY) -c "import signalchain, torch; print('signalchain', signalchain.__version__, '· torch', torch.__version__)"
	@sh tools/setup_fluidsynth.sh
	@touch $(STAMP)

# Two pytest-xdist workers, whole files each (module fixtures are built once), one intra-op thread
# each: two workers of two threads on two cores fight for them (measured: 967 s with torch's default
# threads against 1262 s serial). `make test TEST_WORKERS=0` runs it serially.
TEST_WORKERS ?= 2
test: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# The main job on the bundled reference pipeline: capture its golden batch, inspect it (HTML with
# players), re-run it as the code is now (identical: exit 0), then re-run it with a crop bug
# injected, which `compare` must blame on the `crop` stage (exit 1 is the expected verdict there).
# Then the doctor: every family on the clean pipeline (no error: exit 0), and the flat-loss families
# on a pipeline whose gradients are cleared before the optimizer step (exit 1 is the verdict).
# Last, the symbolic bed's golden batch and its inspect page: a piano roll of each notes stage beside
# each caption, with a player of its rendering (FluidSynth and a GM soundfont, or the fallback).
demo: setup
	@mkdir -p $(DEMO)
	$(SC) capture --out $(DEMO)/golden --seed 0 --json $(DEMO)/capture.json
	$(SC) inspect $(DEMO)/golden --html $(DEMO)/inspect.html
	$(SC) compare $(DEMO)/golden --json $(DEMO)/compare.json --html $(DEMO)/compare.html
	$(SC) compare $(DEMO)/golden --fault crop_in_padding --json $(DEMO)/compare-fault.json \
		--html $(DEMO)/compare-fault.html || test $$? -eq 1
	$(SC) doctor --json $(DEMO)/doctor.json --html $(DEMO)/doctor.html
	$(SC) doctor --symptom flat-loss --fault zero_grad_before_step --json $(DEMO)/doctor-fault.json \
		--html $(DEMO)/doctor-fault.html || test $$? -eq 1
	$(SC) capture symbolic-bed --out $(DEMO)/symbolic-golden --seed 0 --json $(DEMO)/symbolic-capture.json
	$(SC) inspect $(DEMO)/symbolic-golden --html $(DEMO)/symbolic-inspect.html
	@echo "reports: $(DEMO)/inspect.html $(DEMO)/compare.html $(DEMO)/compare-fault.html $(DEMO)/doctor.html $(DEMO)/doctor-fault.html $(DEMO)/symbolic-inspect.html"

# The README's screenshots: the top of five demo pages at 1400 px (headless Chromium), and the doctor
# page's profile section that docs/families.md shows.
screenshots: demo
	$(PY) tests/report/_chromium.py demo-shots $(DEMO) docs/images
	$(PY) tests/report/_chromium.py section-shot $(DEMO)/doctor.html m-profile docs/images/doctor-profile.png

# The README's "real output" blocks, rewritten from real runs of the bundled pipelines (the rule that
# abridges each block is in the comment beside it); tests/test_readme.py fails when they differ.
docs: setup
	$(PY) tools/readme_blocks.py

# The quick benchmarks (ratios measured in one run); the others are run one by one (see benchmarks/).
bench: setup
	$(PY) benchmarks/bench_tap.py
	$(PY) benchmarks/bench_cli.py
	$(PY) benchmarks/bench_numerics.py
	$(PY) benchmarks/bench_doctor.py

# The real-bug bed: bugs users reported publicly, reproduced in their idiom, each with its thread's fix
# as a clean twin; prints the table (found / flagged / missed, twin, controls). Its fast subset runs
# in `make test` (tests/test_real_bugs.py).
real-bugs: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) benchmarks/real_bugs/run.py --workers 2 --json real-bugs.json

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

clean:
	rm -rf $(DEMO) .pytest_cache .ruff_cache
