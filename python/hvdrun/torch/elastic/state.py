"""TorchState: a model, an optimizer, an ElasticSampler and any picklable attributes,
committed to host memory, restored after a failed collective and broadcast from rank 0
after a reset."""
import copy

import torch

from hvdrun._elastic import ObjectState
from hvdrun.torch.elastic.sampler import ElasticSampler
from hvdrun.torch.functions import (broadcast_object, broadcast_optimizer_state,
                                    broadcast_parameters)
from hvdrun.torch.mpi_ops import rank


class StateHandler:
    """How one kind of attribute is saved, restored and synced."""

    def __init__(self, value):
        self.value = value
        self._saved = None

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        raise NotImplementedError(f"{type(self).__name__}.sync()")

    def set_value(self, value):
        self.value = value
        self.save()


class ModelStateHandler(StateHandler):
    def __init__(self, model):
        super().__init__(model)
        self.save()

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    def __init__(self, optimizer):
        super().__init__(optimizer)
        self.save()

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(StateHandler):
    def __init__(self, sampler):
        super().__init__(sampler)
        self.save()

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    """The (type, handler class) pairs TorchState picks handlers from, first match wins."""
    return _handler_registry


def set_handler_registry(registry):
    """Replaces the handler registry (to handle more types)."""
    global _handler_registry
    _handler_registry = registry


def _handler_for(value):
    for kind, handler in _handler_registry:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """The state of a PyTorch training loop. `model` and `optimizer` (and further models,
    optimizers and ElasticSamplers given by keyword) are saved through their state_dict()
    and synced with broadcast_parameters / broadcast_optimizer_state; every other keyword
    is a picklable attribute (epoch=0, batch=0, ...). All are attributes of the state."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                plain[name] = value
            else:
                handlers[name] = handler
        self._handlers = handlers
        for name, handler in handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers is not None and name in handlers and name in self.__dict__:
            handlers[name].set_value(value)
        super().__setattr__(name, value)
