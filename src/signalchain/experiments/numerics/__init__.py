"""The numerics family's experiments: the cheap trigger (measure.py), the locator replay (locate.py),
state scans and snapshots (state.py), and mixed precision (precision.py)."""
