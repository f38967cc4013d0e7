"""Autograd through the collectives of sparsecomm.torch, with Horovod's backward rules
(horovod/torch/mpi_ops.py): a collective given a tensor that requires a gradient (with
grad mode on) runs inside a torch.autograd.Function whose backward is another collective:

* allreduce and grouped_allreduce: the gradient allreduced with the same op, average and
  scale factors (a grouped allreduce for a group);
* allgather and grouped_allgather: the gradient averaged across the ranks, of which each
  rank takes the rows its own input gave (the row counts gathered again);
* broadcast: the gradient averaged across the ranks, kept on the root, zero elsewhere;
* alltoall: the gradient sent back by an alltoall with the splits received;
* reducescatter and grouped_reducescatter: the gradient (times the set's size for Sum,
  times the scale factors) allgathered back into every rank's rows.

The backward collectives are unnamed (the unnamed buffers' rule in the sparsecomm module
doc): every rank runs the same backward, so they meet.  A process set given to the
forward is the backward's too.  The forward itself is the plain collective (no gradient
is recorded inside it)."""

import torch

import sparsecomm as _sc


def wanted(tensor):
    """Whether a collective of ``tensor`` is recorded for autograd: a dense torch tensor
    that requires a gradient, with grad mode on."""
    return (isinstance(tensor, torch.Tensor) and tensor.requires_grad and
            not tensor.is_sparse and torch.is_grad_enabled())


class _Collective(torch.autograd.Function):
    """One tensor in, one out: forward run(tensor), backward back(gradient)."""

    @staticmethod
    def forward(ctx, tensor, run, back):
        ctx.back = back
        return run(tensor)

    @staticmethod
    def backward(ctx, grad):
        return ctx.back(grad.contiguous()), None, None


class _Alltoall(torch.autograd.Function):
    """forward run(tensor) -> (received, received splits), the splits not differentiable;
    backward back(gradient, received splits)."""

    @staticmethod
    def forward(ctx, tensor, run, back):
        out, recv = run(tensor)
        ctx.back, ctx.recv, ctx.rows = back, recv, tensor.shape[0] if tensor.dim() else 0
        ctx.mark_non_differentiable(recv)
        return out, recv

    @staticmethod
    def backward(ctx, grad, _splits_grad):
        g = ctx.back(grad.contiguous(), ctx.recv)
        if g.dim() and g.shape[0] < ctx.rows:  # rows the splits left unsent: no gradient
            g = torch.cat([g, g.new_zeros((ctx.rows - g.shape[0],) + tuple(g.shape[1:]))])
        return g, None, None


class _Grouped(torch.autograd.Function):
    """A list in, a list out: forward run(tensors), backward back(gradients)."""

    @staticmethod
    def forward(ctx, run, back, *tensors):
        ctx.back = back
        return tuple(run(list(tensors)))

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(ctx.back([g.contiguous() for g in grads]))


def collective(tensor, run, back):
    return _Collective.apply(tensor, run, back)


def alltoall(tensor, run, back):
    return _Alltoall.apply(tensor, run, back)


def grouped(tensors, run, back):
    return list(_Grouped.apply(run, back, *tensors))


def own_rows(grads, rows, process_set, timeout):
    """This rank's rows of each allgather's gradient in ``grads`` (``rows[i]`` rows of
    ``grads[i]``): the row counts are gathered, all in one allgather (in set-rank
    order), to find where each rank's start."""
    counts = _sc.allgather(torch.tensor([[int(r) for r in rows]], dtype=torch.int64), None,
                           process_set, timeout=timeout, _kind="allgather.counts")
    me = _sc.process_sets_.scope(_sc._need(), process_set, "allgather").rank
    before = counts[:me].sum(0)
    return [g.narrow(0, int(start), int(r)) for g, start, r in zip(grads, before, rows)]
