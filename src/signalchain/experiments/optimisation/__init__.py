"""The optimisation family's experiments: gradient reach, updates, the LR sweep, overfitting one batch,
stale predictions, and the one update step every experiment runs (`_train.update_step`)."""
