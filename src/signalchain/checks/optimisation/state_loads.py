"""The checkpoint a `build_model` loads, against the model it loads into (`StateLoadMeasurement`).

`load_state_dict(strict=False)` returns what it skipped and raises nothing: a checkpoint whose keys
carry a wrapper's prefix (Lightning's `model.`, DDP's `module.`) loads no tensor at all and the
"fine-tune" starts from a random init. A partial load on purpose (adapters, one sub-module) matches
the keys it loads; here none match, while the keys differ only by a prefix.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ...findings import Finding
from ...records.optimisation import StateLoadMeasurement
from ..base import make

__all__ = ["judge_state_loads", "prefix_of"]

CHECK = "checks.state_loads"
LOADED = 0.1  # a load that matches less than this share of the model's tensors loads (nearly) nothing
EXPLAINED = 0.5  # a prefix that maps this share of the model's keys onto the checkpoint's names the cause


def prefix_of(own: list[str], given: list[str]) -> tuple[str, str, int]:
    """The prefix that turns checkpoint keys into the model's (("model.", "strip", n): strip it from
    the checkpoint; ("module.", "add", n): the model's keys carry it), and how many keys it maps."""
    mine, theirs = set(own), set(given)
    strip: Counter[str] = Counter()
    add: Counter[str] = Counter()
    for key in theirs:
        parts = key.split(".")
        for i in range(1, min(len(parts), 4)):
            if ".".join(parts[i:]) in mine:
                strip[".".join(parts[:i]) + "."] += 1
    for key in mine:
        parts = key.split(".")
        for i in range(1, min(len(parts), 4)):
            if ".".join(parts[i:]) in theirs:
                add[".".join(parts[:i]) + "."] += 1
    best = [(n, p, how) for how, c in (("strip", strip), ("add", add)) for p, n in c.most_common(1)]
    if not best:
        return "", "", 0
    n, p, how = max(best)
    return p, how, n


def _judge(call: dict[str, Any]) -> Finding | None:
    own, given = call.get("own") or [], call.get("given") or []
    if call.get("strict", True) or not own or not given:
        return None
    loaded = len(set(own) & set(given))
    if loaded >= LOADED * len(own):
        return None
    prefix, how, mapped = prefix_of(own, given)
    told = (f"build_model's `load_state_dict(strict=False)` into {call.get('module')} matched {loaded} of the "
            f"checkpoint's {len(given)} tensors ({len(own)} in the model): the model keeps its random init and "
            "the run trains from scratch")
    ev = dict(loaded=loaded, checkpoint_keys=len(given), model_keys=len(own), prefix=prefix or None,
              prefix_maps=mapped, example_checkpoint_key=sorted(given)[0], example_model_key=sorted(own)[0])
    if prefix and mapped >= EXPLAINED * len(own):
        fix = (f"strip it: `{{k.removeprefix({prefix!r}): v for k, v in state.items()}}`" if how == "strip" else
               f"add it, or load into the wrapped module (`model.{prefix.rstrip('.')}.load_state_dict(...)`)")
        where = ("every matching checkpoint key carries the prefix " if how == "strip" else
                 "the model's keys carry the prefix ")
        return make("model.not_pretrained", "error", "loss",
                    f"{told}; {where}{prefix!r} ({mapped} keys match once it is "
                    f"{'removed' if how == 'strip' else 'added'}, "
                    f"e.g. {sorted(given)[0]!r} against {sorted(own)[0]!r})", CHECK,
                    hint=f"{fix}, then load with strict=True so a mismatch raises instead of loading nothing "
                         "(a Lightning checkpoint's 'state_dict' holds the LightningModule's keys; DDP adds 'module.')",
                    **ev)
    return make("model.not_pretrained", "warning", "loss", told + " (the checkpoint's keys are not the model's: "
                f"e.g. {sorted(given)[0]!r} against {sorted(own)[0]!r})", CHECK,
                hint="check that the checkpoint belongs to this architecture and configuration, and load with "
                     "strict=True to see which keys differ", **ev)


def _named(named: dict[str, Any] | None) -> Finding | None:
    """The model's config names a local checkpoint, and (nearly) none of its tensors, or none of one
    sub-model's (MusicGen's decoder beside a loaded codec and text encoder), are that checkpoint's: built
    from the config (`from_config`, `Model(config)`), those weights never loaded. Training from scratch
    with a checkpoint's architecture does the same on purpose: a warning."""
    if not named or named["compared"] < 4:
        return None  # too few tensors of the checkpoint found in the model to say
    groups = named.get("groups") or {}
    cold = sorted(k for k, g in groups.items() if g["compared"] >= 4 and g["equal"] < LOADED * g["compared"])
    whole = named["equal"] < LOADED * named["compared"]
    if not whole and not cold:
        return None
    if whole or len(groups) <= 1:
        what = f"{named['equal']} of its {named['compared']} tensors there equal the checkpoint's"
    else:
        said = ", ".join(f"{k} {groups[k]['equal']} of {groups[k]['compared']}" for k in cold)
        warm = sorted(set(groups) - set(cold))
        what = (f"tensors equal to the checkpoint's: {said}" + (f" (while {', '.join(warm)} match it)" if warm
                                                                  else ""))
    return make("model.not_pretrained", "warning", "loss",
                f"the model's config comes from {named['path']} (config._name_or_path) but {what}: "
                f"{'the model was' if whole else ', '.join(cold) + ' was'} built from the config alone and starts "
                "from a random init", CHECK,
                hint="for a fine-tune, load the weights: `Model.from_pretrained(path)` (from_config / Model(config) "
                     "build the architecture only); training from scratch with that architecture is what this does",
                random_init=cold if not whole else sorted(groups), **named)


def judge_state_loads(m: StateLoadMeasurement | None) -> list[Finding]:
    if m is None or m.error:
        return []
    found = [f for f in (_judge(c) for c in m.calls) if f is not None]
    named = _named(m.named_checkpoint)
    return found + ([named] if named is not None and not found else [])
