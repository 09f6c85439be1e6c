"""Attention across devices (chapter 13): three ways to split the work among ``P`` ranks.

- :mod:`~companion.distributed.tensor_parallel`  heads across devices (Megatron-LM): column- and row-parallel
                           projections, one all-reduce per sublayer
- :mod:`~companion.distributed.ring`             the sequence across devices (Ring Attention): key/value blocks passed
                           around a ring, partial softmaxes merged with chapter 12's rule
- :mod:`~companion.distributed.data_parallel`    the batch across devices (``DistributedDataParallel``)
- :mod:`~companion.distributed.launch`           processes on this machine (gloo on CPUs, NCCL on GPUs),
                           errors that name the failed rank, counting what is handed to collectives

Each split has a version with the ranks simulated in one process (lists of shards), used by
the exercises, and one that runs on real processes through :func:`~companion.distributed.launch.launch`.
"""

from . import data_parallel, launch, ring, tensor_parallel
from .launch import CommLog, RankFailed, choose_backend, free_port

__all__ = ["CommLog", "RankFailed", "choose_backend", "data_parallel", "free_port", "launch", "ring",
           "tensor_parallel"]
