"""BatchSpec: bad values are refused naming the field; frozen and picklable."""

from __future__ import annotations

import math
import pickle
from dataclasses import FrozenInstanceError

import pytest

from llm_assets.kernels.batching.spec import BatchSpec


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"seq_len": 1}, "seq_len"),
        ({"seq_len": 2.5}, "seq_len"),
        ({"layout": "ragged"}, "layout"),
        ({"length_buckets": 0}, "length_buckets"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"validation_fraction": -0.1}, "validation_fraction"),
        ({"validation_fraction": math.nan}, "validation_fraction"),
        ({"shuffle_buckets": 0}, "shuffle_buckets"),
        ({"seed": -1}, "seed"),
        ({"drop_remainder": "yes"}, "drop_remainder"),
    ],
)
def test_batch_spec_refuses_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        BatchSpec(**kwargs)


def test_batch_spec_is_frozen_and_picklable():
    spec = BatchSpec(layout="padded", seq_len=2, validation_fraction=0.0)
    assert pickle.loads(pickle.dumps(spec)) == spec
    with pytest.raises(FrozenInstanceError):
        spec.seq_len = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"overflow": "wrap"}, "overflow"),
        ({"pad_to": "max"}, "pad_to"),
        ({"batch_size": 0}, "batch_size"),
        ({"bucket_boundaries": (64, 32)}, "bucket_boundaries"),
        ({"bucket_boundaries": (2048,), "seq_len": 1024}, "bucket_boundaries"),
        ({"layout": "ragged"}, "layout"),
        ({"length_buckets": 0}, "length_buckets"),
    ],
)
def test_new_batch_spec_fields_are_validated(kwargs, field):
    with pytest.raises(ValueError, match=field):
        BatchSpec(**kwargs)
