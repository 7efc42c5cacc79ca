"""The strangers' scripts, one public idiom each. Every module has `IDIOM` (what it is written like),
`ALLOWED` (finding id → why a user of that script wants the warning; empty by default), `SLOW`
(kept out of the every-run CI subset beyond one seed) and `main(seed, out, **faults) -> Run`; the
keyword arguments of `main` are the script's own knobs, which the can-fail tests turn into faults."""

SCRIPTS = [
    "seq2seq_dreambooth",
    "trainer_ignore_index",
    "trainer_accumulate_checkpointing",
    "trainer_bf16",
    "accelerate_parler",
    "lightning_module",
    "own_loop",
    "user_decoder_inputs",
    "stereo_trainer",
    "eval_generate",
    "dreambooth_recipe",
    "torchrun_seq2seq",
    "torchrun_own_ddp",
]
