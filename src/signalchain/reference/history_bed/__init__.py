"""The history bed: logs of short real training runs (HF Trainer, Lightning CSVLogger, a plain loop with
TensorBoard) with faults injected at known steps, and their clean twins, for `signalchain history`.

`catalogue.ENTRIES` lists them; `catalogue.score()` reads and judges each; `generate` remakes them.
"""
