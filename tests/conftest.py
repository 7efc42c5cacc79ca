import os
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]  # tests/integrations/test_pytest_plugin.py runs user sessions

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def toy():
    from toy_pipeline import ToyPipeline

    return ToyPipeline()
