"""Run every example, one after the other, in one torchrun job.

    torchrun --nproc-per-node 2 examples/run_all.py [NAME|PATH ...]

Each example script runs exactly as ``torchrun ... examples/<name>.py``
would run it (as ``__main__``, with its default arguments), in the same two
worker processes and on one gloo process group. That saves starting torch
four times, which costs about a minute per process in an emulated VM.

Arguments: example names (default: all four, in order) or paths of other
scripts written the same way. The exit status is 0 when every example
passed on both ranks, 1 otherwise; an example that raises stops the run
(the ranks could no longer agree on what comes next).
"""
import datetime
import os
import runpy
import sys
import time

import _common  # first: sets PYTORCH_CUDA_ALLOC_CONF before torch starts
import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = ["rc_bootstrap", "write_with_imm", "rdma_read", "send_recv_striped"]


def main():
    names = sys.argv[1:] or EXAMPLES
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=_common.TIMEOUT))
    failed = []
    rank = dist.get_rank()
    for arg in names:
        path = arg if arg.endswith(".py") else os.path.join(HERE, arg + ".py")
        name = os.path.splitext(os.path.basename(path))[0]
        saved = sys.argv
        sys.argv = [path]
        t0 = time.perf_counter()
        try:
            runpy.run_path(path, run_name="__main__")
            status = 0
        except SystemExit as exc:
            if exc.code is not None and not isinstance(exc.code, int):
                raise                   # a message: the example could not start
            status = exc.code or 0
        finally:
            sys.argv = saved
        # Both ranks agree on the outcome (a mismatch is usually seen by one).
        flag = torch.tensor([1 if status else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        status = int(flag.item())
        if status:
            failed.append(name)
        _common.say(f"[rank {rank}] run_all: {name} {'FAILED' if status else 'passed'} "
                    f"in {time.perf_counter() - t0:.1f} s")
    _common.say(f"[rank {rank}] run_all: {len(names) - len(failed)} of {len(names)} examples passed"
                + (f"; failed: {', '.join(failed)}" if failed else ""))
    # Both summaries are out before either rank exits: when one worker
    # fails, torchrun stops the other at once.
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
