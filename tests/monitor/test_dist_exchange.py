"""Parameter hashes: exact (one ulp apart differs), shape- and dtype-aware, device-free."""

from __future__ import annotations

import torch

from signalchain.monitor._dist_exchange import param_hashes, sequence_number


def test_equal_bytes_equal_hash_and_one_ulp_differs() -> None:
    a = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    b = a.clone()
    assert param_hashes([a]) == param_hashes([b])
    b[2, 3] = torch.nextafter(b[2, 3], torch.tensor(float("inf")))
    assert param_hashes([a]) != param_hashes([b])
    assert all(0 <= h < 2**63 for h in param_hashes([a, b]))


def test_shape_and_dtype_are_part_of_the_hash() -> None:
    a = torch.zeros(6)
    assert len(set(param_hashes([a, a.reshape(2, 3), a.to(torch.float64), a.to(torch.bfloat16)]))) == 4
    assert len(param_hashes([torch.zeros(0), torch.tensor(1.0)])) == 2  # empty and 0-d tensors


def test_hash_of_a_parameter_that_requires_grad() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    assert param_hashes([p]) == param_hashes([torch.ones(3)])


class _NoSeq:
    pass


def test_sequence_number_unknown_without_the_method() -> None:
    assert sequence_number(_NoSeq()) == -1
