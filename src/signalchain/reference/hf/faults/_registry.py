"""The HF bed's fault registry: the reference catalogue's `Fault` record and helpers, its own table."""

from __future__ import annotations

from ...faults._registry import BedCatalogue, Fault, patch_model

__all__ = ["CATALOGUE", "Fault", "fault", "apply_faults", "get_fault", "catalogue", "patch_model"]

_BED = BedCatalogue(__name__.rsplit(".", 1)[0])
CATALOGUE = _BED.table
fault, get_fault, apply_faults, catalogue = _BED.fault, _BED.get_fault, _BED.apply_faults, _BED.catalogue
