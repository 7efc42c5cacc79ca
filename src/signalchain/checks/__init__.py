"""Layer 3: checks judge traces and metrics and return `Finding`s. No training, no I/O."""
