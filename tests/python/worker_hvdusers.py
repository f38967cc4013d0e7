#!/usr/bin/python3
"""Run under sparsecomm-run on 2 and 3 ranks: training loops written as Horovod's users
and examples write them (``import sparsecomm.torch as hvd`` in place of horovod.torch),
run for several steps, so that what a single step does not show (a gradient's layout
written back, the state a second step finds) is checked.  Prints `CHECK <name> ok` or
`CHECK <name> FAIL <why>` per check; exits 1 if any failed."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402

import sparsecomm.torch as hvd  # noqa: E402
from checks import Checks  # noqa: E402

torch.set_num_threads(1)
hvd.init()
R, P = hvd.rank(), hvd.size()
check = Checks(sys.argv[1:])


def same_everywhere(tensors, what):
    """Every rank holds the same values (rank 0's, broadcast)."""
    for i, t in enumerate(tensors):
        t = t.detach()
        root = hvd.broadcast(t, 0, name="same.%s.%d" % (what, i))
        assert torch.equal(t, root), "%s: tensor %d differs from rank 0's by %g" % (
            what, i, (t - root).abs().max().item())


class Bag(torch.nn.Module):
    """A sparse embedding bag (nn.Embedding(sparse=True)) and a dense head."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 4, sparse=True)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.emb(x).mean(1))


@check
def sparse_gradients_over_steps():
    # Horovod writes a sparse gradient back sparse, under sparse_as_dense too: SparseAdam
    # (which refuses dense gradients) steps, and the gradients of the next steps
    # accumulate into the sparse gradients the previous step left (zero_grad keeping
    # them, set_to_none=False), with one and with two backward passes per step
    for sad in (False, True):
        for passes in (1, 2):
            tag = "bag.%d.%d" % (sad, passes)
            torch.manual_seed(0)
            m = Bag()
            hvd.broadcast_parameters(m.state_dict(), root_rank=0, prefix=tag + ".init.")
            opts = [torch.optim.SparseAdam([m.emb.weight], lr=0.05),
                    torch.optim.SGD(m.head.parameters(), lr=0.05)]
            dist = [hvd.DistributedOptimizer(o, named_parameters=[
                (n, p) for n, p in m.named_parameters() if any(p is q for q in
                                                                o.param_groups[0]["params"])],
                sparse_as_dense=sad, backward_passes_per_step=passes, prefix=tag + ".")
                for o in opts]
            gen = torch.Generator().manual_seed(100 + R)
            for step in range(3):
                for o in dist:
                    o.zero_grad(set_to_none=False)
                for _ in range(passes):
                    m(torch.randint(0, 50, (6, 5), generator=gen)).pow(2).mean().backward()
                for o in dist:
                    o.step()
                g = m.emb.weight.grad
                assert g.is_sparse and g.sparse_dim() == 1, (tag, step, g.layout)
                same_everywhere([g.to_dense()], "%s.grad%d" % (tag, step))
            same_everywhere(list(m.parameters()), tag)
            for o in dist:
                o.remove_hooks()


sys.exit(1 if check.failed else 0)
