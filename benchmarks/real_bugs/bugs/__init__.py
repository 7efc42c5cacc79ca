"""One module per real bug (see `real_bugs.bed`). `NAMES` lists them in file order."""

from __future__ import annotations

import pkgutil
from pathlib import Path

NAMES: list[str] = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)])
                          if not m.name.startswith("_"))
