"""Stacked clients on a GPU: the same updates as on CPU, cohorts sized from the GPU's free
memory, a real fedavg run with --device cuda. Skipped without a CUDA device."""

import copy
import sys
from pathlib import Path

import pytest
import torch

import mptrain
from mptrain.data.sources import CLASSIFICATION
from mptrain.federated.cohorts.trainer import CohortTrainer, stacked_rows
from mptrain.federated.cohorts.batches import stack_batches
from mptrain.federated.cohorts.check import check_cohort
from mptrain.federated.cohorts.memory import GPU_SHARE, memory_budget

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cohort import BATCH, SETTINGS, data, small_model, streams  # noqa: E402,F401  (data: the fixture)
from fedavg_workload import RUN, make_data, make_model, make_test_data  # noqa: E402

pytestmark = pytest.mark.skipif(torch.cuda.device_count() == 0,
                                reason="needs a CUDA device")
CUDA = torch.device("cuda")


def cohort_on(device, data, settings):
    inputs, targets, clients = data
    model = small_model().to(device)
    trainer = CohortTrainer(model, CLASSIFICATION, settings, device)
    start = [p.detach() for p in model.parameters()]
    on_device = inputs.to(device), targets.to(device)
    result = trainer.train(stack_batches(streams(clients), BATCH),
                           lambda idx: (on_device[0][idx.to(device)],
                                        on_device[1][idx.to(device)]), start)
    return stacked_rows(result, model).cpu()




@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_a_cohort_on_the_gpu_trains_as_on_the_cpu(data, name):
    on_gpu = cohort_on(CUDA, data, SETTINGS[name])
    on_cpu = cohort_on(torch.device("cpu"), data, SETTINGS[name])
    torch.testing.assert_close(on_gpu, on_cpu, atol=1e-5, rtol=1e-4)


def test_cohorts_are_sized_from_the_gpus_free_memory(data):
    inputs, targets, _ = data
    trainer = CohortTrainer(small_model().to(CUDA), CLASSIFICATION, SETTINGS["adam"], CUDA)
    check = check_cohort(trainer, inputs[:BATCH], targets[:BATCH])
    assert check.vectorizes and check.client_bytes > 0
    free, _ = torch.cuda.mem_get_info(CUDA)
    budget = memory_budget(CUDA, sharers=2)
    assert 0 < budget <= free * GPU_SHARE / 2 * 1.05


@pytest.mark.timeout(180)
def test_a_gpu_fedavg_run_stacked_matches_one_at_a_time():
    initial = make_model()
    runs = {mode: mptrain.fit(copy.deepcopy(initial), make_data(), make_test_data(),
                              **{**RUN, "workers": 2, "clients_per_round": 6,
                                 "device": "cuda", "vectorize_clients": mode})
            for mode in ("off", "on")}
    assert runs["on"].summary["client_path"].startswith("vectorized x")
    assert runs["on"].summary["gpu_peak_bytes"] > 0
    for name, tensor in runs["on"].model.state_dict().items():
        torch.testing.assert_close(tensor.cpu(), runs["off"].model.state_dict()[name].cpu(),
                                   atol=1e-5, rtol=0)


@pytest.mark.timeout(180)
def test_lstm_clients_stacked_on_the_gpu_train_as_alone_with_cudnn():
    """The LSTM twin on a GPU (``stackable``: no cuDNN kernel under vmap, which could not
    batch it) against each client alone through cuDNN's fused LSTM."""
    from test_cohort_models import ATOL, RTOL, alone, model_data, together

    model, inputs, targets, clients = model_data("leaf-shakespeare-lstm")
    model = model.to(CUDA)
    inputs, targets = inputs.to(CUDA), targets.to(CUDA)
    clients = [c.to(CUDA) for c in clients]
    expected = alone(model, inputs, targets, clients)     # copies of the model, via cuDNN
    updates = together(model, inputs, targets, clients, device=CUDA)
    torch.testing.assert_close(updates, expected, atol=10 * ATOL, rtol=10 * RTOL)
