"""Per-batch transforms (issue 56): ``--augment``'s batched image ops, the user's
``transform`` and their seeding, and the refusals made before training."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

import mptrain
import mptrain.cli
from mptrain.data.augment import augment, parse_augment, random_hflip, random_shift
from mptrain.data.batch_transform import BatchTransform, batch_seed
from mptrain.data.sources import digits, linreg
from mptrain.errors import UserError

from user_errors import fail


def test_augment_parses_its_ops_in_order():
    assert [str(op) for op in parse_augment("crop:4, hflip,shift:2")] == \
        ["crop:4", "hflip", "shift:2"]


@pytest.mark.parametrize("spec, said", [
    ("flip", "unknown or malformed 'flip'"), ("crop", "unknown or malformed 'crop'"),
    ("shift:0", "shift:N takes a whole number of pixels >= 1"),
    ("crop:x", "crop:N takes a whole number of pixels >= 1"), ("hflip:2", "'hflip:2'")])
def test_a_malformed_augment_is_refused_in_one_line(spec, said):
    with pytest.raises(UserError, match=said):
        parse_augment(spec)


def test_a_shift_moves_each_image_by_its_own_offset_and_fills_with_black():
    images = torch.arange(2 * 5 * 5, dtype=torch.float32).view(2, 1, 5, 5) + 10
    moved = random_shift(images, 2, torch.Generator().manual_seed(3))
    assert moved.shape == images.shape
    for image, out in zip(images, moved):
        # every output pixel is either the fill (the batch's smallest value) or the image's
        # pixel at one common offset
        offsets = {(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)
                   if all(out[0, y, x] == images.min() or
                          (0 <= y + dy < 5 and 0 <= x + dx < 5
                           and out[0, y, x] == image[0, y + dy, x + dx])
                          for y in range(5) for x in range(5))}
        assert offsets


def test_a_shift_keeps_channels_together_and_takes_images_without_channels():
    rgb = torch.rand(4, 3, 6, 6)
    rgb[0, 0, 0, 0] = -1   # the fill, the batch's smallest value, in channel 0 as well
    moved = random_shift(rgb, 1, torch.Generator().manual_seed(0))
    gray = random_shift(rgb[:, 0], 1, torch.Generator().manual_seed(0))
    assert torch.equal(moved[:, 0], gray)   # the same draws: channel 0 moved alike


def test_hflip_mirrors_about_half_the_images():
    images = torch.rand(200, 1, 4, 4)
    flipped = random_hflip(images, torch.Generator().manual_seed(1))
    mirrored = (flipped == images.flip(-1)).flatten(1).all(1)
    kept = (flipped == images).flatten(1).all(1)
    assert bool((mirrored | kept).all()) and 60 < int(mirrored.sum()) < 140


def test_augmenting_uint8_pixels_then_normalising_is_normalising_then_augmenting():
    # An image kept as uint8 and the same image kept normalised are the same picture after
    # augmentation: the fill is black in both.
    pixels = torch.randint(1, 256, (8, 1, 7, 7), dtype=torch.uint8)
    pixels[:, :, 0, 0] = 0
    ops = parse_augment("crop:2,hflip")

    def normalised(x):
        return x.float().mul_(1 / (255 * 0.3081)).sub_(0.1307 / 0.3081)

    a = normalised(augment(ops, pixels, torch.Generator().manual_seed(5)))
    b = augment(ops, normalised(pixels), torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


def test_no_two_ranks_steps_or_epochs_share_a_seed():
    seeds = {batch_seed(0, epoch, step, rank) for epoch in range(3) for step in range(20)
             for rank in range(4)}
    assert len(seeds) == 3 * 20 * 4


def test_a_transform_draws_from_the_generator_it_is_given():
    def noise(inputs, targets, generator):
        return inputs + torch.rand(inputs.shape, generator=generator), targets

    transform = BatchTransform(function=noise, name="noise")
    x, y = torch.zeros(3, 2), torch.zeros(3)
    first = transform.apply(x, y, (0, 1, 2, 0))[0]
    assert torch.equal(first, transform.apply(x, y, (0, 1, 2, 0))[0])
    assert not torch.equal(first, transform.apply(x, y, (0, 1, 2, 1))[0])


# -- in a run -----------------------------------------------------------------------------------

CALLS: list[tuple] = []


def recording_noise(inputs, targets, generator):
    CALLS.append(tuple(inputs.shape))
    return inputs + 0.1 * torch.randn(inputs.shape, generator=generator), targets


def drops_a_sample(inputs, targets, generator):
    return inputs[1:], targets[1:]


def gives_inputs_only(inputs, targets, generator):
    return inputs


def tiny_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 10))


def test_fit_transforms_each_training_batch_and_never_an_evaluation_batch():
    CALLS.clear()
    result = mptrain.fit(tiny_cnn(), digits(), strategy="single", epochs=1, batch_size=64,
                         steps_per_epoch=3, transform=recording_noise)
    # the preflight's check on the first batch, then three training batches (the test
    # set's 359 samples were scored untouched)
    assert CALLS == [(64, 1, 8, 8)] * (1 + 3)
    assert result.config.transform.endswith(":recording_noise")


def test_an_augmented_run_is_reproducible_and_differs_from_one_without():
    def run(**options):
        return mptrain.fit(tiny_cnn(), digits(), strategy="single", epochs=2,
                           steps_per_epoch=3, **options).model.state_dict()

    once, again, plain = run(augment="shift:1,hflip"), run(augment="shift:1,hflip"), run()
    assert all(torch.equal(once[k], again[k]) for k in once)
    assert not all(torch.equal(once[k], plain[k]) for k in once)


def test_augment_on_data_that_is_not_images_is_refused_before_training():
    with pytest.raises(UserError, match=r"augment hflip takes images .* samples are \[1\]"):
        mptrain.fit(nn.Linear(1, 1), linreg(), augment="hflip", epochs=1)


@pytest.mark.parametrize("function, said", [
    (drops_a_sample, "changed the batch size of the inputs from 64 to 63 on the first batch"),
    (gives_inputs_only, "returned a Tensor on the first batch; it must return a pair")])
def test_a_transform_that_breaks_the_batch_is_refused_before_training(function, said):
    with pytest.raises(UserError, match=said):
        mptrain.fit(tiny_cnn(), digits(), epochs=1, batch_size=64, transform=function)


def test_the_cli_refuses_augment_on_non_images_in_one_line(capsys):
    err = fail(["run", "--data", "linreg", "--augment", "crop:2", "--epochs", "1"], capsys)
    assert "--augment crop:2 takes images" in err


def test_the_cli_refuses_a_transform_that_is_not_an_import_string(capsys):
    err = fail(["run", "--transform", "my_pkg.aug.flip", "--epochs", "1"], capsys)
    assert "did you mean 'my_pkg.aug:flip'" in err


def test_the_cli_runs_a_transform_named_by_its_import_string(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text('augment = "hflip"\n')
    mptrain.cli.main(["run", "--strategy", "single", "--epochs", "1", "--steps-per-epoch", "2",
                      "--transform", f"{__file__}:recording_noise", "--config", str(config),
                      "--out", str(tmp_path / "out"), "--quiet"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["augment"] == "hflip"
    assert summary["transform"] == f"{__file__}:recording_noise"
