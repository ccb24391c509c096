"""How fast each client computes and talks: :class:`ClientSpeeds`, and ``--client-speeds``.

A client's update takes ``samples x local_epochs x compute_s_per_sample`` seconds of
training plus ``model_bytes / down`` to fetch the model and ``model_bytes / up`` to send its
update back -- FedScale's cost model (Lai et al., ICML 2022), in seconds and bytes.

Where the speeds come from (``--client-speeds SPEC``):

- ``lognormal[:MU,SIGMA]``: FedScale's device model, a seconds-per-sample of
  ``max(1e-4, lognormal(MU, SIGMA)) x 5 ms`` per client (default ``1,0.6``, FedScale's
  ``get_completion_time_lognormal``);
- ``constant[:MS]``: every client ``MS`` milliseconds a sample (default 5, FedScale's
  ``mean_seconds_per_sample``);
- ``FILE`` or ``cycle:FILE``: FedScale's ``client_device_capacity`` layout,
  ``{id: {"computation": ms a sample of inference, "communication": kbps}}`` (JSON, CSV with
  a ``client_id,computation,communication`` header, or FedScale's pickle read as plain data).
  Training costs 3x inference (forward and backward, FedScale's ``augmentation_factor``);
  the link is symmetric. ``FILE`` names every client of the run by id (0 .. clients-1);
  ``cycle:FILE`` is a pool of device profiles dealt as FedScale deals them, client ``c`` the
  ``(c mod n)``-th profile in increasing id order.

Without a file the link is the same for every client: the Speedtest Global Index's median
mobile connection, September 2020 (FedScale's era) -- 35.96 Mbit/s down, 11.22 Mbit/s up.

Seeded: the lognormal draw is a function of the run's seed alone, made once for all clients,
so every process and every ``--workers`` gets the same speeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from .files import client_id, number, read_mapping

_SPEEDS = 0x5EED_0C10
#: FedScale's seconds a sample (``mean_seconds_per_sample``) and device-speed floor.
FEDSCALE_S_PER_SAMPLE = 0.005
FEDSCALE_MIN_DEVICE_SPEED = 1e-4
#: Training costs this many inferences (FedScale's ``augmentation_factor``).
TRAINING_PER_INFERENCE = 3.0
#: The default link: Speedtest Global Index, median mobile, September 2020, in bytes/s.
DEFAULT_DOWN_BYTES_PER_S = 35.96e6 / 8
DEFAULT_UP_BYTES_PER_S = 11.22e6 / 8
DEFAULT_LOGNORMAL = (1.0, 0.6)
CYCLE_PREFIX = "cycle:"


def _what() -> str:
    return f"{named('client_speeds')} file"


@dataclass(frozen=True, eq=False)
class ClientSpeeds:
    """Per-client speeds, one entry per client id (numpy arrays of float64)."""

    compute_s_per_sample: np.ndarray
    up_bytes_per_s: np.ndarray
    down_bytes_per_s: np.ndarray
    description: str = ""          # the spec, said in the banner and the summary

    def __post_init__(self):
        arrays = (self.compute_s_per_sample, self.up_bytes_per_s, self.down_bytes_per_s)
        if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1:
            raise ValueError("ClientSpeeds: the three arrays must be 1-D and of one length")
        for array in arrays:
            if not (np.all(np.isfinite(array)) and np.all(array > 0)):
                raise UserError("client speeds must be positive and finite")
            array.setflags(write=False)

    @property
    def clients(self) -> int:
        return len(self.compute_s_per_sample)

    def compute_seconds(self, client: int, samples: int, local_epochs: float) -> float:
        """Seconds ``client`` trains ``local_epochs`` passes over ``samples`` samples."""
        return samples * local_epochs * float(self.compute_s_per_sample[client])

    def transfer_seconds(self, client: int, model_bytes: int) -> float:
        """Seconds to download the model and upload an update of the same size."""
        return model_bytes * (1.0 / float(self.up_bytes_per_s[client])
                              + 1.0 / float(self.down_bytes_per_s[client]))

    def update_seconds(self, client: int, samples: int, local_epochs: float,
                       model_bytes: int) -> float:
        """Virtual seconds of one update of ``client``: download, train, upload."""
        return (self.compute_seconds(client, samples, local_epochs)
                + self.transfer_seconds(client, model_bytes))


def client_speeds(spec: str, clients: int, seed: int) -> ClientSpeeds:
    """The speeds ``--client-speeds SPEC`` gives ``clients`` clients under ``seed``."""
    if not isinstance(spec, str) or not spec.strip():
        raise UserError(f"{named('client_speeds')} must be lognormal:MU,SIGMA, constant:MS "
                        f"or a file, got {spec!r}")
    spec = spec.strip()
    name, _, arguments = spec.partition(":")
    if name == "lognormal":
        mu, sigma = _numbers(spec, arguments, 2, DEFAULT_LOGNORMAL)
        if sigma < 0:
            raise UserError(f"{named('client_speeds')} {spec}: SIGMA must be >= 0")
        rng = np.random.default_rng([seed, _SPEEDS])   # its own stream of the seed
        device = np.maximum(FEDSCALE_MIN_DEVICE_SPEED, rng.lognormal(mu, sigma, clients))
        return _with_default_link(device * FEDSCALE_S_PER_SAMPLE, spec)
    if name == "constant":
        (ms,) = _numbers(spec, arguments, 1, (FEDSCALE_S_PER_SAMPLE * 1000,))
        if not ms > 0:
            raise UserError(f"{named('client_speeds')} {spec}: milliseconds a sample must "
                            "be > 0")
        return _with_default_link(np.full(clients, ms / 1000.0), spec)
    cycle = spec.startswith(CYCLE_PREFIX)
    path = spec[len(CYCLE_PREFIX):] if cycle else spec
    if "." not in path and "/" not in path and not Path(path).exists():
        raise UserError(f"{named('client_speeds')} {spec!r}: unknown; expected "
                        "lognormal:MU,SIGMA, constant:MS or a file of device speeds "
                        "(FedScale's layout)")
    return speeds_from_file(path, clients, cycle)


def speeds_from_file(path: str, clients: int, cycle: bool) -> ClientSpeeds:
    """Speeds read from FedScale's ``client_device_capacity`` layout (see the module)."""
    data = read_mapping(path, _what())
    entries = dict(sorted((client_id(key, path, _what()), (key, value))
                          for key, value in data.items()))
    if not entries:
        raise UserError(f"{_what()} {path}: holds no clients")
    compute = np.empty(clients)
    link = np.empty(clients)
    ids = list(entries)
    if not cycle:
        unknown = [i for i in ids if i >= clients]
        missing = clients - (len(ids) - len(unknown))
        if unknown or missing:
            said = (f"names unknown client {unknown[0]} (the run has clients 0-{clients - 1})"
                    if unknown else f"lacks {missing} of the run's {clients} clients")
            raise UserError(f"{_what()} {path}: {said}; give every client 0-{clients - 1}, "
                            f"or cycle:{path} to deal its profiles to the clients in turn")
    for client in range(clients):
        key, entry = entries[ids[client % len(ids)]] if cycle else entries[client]
        compute[client] = (TRAINING_PER_INFERENCE
                           * number(entry, "computation", key, path, _what()) / 1000.0)
        link[client] = number(entry, "communication", key, path, _what()) * 1000.0 / 8.0
    return ClientSpeeds(compute, link, link.copy(),
                        f"{CYCLE_PREFIX if cycle else ''}{path}")


def _with_default_link(compute_s_per_sample: np.ndarray, spec: str) -> ClientSpeeds:
    clients = len(compute_s_per_sample)
    return ClientSpeeds(compute_s_per_sample, np.full(clients, DEFAULT_UP_BYTES_PER_S),
                        np.full(clients, DEFAULT_DOWN_BYTES_PER_S), spec)


def _numbers(spec: str, arguments: str, count: int, default: tuple) -> tuple:
    if not arguments:
        return default
    parts = arguments.split(",")
    try:
        values = tuple(float(part) for part in parts)
    except ValueError:
        values = ()
    if len(values) != count or not all(math.isfinite(v) for v in values):
        raise UserError(f"{named('client_speeds')} {spec}: expected {count} number"
                        f"{'s' if count > 1 else ''} after the colon")
    return values
