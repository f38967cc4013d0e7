"""``hvd.elastic`` (sparsecomm.torch.elastic): Horovod's elastic training is not
supported.  A sparsecomm job's trainers and daemons are fixed when it starts
(sparsecomm-run, or the launcher's ranks); a trainer that leaves fails the job's
operations naming it, and there is no driver that adds or removes hosts and restarts the
training function with its state restored.  Every name here (run, State, ObjectState,
TorchState, ElasticSampler, ...) raises NotImplementedError saying so, at the first use,
so that a script written for Horovod's elastic mode stops with the reason rather than
running as a fixed job it does not expect."""

_WHY = ("sparsecomm does not support Horovod's elastic training (hvd.elastic.%s): the "
        "trainers are fixed when the job starts; run the training function directly, "
        "with a fixed job (sparsecomm-run -n ...)")


def _refuse(what):
    raise NotImplementedError(_WHY % what)


def run(func):
    """Horovod's @hvd.elastic.run: refused (see the module doc)."""
    _refuse("run")


class _Refused:
    _what = "State"

    def __init__(self, *args, **kwargs):
        _refuse(self._what)


class State(_Refused):
    _what = "State"


class ObjectState(_Refused):
    _what = "ObjectState"


class TorchState(_Refused):
    _what = "TorchState"


class ElasticSampler(_Refused):
    _what = "ElasticSampler"


def __getattr__(name):
    """Any other of Horovod's elastic names: refused the same way."""
    if name.startswith("_"):  # hasattr() and introspection expect AttributeError
        raise AttributeError(name)
    _refuse(name)
