"""The tiny deterministic training both join-mode training workers run (one through
hvdrun.torch, one through torch DDP) and tests/python/test_join.py recomputes in one
process: the same initial weights on every rank, each rank's own batch, a few SGD steps
on the average of the ranks' gradients."""
import torch

STEPS = 5
LR = 0.1


def model():
    """The model, with the same initial weights wherever it is made."""
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def batch(rank, step):
    """Rank `rank`'s batch at `step`: inputs and targets, different on every rank."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(8, 4, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


def loss(net, rank, step):
    x, y = batch(rank, step)
    return torch.nn.functional.mse_loss(net(x), y)


def reference(size):
    """The weights after STEPS steps on the average gradient of `size` ranks, in one
    process."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for step in range(STEPS):
        grads = [torch.zeros_like(p) for p in net.parameters()]
        for r in range(size):
            net.zero_grad()
            loss(net, r, step).backward()
            for g, p in zip(grads, net.parameters()):
                g += p.grad
        for g, p in zip(grads, net.parameters()):
            p.grad = g / size
        opt.step()
    return net.state_dict()
