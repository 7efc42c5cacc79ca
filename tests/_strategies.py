"""Hypothesis strategies shared by the tests."""

from __future__ import annotations

from hypothesis import strategies as st


def json_values(ints: int, text: int, keys: int, items: int, leaves: int) -> st.SearchStrategy:
    """Strict-JSON values: None, bools, integers within ±`ints`, finite floats, strings up to `text`
    characters, and lists/objects of up to `items` members (object keys up to `keys` characters)."""
    return st.recursive(
        st.none() | st.booleans() | st.integers(-ints, ints) | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=text),
        lambda kids: st.lists(kids, max_size=items) | st.dictionaries(st.text(max_size=keys), kids, max_size=items),
        max_leaves=leaves,
    )
