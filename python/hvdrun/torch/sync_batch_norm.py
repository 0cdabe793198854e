"""SyncBatchNorm (Horovod's `hvd.SyncBatchNorm`): batch normalization whose batch
statistics cover every rank's batch, as if the ranks' batches were one.

Forward (training, or track_running_stats=False): each rank computes, per channel, its
element count, mean and sum of squared deviations; one allgather brings every rank's to
every rank, and each combines them (Chan's parallel formula, in float64) into the global
mean and variance. That is exact for batches of different sizes, a rank with no rows
included. The running statistics are updated with the global mean and the global unbiased
variance, with `momentum` or, when it is None, the cumulative average, as torch's
BatchNorm. In eval mode with running statistics, no rank talks to another.

Backward: the input's gradient needs the global sums of dy and dy * x_hat per channel
(one allreduce); the weight's and bias's gradients stay local, as in Horovod and torch:
DistributedOptimizer reduces them with the other gradients.

Unlike Horovod's (GPU only), this one also runs on the CPU; every rank must call it the
same number of times, in the same order, as with any collective.
"""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from hvdrun.torch.mpi_ops import Sum, allgather_async, allreduce_async, size, synchronize


class SyncBatchNorm(_BatchNorm):
    """Batch normalization over the batch of every rank together, for inputs of shape
    (N, C, ...) (any number of trailing dimensions, as BatchNorm1d/2d/3d).

    Arguments:
        num_features: the number of channels C.
        eps: added to the variance for numerical stability. Default: 1e-5.
        momentum: the weight of the newest batch in the running statistics; None for a
            cumulative (simple) average. Default: 0.1.
        affine: learnable per-channel weight and bias. Default: True.
        track_running_stats: keep running mean and variance for eval mode; when False,
            batch statistics (synchronized) are used in eval mode too. Default: True.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"hvdrun.torch.SyncBatchNorm: expected at least 2D input (got "
                             f"{input.dim()}D input); the input is (N, C, ...)")
        if input.size(1) != self.num_features:
            raise ValueError(f"hvdrun.torch.SyncBatchNorm: the input has {input.size(1)} "
                             f"channels (dimension 1) and the layer {self.num_features}")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        if not self.training and self.track_running_stats:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                self.bias, False, factor, self.eps)
        # Batch statistics; the running ones are updated in training only.
        running_mean = self.running_mean if self.training else None
        running_var = self.running_var if self.training else None
        if size() == 1:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias,
                                True, factor, self.eps)
        return _SyncBatchNormFn.apply(input, self.weight, self.bias, running_mean,
                                      running_var, self.eps, factor)


def _compute_dtype(dtype):
    # Half precision is normalized in float32, as torch's own kernels do.
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _per_channel(x):
    """(dimensions reduced over, shape that broadcasts a per-channel vector against x)."""
    dims = [0] + list(range(2, x.dim()))
    return dims, [1, x.size(1)] + [1] * (x.dim() - 2)


def _global_stats(x, dims):
    """Every rank's per-channel count, mean and sum of squared deviations, combined into
    the global (count, mean, biased variance, unbiased variance), all float64."""
    channels = x.size(1)
    count = x.numel() // channels
    if count > 0:
        mean = x.mean(dims)
        m2 = (x - mean.view(_per_channel(x)[1])).square().sum(dims)
    else:
        mean = x.new_zeros(channels)
        m2 = x.new_zeros(channels)
    packet = torch.cat([torch.tensor([float(count)], dtype=torch.float64, device=x.device),
                        mean.to(torch.float64), m2.to(torch.float64)]).unsqueeze(0)
    everyone = synchronize(allgather_async(packet, name="sync_batch_norm.stats"))
    counts = everyone[:, :1]
    means = everyone[:, 1:channels + 1]
    m2s = everyone[:, channels + 1:]
    total = float(counts.sum().item())
    if total <= 1:
        raise ValueError("hvdrun.torch.SyncBatchNorm: expected more than 1 value per "
                         f"channel when training, got {int(total)} across all ranks "
                         f"(input of shape {list(x.shape)} here); use larger batches")
    mean_all = (counts * means).sum(0) / total
    m2_all = (m2s + counts * (means - mean_all).square()).sum(0)
    return total, mean_all, m2_all / total, m2_all / (total - 1)


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, factor):
        x = input.contiguous().to(_compute_dtype(input.dtype))
        dims, shape = _per_channel(x)
        total, mean, var, unbiased = _global_stats(x, dims)
        with torch.no_grad():
            if running_mean is not None:
                running_mean.mul_(1 - factor).add_(mean.to(running_mean.dtype), alpha=factor)
            if running_var is not None:
                running_var.mul_(1 - factor).add_(unbiased.to(running_var.dtype),
                                                  alpha=factor)
        mean = mean.to(x.dtype)
        invstd = (var + eps).rsqrt().to(x.dtype)
        out = (x - mean.view(shape)) * invstd.view(shape)
        if weight is not None:
            out = out * weight.to(x.dtype).view(shape)
        if bias is not None:
            out = out + bias.to(x.dtype).view(shape)
        ctx.save_for_backward(x, weight, bias, mean, invstd)
        ctx.total = total
        ctx.input_dtype = input.dtype
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, bias, mean, invstd = ctx.saved_tensors
        dims, shape = _per_channel(x)
        dy = grad_output.contiguous().to(x.dtype)
        x_hat = (x - mean.view(shape)) * invstd.view(shape)
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * x_hat).sum(dims)
        need_input, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_input = grad_weight = grad_bias = None
        if need_input:
            # The same on every rank: every rank's gradient depends on every rank's rows.
            sums = torch.cat([sum_dy, sum_dy_xhat])
            sums = synchronize(allreduce_async(sums, op=Sum, name="sync_batch_norm.grad"))
            channels = x.size(1)
            mean_dy = (sums[:channels] / ctx.total).view(shape)
            mean_dy_xhat = (sums[channels:] / ctx.total).view(shape)
            scale = invstd if weight is None else invstd * weight.to(x.dtype)
            grad_input = ((dy - mean_dy - x_hat * mean_dy_xhat) * scale.view(shape))
            grad_input = grad_input.to(ctx.input_dtype)
        if weight is not None and need_weight:
            grad_weight = sum_dy_xhat.to(weight.dtype)
        if bias is not None and need_bias:
            grad_bias = sum_dy.to(bias.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None
