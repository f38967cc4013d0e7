#!/usr/bin/python3
"""Run directly (not under sparsecomm-run): Horovod's Python launcher as its MNIST
example's ``--num-proc`` path calls it, ``horovod.run(train, args=(args,), np=N,
hosts=..., use_gloo=False, use_mpi=False, verbose=2)`` with a function of this script,
then its results, a failing function and refused options.  Prints `CHECK <name> ok` or
`CHECK <name> FAIL <why>` per check; exits 1 if any failed."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import horovod  # noqa: E402
from checks import Checks  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--num-proc", type=int, default=2)
parser.add_argument("--steps", type=int, default=3)


def train(args):
    """The example's train(args): init inside, a few DistributedOptimizer steps; returns
    what every rank computed, for the caller to compare."""
    import torch
    import horovod.torch as hvd
    hvd.init()
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * hvd.size())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    for _ in range(args.steps):
        opt.zero_grad()
        model(torch.randn(4, 3)).pow(2).mean().backward()
        opt.step()
    loss = hvd.allreduce(torch.tensor(float(hvd.rank())), name="avg_loss").item()
    return hvd.rank(), hvd.size(), loss, [p.detach().tolist() for p in model.parameters()]


def fails(rank_to_fail):
    import horovod.torch as hvd
    hvd.init()
    if hvd.rank() == rank_to_fail:
        raise KeyError("planned failure")
    return hvd.rank()


def main():
    args = parser.parse_args()
    n = args.num_proc
    check = Checks([])

    @check
    def results_in_rank_order():
        res = horovod.run(train, args=(args,), np=n, hosts="localhost:%d" % n,
                          use_gloo=False, use_mpi=False, verbose=2)
        assert isinstance(res, list) and len(res) == n, res
        assert [r[0] for r in res] == list(range(n)), [r[0] for r in res]
        assert all(r[1] == n for r in res), res
        assert all(r[2] == (n - 1) / 2 for r in res), [r[2] for r in res]
        assert all(r[3] == res[0][3] for r in res), "the ranks' weights differ: %s" % res

    @check
    def keyword_arguments_and_a_failing_rank():
        assert horovod.run(fails, kwargs={"rank_to_fail": -1}, np=n) == list(range(n))
        try:
            horovod.run(fails, args=(n - 1,), np=n)
        except RuntimeError as e:
            assert "rank %d raised KeyError" % (n - 1) in str(e), e
        else:
            raise AssertionError("a failing rank raised nothing")

    @check
    def options_without_equivalent_refused():
        for kw in ({"use_gloo": True}, {"min_np": 1}, {"network_interface": "lo"}):
            try:
                horovod.run(train, args=(args,), np=n, **kw)
            except ValueError as e:
                assert list(kw)[0] in str(e), e
            else:
                raise AssertionError("%s accepted" % kw)

    sys.exit(1 if check.failed else 0)


if __name__ == "__main__":
    main()
