"""The symbolic bed's fault registry: the reference catalogue's `Fault` record and helpers, its own table."""

from __future__ import annotations

from ...faults._registry import FAMILIES as METHOD_FAMILIES
from ...faults._registry import BedCatalogue, Fault, patch_model

__all__ = ["CATALOGUE", "FAMILIES", "Fault", "fault", "apply_faults", "get_fault", "catalogue", "patch_model"]

#: The method's families, and the bed's own: what a tokenizer, a crop or an augmentation does to the notes.
FAMILIES = (*METHOD_FAMILIES, "symbolic")
_BED = BedCatalogue(__name__.rsplit(".", 1)[0], FAMILIES)
CATALOGUE = _BED.table
fault, get_fault, apply_faults, catalogue = _BED.fault, _BED.get_fault, _BED.apply_faults, _BED.catalogue
