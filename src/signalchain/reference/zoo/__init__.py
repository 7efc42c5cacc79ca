"""The clean-pipeline zoo: many clean pipelines, written in different conventions and settings,
on which signalchain must raise no error (`signalchain zoo`, docs/families.md).

Members live beside the beds, in the user layer: each is a bed (the reference, the HF MusicGen
bed, the symbolic bed) subclassed or wrapped the way a user's own code would be, and uses
signalchain only through its public API. Each member's docstring says why it is clean.

The zoo's protocol, as `signalchain zoo` reads it (any object with these will do):
    members() -> [{name, bed, spec, pretrained, tags, why}]   (spec: a pipeline a worker loads)
    fast() -> [names]                                          (a subset for CI)
    prepare(names, say) -> None                                (build what workers share: pretrained starts)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import datasets, hf, reference, symbolic  # noqa: F401  (importing registers the members)
from ._member import MEMBERS, Member
from .pretrained import PretrainSpec, pretrained_state

__all__ = ["MEMBERS", "Member", "FAST", "members", "fast", "prepare", "build", "pretrain_spec", "pretrained_state"]



def pretrain_spec(bed: str) -> PretrainSpec:
    """The pretrained start of `bed` (the name members give in `pretrained=`)."""
    return {"reference": reference.REF_PRETRAIN, "hf": hf.HF_PRETRAIN, "symbolic": symbolic.SYM_PRETRAIN}[bed]

#: A handful of members spanning the three beds and the trickiest conventions: decoder inputs
#: tapped as `tokens.pattern` (the issue's trap) on both codec beds, HF's labels on the reference
#: model, a pretrained start with LoRA, TSD, a relative-step Adafactor. CI runs these.
FAST: tuple[str, ...] = ("ref-input-as-pattern", "hf-input-as-pattern", "ref-labels-btk", "hf-ft-lora",
                         "sym-tsd", "sym-adafactor-relative")


def members() -> list[dict[str, Any]]:
    return [m.to_dict() for m in MEMBERS.values()]


def fast() -> list[str]:
    return list(FAST)


def build(name: str) -> Any:
    """The pipeline of member `name`."""
    if name not in MEMBERS:
        raise KeyError(f"unknown zoo member {name!r}; members: {', '.join(MEMBERS)}")
    return MEMBERS[name].make()


def prepare(names: Sequence[str], say: Callable[[str], None] | None = None) -> None:
    """Build (or find in the cache) the pretrained starts that `names` fine-tune, once, before
    workers start: each worker then loads them from disk."""
    for bed in dict.fromkeys(MEMBERS[n].pretrained for n in names if n in MEMBERS and MEMBERS[n].pretrained):
        pretrained_state(pretrain_spec(bed), say=say)
