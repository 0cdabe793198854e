"""A Horovod elastic training program (written the way Horovod's PyTorch elastic examples
are), with two events injected at fixed steps:

- step FAIL_AT: every rank issues a collective whose shape differs by rank, which fails on
  every rank with HorovodInternalError; hvd.elastic.run must restore the last commit (the
  step counter and the model's weights as they were then), re-initialise and go on;
- step HOSTS_AT: rank 0 records a host update; the next commit must raise
  HostsUpdatedInterrupt on every rank, and run re-initialises without restoring.

Each rank's model starts from its own seed, so only the sync makes them equal. At the
end every rank prints what it saw, and the weights must be the same on every rank."""
import time

import torch

import hvdrun.torch as hvd
from hvdrun import _elastic

COMMIT_EVERY = 3
FAIL_AT = 5
HOSTS_AT = 8
EPOCHS = 2
BATCH = 4

hvd.init()
torch.manual_seed(100 + hvd.rank())
model = torch.nn.Linear(4, 1)
data = torch.utils.data.TensorDataset(torch.arange(384.0).reshape(96, 4) / 384,
                                      torch.arange(96.0).reshape(96, 1) / 96)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=sampler)

events = []
committed = {}  # the step and weights at the last commit, kept outside the state


def weights():
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def on_reset():
    events.append(f"reset size={hvd.size()} steps={state.steps}")


state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0,
                               steps=0)
state.register_reset_callbacks([on_reset])
failed = hosts_updated = False


@hvd.elastic.run
def train(state):
    global failed, hosts_updated
    if len(events) >= 2 and events[-2].startswith("fail") and "restored" not in events[-1]:
        # After the failure: the state is the last commit's (and rank 0's, after the sync).
        same = torch.equal(weights(), committed["weights"])
        events[-1] += f" restored={state.steps} weights_as_committed={same}"
    for state.epoch in range(state.epoch, EPOCHS):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            state.steps += 1
            sampler.record_batch(0, BATCH)
            if state.steps == FAIL_AT and not failed:
                failed = True
                events.append(f"fail at steps={state.steps}")
                hvd.allreduce(torch.ones(1 + hvd.rank()), name="injected.mismatch")
            if state.steps == HOSTS_AT and not hosts_updated and hvd.rank() == 0:
                hosts_updated = True
                state.on_hosts_updated(time.time(), _elastic.HOSTS_ADDED)
            if state.steps % COMMIT_EVERY == 0:
                committed.update(steps=state.steps, weights=weights())
                try:
                    state.commit()
                except hvd.elastic.HostsUpdatedInterrupt:
                    events.append(f"hosts updated at steps={state.steps}")
                    raise
        sampler.set_epoch(state.epoch + 1)
        state.commit()
    return state.steps


steps = train(state)
final = weights().reshape(1, -1)
same = all(torch.equal(final[0], w) for w in hvd.allgather(final))
print(f"rank {hvd.rank()} generation {hvd.generation()} steps={steps} identical={same} "
      f"events={events}", flush=True)
hvd.shutdown()
