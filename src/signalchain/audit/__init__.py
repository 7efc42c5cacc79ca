"""Layer 3: datasets without a model: manifests, files, captions, splits, leakage."""
