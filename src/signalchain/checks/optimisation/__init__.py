"""Optimisation judges: gradient reach and updates, training curves (overfit, LR sweep), stale predictions."""
