"""DistributedOptimizer: Horovod's optimizer wrapper, reducing gradients across ranks
while backward still runs.

How gradients travel (docs/python.md has the longer story):
- At construction the parameters that require gradients are cut into buckets, in
  reverse registration order (the order backward usually produces them), each bucket
  one device and one dtype and at most HOROVOD_FUSION_THRESHOLD bytes (default 16 MiB).
- A hook on each parameter's gradient accumulator (as Horovod's) marks the gradient
  ready. A bucket is submitted, as one fused allreduce of a flat copy of its gradients,
  once all its gradients are ready AND every earlier bucket has been submitted. So the
  ranks submit the same collectives in the same order whatever order autograd runs the
  hooks in, and libhvdrun, which runs collectives in submission order, never deadlocks.
- synchronize() (called by step()) submits what is left (a parameter without a gradient
  contributes zeros, as in Horovod), waits, and copies the results into the gradients.
- A sparse gradient (nn.Embedding(sparse=True)) leaves its bucket's fused allreduce and
  is gathered on its own (hvdrun/torch/sparse.py), right after its bucket; with
  sparse_as_dense it is made dense and fused like any other, then made sparse again.
"""
import os
import threading
import warnings
from contextlib import contextmanager

import torch

from hvdrun import _job, _lib
from hvdrun.torch import mpi_ops
from hvdrun.torch.compression import Compression
from hvdrun.torch.mpi_ops import Average, HorovodInternalError, global_process_set
from hvdrun.torch.sparse import apply_sparse_gradient, sparse_allreduce_async

_DEFAULT_FUSION_BYTES = 16 << 20

_TOO_MANY_PASSES = ("hvdrun.torch.DistributedOptimizer: a parameter's gradient was "
                    "produced by more backward passes than backward_passes_per_step "
                    "before step(); raise backward_passes_per_step to accumulate that "
                    "many passes locally, or call step() after each one")


def fusion_threshold():
    """Bytes per fused allreduce: HOROVOD_FUSION_THRESHOLD when set (0 reduces each
    gradient on its own), else 16 MiB."""
    value = os.environ.get("HOROVOD_FUSION_THRESHOLD")
    if value is None or value == "":
        return _DEFAULT_FUSION_BYTES
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"HOROVOD_FUSION_THRESHOLD={value!r} is not a number of bytes") from None
    if n < 0:
        raise ValueError(f"HOROVOD_FUSION_THRESHOLD={value!r} must be >= 0")
    return n


class _Bucket:
    __slots__ = ("params", "numel", "device", "dtype", "ready", "flat", "sent", "ctx",
                 "handle", "stream", "fused", "sparse")

    def __init__(self, device, dtype):
        self.params = []
        self.numel = 0
        self.device = device
        self.dtype = dtype
        self.ready = 0
        self.flat = None  # the fused gradients, allocated once
        self.sent = None  # what was reduced (flat, or its compressed form)
        self.ctx = None
        self.handle = None
        self.stream = None
        self.fused = None  # the params in `flat` this step (all but the sparse ones)
        self.sparse = []  # (param, sparse handle) of the sparse gradients this step


class _Reducer:
    """The buckets of one DistributedOptimizer and the state of the current step."""

    def __init__(self, params, names, compression, op, prescale, postscale, passes,
                 sparse_as_dense=False, process_set=global_process_set):
        self.process_set = process_set  # the ranks reduced among
        self.ps = mpi_ops._check_process_set(process_set, "DistributedOptimizer")
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.sparse_dims = {}  # param -> sparse_dim of the sparse gradients it produced
        self.op = op
        self.prescale = prescale
        self.postscale = postscale
        self.passes = passes
        self.names = names
        self.lock = threading.Lock()
        limit = fusion_threshold()
        self.buckets = []
        self.bucket_of = {}
        bytes_in = 0
        for p in reversed(params):
            b = self.buckets[-1] if self.buckets else None
            nbytes = p.numel() * p.element_size()
            if (b is None or b.device != p.device or b.dtype != p.dtype
                    or (b.params and bytes_in + nbytes > limit)):
                b = _Bucket(p.device, p.dtype)
                self.buckets.append(b)
                bytes_in = 0
            b.params.append(p)
            b.numel += p.numel()
            bytes_in += nbytes
            self.bucket_of[p] = b
        for b in self.buckets:
            if b.dtype not in mpi_ops._NATIVE:
                raise NotImplementedError(
                    f"hvdrun.torch.DistributedOptimizer: parameters of {b.dtype} "
                    f"({names.get(b.params[0])}) are not supported; use float16/32/64 or "
                    "bfloat16 parameters")
            mpi_ops._device_of(b.params[0], "DistributedOptimizer")
        self.delay = {p: passes for p in params}
        self.next = 0  # first bucket not yet submitted
        self.active = False  # a backward pass touched the gradients since the last step

    def set_passes(self, passes):
        with self.lock:
            self.passes = passes
            for p in self.delay:
                self.delay[p] = passes

    def hook(self, p):
        with self.lock:
            if self.delay[p] <= 0:
                raise AssertionError(_TOO_MANY_PASSES)
            self.active = True
            self.delay[p] -= 1
            if self.delay[p] == 0:
                self.bucket_of[p].ready += 1
                self._submit_ready()

    def _submit_ready(self):
        while self.next < len(self.buckets):
            b = self.buckets[self.next]
            if b.ready < len(b.params):
                return
            self._submit(b)
            self.next += 1

    def _submit(self, b):
        grads = []
        b.fused = []
        for p in b.params:
            if p.grad is None:
                p.grad = _empty_gradient(p, self.sparse_dims.get(p))
            g = p.grad
            if g.is_sparse:
                g = p.grad = self._agreed_layout(p, g)
                if not self.sparse_as_dense:
                    b.sparse.append(p)
                    continue
                g = g.to_dense()
            b.fused.append(p)
            grads.append(g.reshape(-1))
        self._submit_dense(b, grads)
        b.sparse = [(p, sparse_allreduce_async(p.grad, self.names.get(p), self.op,
                                               self.process_set))
                    for p in b.sparse]

    def _agreed_layout(self, p, g):
        """`g`, or an empty sparse gradient of the layout `p`'s gradients had before: a
        gradient zeroed by zero_grad() and left untouched by backward on this rank has
        every dimension sparse, while the others' have their usual layout (an embedding's:
        rows sparse, columns dense), and the ranks must gather alike."""
        known = self.sparse_dims.get(p)
        if g._nnz() > 0:
            self.sparse_dims[p] = g.sparse_dim()
        elif known is not None and g.sparse_dim() != known:
            return _empty_gradient(p, known)
        return g

    def _submit_dense(self, b, grads):
        if not grads:
            return
        if b.flat is None:
            b.flat = torch.empty(b.numel, dtype=b.dtype, device=b.device)
        flat = b.flat[:sum(g.numel() for g in grads)]
        torch.cat(grads, out=flat)
        sent, ctx = self.compression.compress(flat)
        # libhvdrun scales a host bucket (as Horovod, the compressed one); a CUDA bucket's
        # factors are applied here.
        if sent.is_cuda and self.prescale != 1.0:
            sent.mul_(self.prescale)
        if sent.dtype not in mpi_ops._NATIVE:
            raise NotImplementedError(
                f"hvdrun.torch.DistributedOptimizer: the compression produced {sent.dtype}, "
                "which libhvdrun cannot reduce")
        b.stream = torch.cuda.current_stream(sent.device) if sent.is_cuda else None
        b.handle = mpi_ops._submit_allreduce(sent, sent, mpi_ops._NATIVE[sent.dtype], self.op,
                                            "DistributedOptimizer", prescale=self.prescale,
                                            postscale=self.postscale, ps=self.ps)
        b.sent, b.ctx = sent, ctx

    def synchronize(self):
        with self.lock:
            for b in self.buckets[self.next:]:
                b.ready = len(b.params)
            self._submit_ready()
        lib = _lib.lib()
        error = None
        for b in self.buckets:
            if b.handle is not None and lib.hvdrun_wait(b.handle) != 0 and error is None:
                error = _lib.last_error()
            b.handle = None
            error = _wait_sparse(b, error)
        if error is not None:
            self.reset()
            raise HorovodInternalError(error)
        for b in self.buckets:
            for p, reduced in b.sparse:
                apply_sparse_gradient(p.grad, reduced)
            if b.sent is None:
                continue
            if b.stream is not None:
                current = torch.cuda.current_stream(b.device)
                if current != b.stream:
                    current.wait_stream(b.stream)
            out = self.compression.decompress(b.sent, b.ctx)
            if b.sent.is_cuda and self.postscale != 1.0:
                out.mul_(self.postscale)
            offset = 0
            for p in b.fused:
                n = p.numel()
                if p.grad.is_sparse:  # sparse_as_dense
                    apply_sparse_gradient(p.grad, out[offset: offset + n].view(p.shape))
                else:
                    p.grad.copy_(out[offset: offset + n].view_as(p.grad))
                offset += n
        self.reset()

    def reset(self):
        # A bucket still in flight (load_state_dict() after an aborted backward) is waited
        # for, whatever its outcome, before its buffer can be refilled.
        lib = _lib.lib()
        for b in self.buckets:
            if b.handle is not None:
                lib.hvdrun_wait(b.handle)
            _wait_sparse(b, None)
            b.ready = 0
            b.sent = b.ctx = b.handle = b.stream = b.fused = None
            b.sparse = []
        for p in self.delay:
            self.delay[p] = self.passes
        self.next = 0
        self.active = False


def _empty_gradient(p, sparse_dim):
    """The gradient a parameter without one contributes: zeros, sparse with no entries
    when the parameter has produced sparse gradients before (so that every rank still
    submits the same collectives for it)."""
    if sparse_dim is None:
        return torch.zeros_like(p, memory_format=torch.contiguous_format)
    indices = torch.empty((sparse_dim, 0), dtype=torch.int64, device=p.device)
    values = p.new_empty((0,) + tuple(p.shape[sparse_dim:]))
    return torch.sparse_coo_tensor(indices, values, p.shape)


def _wait_sparse(b, error):
    """Waits for the sparse gradients of bucket `b`, replacing each handle by its result;
    returns `error`, or the first failure when `error` is None."""
    done = []
    for p, h in b.sparse:
        try:
            done.append((p, h() if callable(h) else h))
        except HorovodInternalError as e:
            error = error or str(e)
    b.sparse = done
    return error


class _DistributedOptimizer(torch.optim.Optimizer):
    # The methods below are copied into a class derived from the wrapped optimizer's class
    # (as Horovod does), so isinstance() and state_dict() keep working.
    _hvdrun_distributed = True

    def __init__(self, params, named_parameters, compression, backward_passes_per_step,
                 op, gradient_predivide_factor, sparse_as_dense=False,
                 process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [(f"allreduce.noname.{i}.{j}", v)
                                for i, group in enumerate(self.param_groups)
                                for j, v in enumerate(group["params"])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("hvdrun.torch.DistributedOptimizer: named_parameters must "
                             "hold (name, parameter) pairs; pass model.named_parameters()")
        seen, dups = set(), set()
        for k, _ in named_parameters:
            (dups if k in seen else seen).add(k)
        if dups:
            raise ValueError("hvdrun.torch.DistributedOptimizer: named_parameters names "
                             "these more than once: " + ", ".join(sorted(dups)) +
                             "; give every parameter its own name")
        all_ids = {id(v) for group in self.param_groups for v in group["params"]}
        unnamed = all_ids - {id(v) for _, v in named_parameters}
        if unnamed:
            raise ValueError("hvdrun.torch.DistributedOptimizer: the optimizer has "
                             f"{len(unnamed)} parameter(s) missing from named_parameters "
                             "(Python ids " + ", ".join(str(i) for i in unnamed) +
                             "); pass the named_parameters() of the model the optimizer "
                             "was built from")
        self._parameter_names = {v: k for k, v in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self._synchronized = False
        self._should_synchronize = True
        self._grad_accs = []
        self._reducer = None
        ps = mpi_ops._check_process_set(process_set, "DistributedOptimizer")
        # Horovod skips the hooks at size 1, and on a rank outside the process set (whose
        # step() is then the wrapped optimizer's alone); in elastic mode the job may grow (or
        # this process is alone until it joins a running job), so they are kept.
        if process_set.included() and (mpi_ops._set_size(ps) > 1
                                       or (ps == 0 and _job.may_grow())):
            params_in_order = []
            seen_ids = set()
            for group in self.param_groups:
                for p in group["params"]:
                    if p.requires_grad and id(p) not in seen_ids:
                        seen_ids.add(id(p))
                        params_in_order.append(p)
            if op == Average:
                pre, post = 1.0 / gradient_predivide_factor, gradient_predivide_factor
            else:
                pre = post = 1.0
            self._reducer = _Reducer(params_in_order, self._parameter_names, compression, op,
                                     pre, post, backward_passes_per_step, sparse_as_dense,
                                     process_set)
            for p in params_in_order:
                grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                grad_acc.register_hook(self._make_hook(p))
                self._grad_accs.append(grad_acc)

    def _make_hook(self, p):
        reducer = self._reducer

        def hook(*unused):
            reducer.hook(p)
        return hook

    def load_state_dict(self, *args, **kwargs):
        """Loads the wrapped optimizer's state and forgets any gradients in flight."""
        if self._reducer is not None:
            self._reducer.reset()
        self._synchronized = False
        self._should_synchronize = True
        return super(self.__class__, self).load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        """Changes how many backward passes accumulate locally before a reduction."""
        if passes <= 0:
            raise ValueError("backward_passes_per_step must be > 0")
        self.backward_passes_per_step = passes
        if self._reducer is not None:
            self._reducer.set_passes(passes)

    def synchronize(self):
        """Reduces every gradient not reduced yet, waits for all of them and writes the
        results into the parameters' .grad. step() calls it unless inside
        skip_synchronize()."""
        if self._reducer is not None:
            self._reducer.synchronize()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """Within this context step() does not synchronize (for a program that called
        synchronize() itself, e.g. to clip gradients first)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        """Synchronizes the gradients (unless inside skip_synchronize()), then steps the
        wrapped optimizer."""
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without "
                              "optimizer.skip_synchronize() after an explicit "
                              "optimizer.synchronize(): the gradients are reduced again, "
                              "which costs time; wrap step() in "
                              "`with optimizer.skip_synchronize():` when you call "
                              "synchronize() yourself")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        """The wrapped optimizer's zero_grad; an error between backward() and step()."""
        if self._reducer is not None and self._reducer.active:
            raise AssertionError("hvdrun.torch: zero_grad() between backward() and "
                                 "step() (or synchronize()) would clear gradients that are "
                                 "still being reduced; call it before backward() or after "
                                 "step()")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps `optimizer` so that step() applies gradients averaged (or summed ...) over
    all ranks. Gradients are reduced while backward runs, fused into buckets of up to
    HOROVOD_FUSION_THRESHOLD bytes (default 16 MiB).

    Arguments:
        optimizer: the torch optimizer to wrap (its param_groups are used).
        named_parameters: `model.named_parameters()`, for names in error messages and the
            checks Horovod makes (unique, every parameter named).
        compression: Compression.none (default) or Compression.fp16 (reduce in float16).
        backward_passes_per_step: backward passes accumulated locally per reduction.
        op: Average (default) or Sum, Min, Max, Product. Adasum is not supported.
        gradient_predivide_factor: with Average, scales gradients by 1/factor before the
            sum and factor/size after it.
        num_groups, groups: Horovod's explicit fusion groups; accepted and not needed:
            hvdrun always fuses (results are the same).
        sparse_as_dense: False (default): a sparse gradient (nn.Embedding(sparse=True))
            is reduced by gathering every rank's entries (sparse_allreduce_async); True:
            it is reduced as a dense tensor, fused with the others, and made sparse again
            before the step (cheaper when most rows have gradients).
        process_set: the ranks whose gradients are averaged (default: every rank).
    """
    mpi_ops._check_process_set(process_set, "DistributedOptimizer")
    if op not in mpi_ops._OP_NAMES:
        raise NotImplementedError(
            f"hvdrun.torch.DistributedOptimizer(op={op!r}) is not supported (Adasum is not "
            "available in hvdrun); use op=hvd.Average (the default) or hvd.Sum")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("hvdrun.torch.DistributedOptimizer: gradient_predivide_factor "
                         "only applies to op=Average; drop it or use op=hvd.Average")
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    if num_groups not in (0, None) and groups is None:
        warnings.warn("hvdrun.torch.DistributedOptimizer: num_groups is accepted for "
                      "compatibility and ignored (hvdrun always fuses gradients)",
                      DeprecationWarning)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, sparse_as_dense, process_set)
