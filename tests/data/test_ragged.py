"""Samples of different lengths (issue 56, ``--collate``): held as one flat tensor and
offsets, padded per batch with a mask, or collated by the user's function in the workers."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import mptrain
from mptrain.data.fingerprint import fingerprint
from mptrain.data.ragged import RaggedDataset, pad_to_longest, ragged_from
from mptrain.data.sources import digits
from mptrain.errors import UserError
from sequence_sets import BagOfTokens, Sequences


def test_pad_to_longest_pads_with_zero_and_masks_the_padding():
    data = ragged_from([torch.tensor([5, 6, 7]), torch.tensor([8]), torch.tensor([9, 4])],
                       torch.tensor([0, 1, 0]), "data")
    assert data.values.tolist() == [5, 6, 7, 8, 9, 4]
    assert data.offsets.tolist() == [0, 3, 4, 6]
    (tokens, mask), targets = data.batch(torch.tensor([1, 2]))
    assert tokens.tolist() == [[8, 0], [9, 4]]
    assert mask.tolist() == [[True, False], [True, True]]
    assert targets.tolist() == [1, 0]
    assert pad_to_longest(data.values, torch.tensor([0]), torch.tensor([3]))[0].tolist() == \
        [[5, 6, 7]]


def test_ragged_data_shares_memory_as_three_tensors_and_has_a_fingerprint():
    data = ragged_from([torch.tensor([1, 2]), torch.tensor([3])], torch.tensor([0, 1]), "d")
    assert not data.is_shared
    assert data.share_memory_().is_shared
    assert fingerprint(mptrain.data.sources.DataBundle(
        "x", data, None, "classification", 2, "m", None))["train"]["inputs"]["shape"] == [2, -1]


def test_sequences_of_different_lengths_train_padded_in_one_process_and_in_two():
    single = mptrain.fit(BagOfTokens(), Sequences(), collate="pad", strategy="single",
                         epochs=2, batch_size=8)
    assert single.config.collate == "pad"
    # hogwild probes the shared model's layout on a batch before its workers start
    hogwild = mptrain.fit(BagOfTokens(), Sequences(), collate="pad", strategy="hogwild",
                          workers=2, epochs=1, batch_size=8)
    assert hogwild.summary["train_samples"] == 48


def test_different_lengths_without_collate_are_refused_naming_the_fix():
    with pytest.raises(UserError, match="1-D sequences of different lengths: give collate "
                                        "pad"):
        mptrain.fit(BagOfTokens(), Sequences(), epochs=1)


def concatenating(sequences, targets):
    """A collate of the user's: every batch's tokens end to end, with the offsets."""
    lengths = torch.tensor([len(s) for s in sequences])
    tokens, mask = pad_to_longest(torch.cat(sequences), lengths.cumsum(0) - lengths, lengths)
    return (tokens, mask), targets


def forgets_the_targets(sequences, targets):
    return torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True)


def test_a_collate_of_the_users_runs_in_the_workers():
    result = mptrain.fit(BagOfTokens(), Sequences(), collate=concatenating, strategy="sync",
                         workers=2, epochs=1, batch_size=8)
    assert result.config.collate.endswith(":concatenating")


def test_a_collate_that_returns_the_wrong_types_is_refused_before_training():
    with pytest.raises(UserError, match="forgets_the_targets returned Tensor on the first "
                                        "batch; it must return \\(inputs, targets\\)"):
        mptrain.fit(BagOfTokens(), Sequences(), collate=forgets_the_targets, epochs=1)


def test_collate_takes_one_dimensional_samples_only():
    with pytest.raises(UserError, match=r"collate pad takes 1-D samples .* \[1, 8, 8\]"):
        mptrain.fit(nn.Linear(64, 10), digits(), collate="pad", epochs=1)


def test_fixed_length_sequences_are_held_for_the_collate_too():
    class Fixed(Sequences):
        def __getitem__(self, index):
            tokens, label = self.items[index]
            return torch.cat([tokens, torch.zeros(6 - len(tokens), dtype=tokens.dtype)])[:6], \
                label

    result = mptrain.fit(BagOfTokens(), Fixed(), collate="pad", epochs=1, batch_size=8)
    assert result.summary["train_samples"] == 48


def test_a_ragged_set_answers_as_a_stacked_one():
    data = ragged_from([torch.tensor([1.0, 2.0]), torch.tensor([3.0])], torch.tensor([0, 1]),
                       "d")
    assert isinstance(data, RaggedDataset) and data.input_shape == (2,) and len(data) == 2
    assert data[1][0].tolist() == [3.0]


def test_a_resume_checks_the_sequences_fingerprint(tmp_path):
    mptrain.fit(BagOfTokens(), Sequences(), collate="pad", epochs=1, batch_size=8,
                out=tmp_path, checkpoint_every=1)
    resumed = mptrain.fit(BagOfTokens(), Sequences(), collate="pad", epochs=2, batch_size=8,
                          out=tmp_path, resume=tmp_path)
    assert resumed.summary["rounds_done"] == 2
    with pytest.raises(UserError, match=r"the training inputs have shape \(40, -1\), the "
                                        r"checkpoint's \(48, -1\)"):
        mptrain.fit(BagOfTokens(), Sequences(40), collate="pad", epochs=3, batch_size=8,
                    out=tmp_path, resume=tmp_path)


def drops_the_mask(inputs, targets, generator):
    tokens, mask = inputs
    keep = torch.rand(mask.shape, generator=generator) < 0.9   # token dropout, per batch
    return (tokens, mask & keep), targets


def test_a_transform_takes_collated_batches():
    result = mptrain.fit(BagOfTokens(), Sequences(), collate="pad", transform=drops_the_mask,
                         epochs=1, batch_size=8)
    assert result.summary["transform"].endswith(":drops_the_mask")


def test_fedavg_clients_train_on_collated_sequences_and_the_test_set_is_scored():
    result = mptrain.fit(BagOfTokens(), Sequences(), Sequences(16), collate="pad",
                         strategy="fedavg", rounds=1, clients=4, clients_per_round=2,
                         batch_size=8)
    assert result.test_accuracy is not None
