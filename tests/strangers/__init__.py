"""The strangers' bed (issue 40, item 2): clean MusicGen fine-tuning scripts written in the conventions
of public ones (HF Trainer / Seq2SeqTrainer, Accelerate, Lightning, torchrun, plain loops), each with
signalchain added the way the README says. A clean script must get no error and no
`internal.check_failed`; a warning only where its user would change something (each script's
`ALLOWED` says which and why). `python tests/strangers/run_bed.py` prints the table."""
