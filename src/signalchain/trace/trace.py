"""`Trace`: the ordered stage records of one run on one batch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import TraceError
from ..findings import Finding
from .record import StageRecord

__all__ = ["Trace"]


class Trace:
    """Stage records in the order they were tapped.

    A stage tapped twice in one recording keeps both: the second is named `stage#1`, the third
    `stage#2`, so that nothing is overwritten and the order stays the order of events.
    """

    def __init__(self, records: list[StageRecord] | None = None, problems: list[Finding] | None = None):
        self._records: list[StageRecord] = []
        self._by_name: dict[str, StageRecord] = {}
        self._counts: dict[str, int] = {}
        self.problems: list[Finding] = list(problems or [])
        for r in records or []:
            self.append(r)

    def next_name(self, stage: str) -> str:
        n = self._counts.get(stage, 0)
        return stage if n == 0 else f"{stage}#{n}"

    def append(self, record: StageRecord) -> None:
        if record.name in self._by_name:
            raise TraceError(f"stage {record.name!r} is already in this trace")
        base = record.name.split("#", 1)[0]
        self._counts[base] = self._counts.get(base, 0) + 1
        self._records.append(record)
        self._by_name[record.name] = record

    @property
    def records(self) -> list[StageRecord]:
        return list(self._records)

    def names(self) -> list[str]:
        return [r.name for r in self._records]

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[StageRecord]:
        return iter(self._records)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> StageRecord:
        try:
            return self._by_name[name]
        except KeyError:
            raise TraceError(
                f"no stage {name!r} in this trace; it has: {', '.join(self.names()) or 'nothing'}"
            ) from None

    def get(self, name: str) -> StageRecord | None:
        return self._by_name.get(name)

    def value(self, name: str) -> Any:
        """The full value of a stage; raises if the trace was recorded without values."""
        rec = self[name]
        if rec.value is None:
            raise TraceError(
                f"stage {name!r} was recorded without its value; record with values=True to keep it"
            )
        return rec.value

    def to_dict(self) -> dict[str, Any]:
        return {"stages": [r.header() for r in self._records], "problems": [p.to_dict() for p in self.problems]}

    def __repr__(self) -> str:
        return f"Trace({', '.join(self.names())})"
