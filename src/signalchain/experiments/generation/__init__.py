"""The generation family's experiments: generate and judge (measure.py), data variety (data.py),
memorisation (memory.py), token and audio metrics (metrics.py), and the generation runs (runs.py)."""
