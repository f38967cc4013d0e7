"""``hvd.elastic`` (sparsecomm.torch.elastic): Horovod's elastic training API, for a job
of fixed size.

A script written for Horovod's elastic mode (``@hvd.elastic.run`` on the training
function, a :class:`TorchState` holding the model, the optimizer and counters such as
the epoch, ``state.commit()`` every few batches, an :class:`ElasticSampler`) runs as it is
written, as Horovod runs it under a launcher that is given a fixed number of processes:
``run`` synchronises the state from rank 0 and calls the function once.  A sparsecomm
job's trainers and daemons are fixed when it starts (sparsecomm-run, or the launcher's
ranks): there is no driver that adds or removes hosts, so ``check_host_updates()`` never
raises :class:`HostsUpdatedInterrupt`, and a failed operation (a HorovodInternalError,
e.g. a trainer that left) restores the last committed state and is raised again instead
of restarting the function with fewer workers: the same ranks would fail the same way.

The state's synchronisation uses the package's broadcasts: a model's state_dict through
broadcast_parameters (its names under ``elastic.<attribute>.``), an optimizer's through
broadcast_optimizer_state, an LR scheduler's, a sampler's and the plain attributes
through broadcast_object.  Which torch objects a TorchState handles, and how, is Horovod's
handler registry (get_handler_registry, set_handler_registry, StateHandler and its
subclasses): a script registers a handler of its own for another type (a GradScaler, a
data loader's state) as it does with Horovod.  Horovod's modules of the package
(horovod.torch.elastic.state, .sampler) are this module."""

import copy
import functools
import math
import random
import sys

import sparsecomm as _sc
from sparsecomm import HorovodInternalError


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's signal that hosts were added or removed.  Never raised by a fixed job;
    defined so that code catching it runs."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


class _Saved:
    """What a State and a StateHandler define: save(), restore() and sync()."""

    def save(self):
        raise NotImplementedError("%s.save" % type(self).__name__)

    def restore(self):
        raise NotImplementedError("%s.restore" % type(self).__name__)

    def sync(self):
        raise NotImplementedError("%s.sync" % type(self).__name__)


class State(_Saved):
    """Horovod's elastic State: something a training function can commit, restore to its
    last commit, and synchronise from rank 0.  Subclasses define save(), restore() and
    sync()."""

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object or _sc.broadcast_object
        self._rank = get_rank or _sc.rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called after a reset (workers added or removed); a fixed job has
        none, so they are kept and called only by on_reset()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res=None):
        """What Horovod's driver calls when hosts change: a fixed job has no driver."""

    def commit(self):
        """Saves the state (restore() returns to it), then checks for host updates."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Horovod's raises HostsUpdatedInterrupt once hosts were added or removed; the
        hosts of a fixed job never change, so there is nothing to raise (nor to agree
        on with the other ranks)."""


class ObjectState(State):
    """Plain Python values given as keyword arguments, kept as attributes: save() records
    their values, restore() sets them back, sync() sets rank 0's saved values on every
    rank."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {k: getattr(self, k) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for k, v in self._saved_state.items():
            setattr(self, k, v)


def _torch():
    import torch
    return torch


try:  # Horovod's ElasticSampler is a torch Sampler (DataLoader and Lightning check)
    from torch.utils.data import Sampler as _Sampler
except ImportError:  # horovod.common.exceptions imported without torch
    _Sampler = object


class StateHandler(_Saved):
    """Horovod's handler of one torch object of a TorchState: ``handler_cls(value)``
    keeps the object as ``value``; save(), restore() and sync() are the subclass's.  A
    handler class registered with :func:`set_handler_registry` is used for the objects of
    its type, as Horovod's registry is."""

    def __init__(self, value):
        self.value = value

    def set_value(self, value):
        self.value = value
        self.save()

    def _sc_name(self):
        # the TorchState attribute it is held under names its broadcasts (two models of
        # one state must not share names)
        return "elastic.%s" % getattr(self, "_sc_attr", type(self).__name__)


class _StateDictHandler(StateHandler):
    """An object with state_dict() and load_state_dict(): saved as a deep copy of its
    state_dict, synchronised as rank 0's state_dict (broadcast_object)."""

    def __init__(self, value):
        super().__init__(value)
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        self.value.load_state_dict(_sc.broadcast_object(self.value.state_dict(), 0,
                                                        name=self._sc_name()))


class ModelStateHandler(_StateDictHandler):
    def sync(self):
        from sparsecomm import torch as hvd
        hvd.broadcast_parameters(self.value.state_dict(), root_rank=0,
                                 prefix=self._sc_name() + ".")


class OptimizerStateHandler(_StateDictHandler):
    def sync(self):
        from sparsecomm import torch as hvd
        hvd.broadcast_optimizer_state(self.value, root_rank=0, name=self._sc_name())


class LRSchedulerStateHandler(_StateDictHandler):
    """An LR scheduler's (ReduceLROnPlateau's too)."""


class SamplerStateHandler(_StateDictHandler):
    """An ElasticSampler's: its state_dict counts the samples every rank has processed
    (each rank records the same batches), so a commit needs no collective; restore and
    sync load it, which shares the samples left anew."""


def _schedulers():
    torch = _torch()
    return tuple(c for c in (getattr(torch.optim.lr_scheduler, "LRScheduler", None),
                             getattr(torch.optim.lr_scheduler, "_LRScheduler", None),
                             getattr(torch.optim.lr_scheduler, "ReduceLROnPlateau", None))
                 if c is not None)


_handler_registry = None  # [(type or tuple of types, handler class)], first match wins


def get_handler_registry():
    """Horovod's: the list of (type, handler class) a TorchState looks its keyword
    arguments up in, first match first."""
    global _handler_registry
    if _handler_registry is None:
        torch = _torch()
        _handler_registry = [(torch.nn.Module, ModelStateHandler),
                             (torch.optim.Optimizer, OptimizerStateHandler),
                             (_schedulers(), LRSchedulerStateHandler),
                             (ElasticSampler, SamplerStateHandler)]
    return _handler_registry


def set_handler_registry(registry):
    """Horovod's: replaces the registry (a list of (type, handler class)); TorchStates
    made afterwards use it."""
    global _handler_registry
    _handler_registry = registry


def _handler_for(attr, value):
    for kind, cls in get_handler_registry():
        if isinstance(value, kind):
            handler = cls(value)
            handler._sc_attr = attr
            return handler
    return None


class TorchState(ObjectState):
    """Horovod's TorchState: ``model`` and ``optimizer`` (and any keyword argument of a
    type in the handler registry: a torch module, optimizer, LR scheduler or
    ElasticSampler by default) are saved as deep copies of their state_dict and
    synchronised through the package's broadcasts (each by its handler); the other
    keyword arguments (epoch, batch, ...) are an ObjectState's.  Assigning one of the
    torch objects anew saves the new one."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, rest = {}, {}
        for k, v in kwargs.items():
            h = _handler_for(k, v)
            if h is None:
                rest[k] = v
            else:
                handlers[k] = h
        object.__setattr__(self, "_handlers", handlers)
        for k, h in handlers.items():
            object.__setattr__(self, k, h.value)
        super().__init__(bcast_object=_sc.broadcast_object, get_rank=_sc.rank, **rest)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)

    def save(self):
        for h in self._handlers.values():
            h.save()
        super().save()

    def restore(self):
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def sync(self):
        for h in self._handlers.values():
            h.sync()
        super().sync()


class ElasticSampler(_Sampler):
    """Horovod's ElasticSampler (Horovod 0.28's): the dataset's indices, shuffled by
    ``random.Random(seed + epoch)`` when ``shuffle``, less the first ``processed_num`` of
    them, are the samples left this epoch (``remaining_indices``); padded with their
    first ones to a multiple of the job's size, each rank's share (``__iter__``, of
    ``len()`` samples) is every size-th of them from its rank.  ``record_batch(i, n)``
    counts n samples processed on every rank (``processed_num`` grows by n * size); the
    count takes effect at the next ``reset()``, which ``load_state_dict`` (a TorchState's
    restore and sync) and ``set_epoch`` (an epoch with none processed) call, and which
    also takes the job's size and this rank anew.  ``state_dict()`` is
    ``{epoch, processed_num}``.

    Beyond Horovod's: ``get_indices(i, n)`` (the samples of batch i of this rank's last
    iteration) and ``record_indices(indices)`` (counts as record_batch of their number)
    of its earlier sampler; ``load_state_dict`` of that sampler's state (a set of
    ``processed_indices``) resumes after as many samples; and fewer samples left than
    half the ranks are repeated until every rank has ``len()`` of them, where Horovod's
    padding fails an assertion.  ``processed_indices`` is Horovod's attribute, an empty
    set it no longer fills."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.processed_indices = set()
        self.indices = []
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch ``epoch`` with none of its samples processed: call it at the end
        of an epoch, so that a resumed epoch does not process its samples again."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Every rank has processed a batch of ``batch_size`` samples."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        """Every rank has processed as many samples as ``indices`` holds."""
        self.processed_num += len(indices) * self.num_replicas

    def get_indices(self, batch_idx, batch_size):
        """The samples of batch ``batch_idx`` of this rank's last iteration."""
        start = batch_idx * batch_size
        return self.indices[start:start + batch_size]

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        if "processed_num" in state_dict:
            self.processed_num = state_dict["processed_num"]
        else:  # the earlier sampler's state: the set of the samples processed
            self.processed_num = len(state_dict["processed_indices"])
        self.reset()

    def reset(self):
        """Takes the job's size and this rank anew, and the samples left this epoch."""
        self.num_replicas = _sc.size()
        self.rank = _sc.rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:  # the same order on every rank
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        order = list(self.remaining_indices)
        while order and len(order) < self.total_size:  # pad by repeating from the start
            order += order[:self.total_size - len(order)]
        self.indices = order[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples


def run(func):
    """Horovod's ``@hvd.elastic.run``: ``func(state, *args, **kwargs)`` after
    ``state.sync()`` (every rank starts from rank 0's state).  A HorovodInternalError
    restores the last committed state and is raised again (a fixed job cannot go on
    without the rank that failed, where Horovod's elastic driver would restart the
    function with the workers left)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state.sync()
        try:
            return func(state, *args, **kwargs)
        except HorovodInternalError:
            state.restore()
            raise

    return wrapper


# Horovod's modules of its elastic package (horovod.torch.elastic.state, .sampler), which
# scripts import names from: both are this module
state = sampler = sys.modules[__name__]

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt", "StateHandler", "ModelStateHandler",
           "OptimizerStateHandler", "LRSchedulerStateHandler", "SamplerStateHandler",
           "get_handler_registry", "set_handler_registry", "state", "sampler"]
