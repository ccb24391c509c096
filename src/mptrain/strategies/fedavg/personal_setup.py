"""fedavg's side of ``--personalize`` before anything trains: its refusals (while the config
is built, and against the model and the machine before the run starts), where the clients'
personal state goes (``store_plan``) and the store itself, and why such a run trains its
clients one at a time."""

from __future__ import annotations

from pathlib import Path

from ...errors import UserError
from ...files import existing_parent, free_bytes
from ...errors import setting_name as named  # as the caller spelled the setting
from ...federated.personal.spec import parse_personalize
from ...report.words import human_bytes

#: Of /dev/shm's free space, what the personal state may take when --personal-memory is not
#: said (SCAFFOLD's variates take the same share).
SHM_SHARE = 0.5


def spec_of(config):
    """The run's ``PersonalizeSpec``, or None without --personalize."""
    value = config.fedavg.personalize
    return None if value is None else parse_personalize(value)


def personal_extra_epochs(config) -> int:
    """Local epochs a client trains per update beyond its FedAvg update's, as the virtual
    clock charges them (whole epochs, forward and backward): FedRep's head epochs before
    its body's, Ditto's personal model as many as the FedAvg update; FedPer and FedBN train
    within the FedAvg update, fine-tuning only when clients are scored."""
    spec = spec_of(config)
    if spec is None or spec.method not in ("fedrep", "ditto"):
        return 0
    from ...federated.personal.spec import DEFAULT_HEAD_EPOCHS

    f = config.fedavg
    return f.personal_head_epochs or DEFAULT_HEAD_EPOCHS if spec.method == "fedrep" \
        else f.local_epochs


def check_personalize_config(config) -> None:
    """Combinations that make no sense, in one line each."""
    f, spec = config.fedavg, spec_of(config)
    if spec is None:
        for name in ("personal_memory", "personal_head_epochs"):
            if getattr(f, name) is not None:
                raise UserError(f"{named(name)} is about {named('personalize')}; add "
                                f"{named('personalize')} METHOD or drop it")
        return
    if f.personal_head_epochs is not None and spec.method != "fedrep":
        raise UserError(f"{named('personal_head_epochs')} is fedrep's; {named('personalize')} "
                        f"{spec.method} has no head phase")
    if f.personal_memory is not None and not spec.trains:
        raise UserError(f"{named('personal_memory')} sizes the clients' personal state, and "
                        f"{named('personalize')} finetune keeps none (it only changes how "
                        "clients are scored)")
    if spec.layered and f.scaffold:
        raise UserError(f"{named('scaffold')}'s control variates span every parameter, and "
                        f"{named('personalize')} {spec.method} keeps some of them on each "
                        "client; choose one")


def check_personalize_run(config, data, model, plan, out_dir) -> None:
    """What this run cannot offer --personalize, before anything starts: per-client
    accuracy (a classifier), the layers it names (refused with the layers there are),
    one machine's shared memory for the personal state, and room for that state."""
    spec = spec_of(config)
    if spec is None:
        return
    from ...data.sources import CLASSIFICATION
    from ...federated.personal.layers import personal_layers

    if data is not None and data.task != CLASSIFICATION:
        raise UserError(f"{named('personalize')} scores each client's accuracy on its own "
                        "data, which needs a classifier")
    personal_layers(model, spec)   # refuses names the model does not have
    if not spec.trains:
        return
    if not plan.comm.shares_memory:
        raise UserError(f"{named('personalize')} {spec.method} keeps every client's personal "
                        "state where every worker reads it (one machine's shared memory); "
                        f"run on one machine, or use {named('personalize')} finetune:STEPS")
    store_plan(config, model, out_dir)   # refuses what would not fit


def store_plan(config, model, out_dir: Path | None):
    """The personal state's ``StorePlacement`` (None: fine-tuning keeps none), refused in
    one line when the part beyond the memory budget has no file to go to or no room."""
    spec = spec_of(config)
    if spec is None or not spec.trains:
        return None
    from ...federated.personal.layers import personal_layers, personal_numel
    from ...federated.personal.store import FLOAT_BYTES, STORE_FILE, place_rows

    f = config.fedavg
    width = personal_numel(model, personal_layers(model, spec))
    every_row = f.clients * width * FLOAT_BYTES
    if f.personal_memory is not None:   # more than every row needs is every row
        budget = int(min(f.personal_memory * 2**20, every_row))
    else:
        free = free_bytes("/dev/shm")
        budget = every_row if free is None else int(SHM_SHARE * free)
    placement = place_rows(f.clients, width, budget)
    if not placement.disk_rows:
        return placement
    what = (f"{named('personalize')} {spec.method} keeps {human_bytes(placement.disk_bytes)} "
            f"of personal state beyond {human_bytes(placement.memory_bytes)} in shared memory "
            f"({f.clients:,} clients x {width:,} floats)")
    if out_dir is None:
        raise UserError(f"{what}, and there is no {named('out')} folder to put it in; give "
                        f"{named('out')}, or more {named('personal_memory')}")
    free = free_bytes(existing_parent(out_dir))
    if free is not None and placement.disk_bytes > free:
        raise UserError(f"{what}: {human_bytes(free)} free under {named('out')} "
                        f"{Path(out_dir) / STORE_FILE}; give {named('out')} on a disk with "
                        f"room, more {named('personal_memory')}, or fewer {named('clients')}")
    return placement


def store_memory_bytes(config, model, out_dir: Path | None) -> int:
    """Shared memory the personal store takes (the memory preflight's share; 0 without one,
    or when ``store_plan`` refuses it -- the run's check says so, with the figures)."""
    try:
        placement = store_plan(config, model, out_dir)
    except UserError:
        return 0
    return placement.memory_bytes + config.fedavg.clients if placement is not None else 0


def make_store(config, model, plan, out_dir: Path | None):
    """The run's ``PersonalStore`` (None when nothing personal is kept), made by the parent."""
    placement = store_plan(config, model, out_dir)
    if placement is None:
        return None
    from ...federated.personal.store import STORE_FILE, PersonalStore

    path = Path(out_dir) / STORE_FILE if placement.disk_rows else None
    return PersonalStore(placement, path, shared=plan.comm.shares_memory)


def one_at_a_time_reason(config, model) -> str | None:
    """Why this run's clients must train one at a time with its --personalize (None: they
    may stack: fine-tuning, Ditto, and FedPer, FedRep and FedBN over parameters only --
    ``personal_cohorts``)."""
    spec = spec_of(config)
    if spec is None or not spec.trains or spec.method == "ditto":
        return None
    from ...federated.personal.layers import personal_layers

    params = sum(1 for _ in model.parameters())
    if all(i < params for i in personal_layers(model, spec).tensors):
        return None   # GroupNorm and LayerNorm have no running statistics
    return (f"{named('personalize')} {spec.method} keeps buffers (running statistics) on "
            "each client, which stacked cohorts never change")
