"""Layers whose kernels ``vmap`` cannot batch, rewritten for a cohort in ops it can.

``nn.LSTM`` runs one fused kernel per layer (oneDNN's ``mkldnn_rnn_layer`` on a CPU,
cuDNN's ``_cudnn_rnn`` on a GPU). ``vmap`` has no batching rule for either: on a CPU it
falls back to a Python loop over the clients, one kernel call each -- correct, but slow;
cuDNN's takes a list of weights, for which ``vmap`` cannot even build that loop, so it
fails. A cohort therefore trains a *stackable twin* of the model: the same modules,
parameters and buffers (shared, not copied, and named the same, so that
``functional_call`` reads the stacked ones), with each ``nn.LSTM`` replaced by
``StackableLSTM``, the same equations in matrix products and elementwise ops, which
``vmap`` turns into batched ones on any device.

LEAF's Shakespeare LSTM, one stacked gradient of 10 clients of 10 lines, one thread (2-core
VM, lightly loaded, 3 repeats): the loop over oneDNN's kernel 4.3-4.6 s, the twin 2.5-2.7
s, the ten clients one at a time 0.7-0.9 s. Step-by-step products do not beat one client's
fused kernel on a CPU, so ``auto`` trains recurrent models one at a time (``choice``); the
twin is what makes ``on`` right on every device, and the faster of the two stacked ways.

Its sums run in another order than the fused kernel's, so a stacked client's LSTM agrees
with the lone client's to float rounding, not bitwise (the tests hold it to 1e-5).
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import PackedSequence


class StackableLSTM(nn.Module):
    """``lstm``'s computation (PyTorch's gate order i, f, g, o; biases, layers, dropout
    between layers, both directions, projections, ``batch_first``) in ops ``vmap`` batches.
    It holds ``lstm``'s parameters under their names (``weight_ih_l0``, ...)."""

    def __init__(self, lstm: nn.LSTM):
        super().__init__()
        self.hidden_size, self.num_layers = lstm.hidden_size, lstm.num_layers
        self.proj_size, self.batch_first = lstm.proj_size, lstm.batch_first
        self.dropout, self.bias = lstm.dropout, lstm.bias
        self.directions = 2 if lstm.bidirectional else 1
        for name, param in lstm.named_parameters(recurse=False):
            self.register_parameter(name, param)

    def forward(self, input, hx=None):
        if isinstance(input, PackedSequence):
            raise TypeError("a PackedSequence cannot be stacked (its batch sizes differ "
                            "per step); pad the sequences")
        unbatched = input.dim() == 2
        if unbatched:
            input = input.unsqueeze(0 if self.batch_first else 1)
        x = input if self.batch_first else input.transpose(0, 1)        # [B, T, F]
        batch = x.shape[0]
        out_size = self.proj_size or self.hidden_size
        if hx is None:
            h0 = x.new_zeros(self.num_layers * self.directions, batch, out_size)
            c0 = x.new_zeros(self.num_layers * self.directions, batch, self.hidden_size)
        else:
            h0, c0 = (s.unsqueeze(1) if unbatched else s for s in hx)
        last_h, last_c = [], []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self.directions):
                index = layer * self.directions + direction
                out, h, c = self._run(x, h0[index], c0[index], layer, direction)
                outputs.append(out)
                last_h.append(h)
                last_c.append(c)
            x = outputs[0] if self.directions == 1 else torch.cat(outputs, dim=2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
        output = x if self.batch_first else x.transpose(0, 1)
        h_n, c_n = torch.stack(last_h), torch.stack(last_c)
        if unbatched:
            output = output.squeeze(0 if self.batch_first else 1)
            h_n, c_n = h_n.squeeze(1), c_n.squeeze(1)
        return output, (h_n, c_n)

    #: Tensors of hidden size a step keeps for backward, per sample, layer and direction:
    #: the gates and their sigmoid (4 each), g, c, tanh(c) and h.
    SAVED_PER_STEP = 12

    def activation_bytes(self, result) -> int:
        """What one client's forward pass keeps for backward, from its ``forward``'s
        result: a step's gates and states, for every step (``check`` counts a module's
        output only, a few percent of this)."""
        output = result[0]
        steps_by_batch = output.numel() // output.shape[-1]     # batch x sequence length
        return (steps_by_batch * self.num_layers * self.directions * self.SAVED_PER_STEP *
                self.hidden_size * output.element_size())

    def _run(self, x, h, c, layer: int, direction: int):
        """One layer in one direction over ``x`` ``[B, T, F]``: its outputs ``[B, T, H]``
        and last state. The input's projection for every step is one product up front;
        only the recurrent one runs step by step."""
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        weight_hh = getattr(self, "weight_hh" + suffix)
        bias_hh = getattr(self, "bias_hh" + suffix) if self.bias else None
        projection = getattr(self, "weight_hr" + suffix) if self.proj_size else None
        projected = F.linear(x, getattr(self, "weight_ih" + suffix),
                             getattr(self, "bias_ih" + suffix) if self.bias else None)
        H = self.hidden_size
        # unbind, not projected[:, t]: the gradient of an index is a zero tensor of the
        # whole input per step (quadratic in the length; 9x slower at 80 characters).
        steps = projected.unbind(1)
        outputs = []
        for step in (reversed(steps) if direction else steps):
            gates = step + F.linear(h, weight_hh, bias_hh)
            i, f, _, o = torch.sigmoid(gates).chunk(4, 1)   # g's sigmoid: unused
            g = torch.tanh(gates[:, 2 * H:3 * H])
            c = f * c + i * g
            h = o * torch.tanh(c)
            if projection is not None:
                h = F.linear(h, projection)
            outputs.append(h)
        if direction:
            outputs.reverse()
        return torch.stack(outputs, dim=1), h, c


def stackable(model: nn.Module) -> nn.Module:
    """``model`` itself where every module stacks as it is; else a twin that shares its
    parameters and buffers, each ``nn.LSTM`` a ``StackableLSTM``."""
    lstms = [name for name, m in model.named_modules() if type(m) is nn.LSTM]
    if not lstms:
        return model
    # The twin copies the modules' structure only: parameters and buffers are the model's.
    shared = {id(t): t for t in (*model.parameters(), *model.buffers())}
    twin = copy.deepcopy(model, memo=dict(shared))
    for name in lstms:
        parent, _, child = name.rpartition(".")
        owner = twin.get_submodule(parent) if name else None
        replacement = StackableLSTM(twin.get_submodule(name))
        if owner is None:
            return replacement
        setattr(owner, child, replacement)
    return twin
