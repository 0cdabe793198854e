"""ElasticSampler: a dataset's indices split across the ranks, re-split after a reset so
that the ranks left (or the ranks there are now) share what the epoch has not processed."""
import math
import random

import torch.utils.data

from hvdrun.torch.mpi_ops import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Like DistributedSampler, and it remembers how far the epoch got: call
    record_batch() after each batch and set_epoch() at the end of each epoch, and keep the
    sampler in a TorchState (as `sampler=`), which commits, restores and syncs its
    position; after a reset the remaining indices are split over the new number of ranks.

    Arguments:
        dataset: what is sampled (its length must not change).
        shuffle: shuffle the indices each epoch (default True), the same way on every rank.
        seed: the shuffle's seed, the same on every rank (default 0).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch` with nothing processed (a new shuffle). Call it at the end
        of an epoch, so that a reset inside one does not process samples twice."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of `batch_size` samples on every rank as processed."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Splits the epoch's unprocessed indices over the current size and rank."""
        self.num_replicas = size()
        self.rank = rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        padded = list(self.remaining_indices)
        # Every rank gets num_samples: the last ones repeat the first indices.
        while len(padded) < self.total_size:
            padded += padded[:self.total_size - len(padded)]
        self.indices = padded[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
