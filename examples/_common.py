"""What the examples share: the rank's device, the gloo metadata channel,
registration of CPU or CUDA tensors, the CUDA ordering rules, polling with
a deadline, reporting and teardown.

Every example runs under ``torchrun --nproc-per-node 2``: torchrun starts the
two ranks and sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT;
torch.distributed (gloo, CPU only) carries the small metadata (28-byte
QPInfo records, 20-byte RemoteBuffer records of address, rkey and length,
"ready"/"done" barriers); the payload
moves over RDMA between the two ranks' own devices.

Device, port and GID, per rank (environment variables):

IBVERBS_DEVICE     the RDMA device, or a comma-separated list indexed by
                   LOCAL_RANK ("mlx5_0,mlx5_1"). Default: rxe<LOCAL_RANK>
                   (rxe0 / rxe1 in the Soft-RoCE VM), else the
                   LOCAL_RANK-th device of get_device_list().
IBVERBS_PORT       the port number (default 1).
IBVERBS_GID_INDEX  the source GID index. Default: Context.find_gid, the
                   first RoCE v2 GID holding an IPv4-mapped address (GID
                   types read from sysfs), or the first IB GID on an
                   InfiniBand port.
IBVERBS_CUDA       "0" keeps tensors on the CPU even when CUDA is available;
                   by default rank r uses cuda:<LOCAL_RANK % device_count>
                   when torch.cuda.is_available().
IBVERBS_EXAMPLE_TIMEOUT  seconds a collective or a poll may wait (default
                   300: ranks in an emulated VM are slow).

In the Soft-RoCE VM, ``torchrun --standalone --nproc-per-node 2 <example>``
works as it does elsewhere (the guest's hostname resolves, gloo binds to
loopback).
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

# CUDA memory must come from the expandable-segments allocator (VMM) to be
# exported as a dma-buf; this must be set before torch initialises CUDA.
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import ibverbs as ib  # noqa: E402

TIMEOUT = float(os.environ.get("IBVERBS_EXAMPLE_TIMEOUT", "300"))
MIB = 1 << 20


# --- device, port and GID ----------------------------------------------------

def find_gid(ctx, port):
    """(index, Gid) of the first RoCE v2 GID of the port holding an IPv4-mapped
    address (::ffff:a.b.c.d); index 0 on an InfiniBand port.

    The GID table is filled by the kernel in no fixed order, so the index is
    looked up (Context.find_gid reads the GID types from sysfs), never
    assumed."""
    if ctx.query_port(port).link_layer == ib.LinkLayer.INFINIBAND:
        return ctx.find_gid(port, gid_type=ib.GIDType.IB, family=None)
    try:
        return ctx.find_gid(port)
    except LookupError as exc:
        raise SystemExit(f"{exc}; set IBVERBS_GID_INDEX") from None


def choose_device(local_rank):
    """(device name, port, GID index or None) of this rank, from the environment."""
    names = [d.name for d in ib.get_device_list()]
    wanted = [s.strip() for s in os.environ.get("IBVERBS_DEVICE", "").split(",") if s.strip()]
    if wanted:
        name = wanted[local_rank % len(wanted)]
    elif f"rxe{local_rank}" in names:
        name = f"rxe{local_rank}"
    elif names:
        name = names[local_rank % len(names)]
    else:
        raise SystemExit("no RDMA device (set IBVERBS_DEVICE, or load rdma_rxe)")
    if name not in names:
        raise SystemExit(f"RDMA device {name!r} not found (have: {', '.join(names) or 'none'})")
    port = int(os.environ.get("IBVERBS_PORT", "1"))
    env_gid = os.environ.get("IBVERBS_GID_INDEX")
    return name, port, int(env_gid) if env_gid else None


def choose_tensor_device(local_rank):
    """cuda:<local_rank % count> when CUDA is there (and IBVERBS_CUDA != 0), else cpu."""
    if os.environ.get("IBVERBS_CUDA", "1") != "0" and torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


# --- the session: one rank's verbs objects and its gloo channel ---------------

class Session:
    """This rank of a two-rank job: process group, device context, PD.

    Verbs objects made through it (``cq``, ``rc_qp``, ``register``) are
    closed by ``close()`` in reverse order of creation, then the PD and the
    context (closing a parent with a live child would raise EBUSY, so a
    clean close is also a leak check).
    """

    def __init__(self, name):
        self.name = name
        # run_all.py runs every example in one torchrun job and creates the
        # group once; a single example creates (and later destroys) its own.
        self.owns_group = not dist.is_initialized()
        if self.owns_group:
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=TIMEOUT))
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        if self.world_size != 2:
            raise SystemExit(f"{name} runs on exactly two ranks (torchrun --nproc-per-node 2), "
                             f"not {self.world_size}")
        self.peer = 1 - self.rank
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.device_name, self.port, self.gid_index = choose_device(self.local_rank)
        self.tensor_device = choose_tensor_device(self.local_rank)
        self.ctx = next(d for d in ib.get_device_list() if d.name == self.device_name).open()
        self.pd = self.ctx.alloc_pd()
        if self.gid_index is None:
            self.gid_index, self.gid = find_gid(self.ctx, self.port)
        else:
            self.gid = self.ctx.query_gid(self.port, self.gid_index)
        self._objects = []
        self.failures = []
        self.log(f"{self.device_name} port {self.port} GID[{self.gid_index}] {self.gid}, "
                 f"tensors on {self.tensor_device}")

    # verbs objects ------------------------------------------------------------
    def track(self, obj):
        self._objects.append(obj)
        return obj

    def cq(self, cqe):
        return self.track(self.ctx.create_cq(cqe))

    def rc_qp(self, cq, max_send_wr=16, max_recv_wr=16):
        return self.track(self.pd.create_qp(ib.QPInitAttr(
            cq, cq, qp_type=ib.QPType.RC, max_send_wr=max_send_wr, max_recv_wr=max_recv_wr)))

    def register(self, tensor, access):
        """An MR over a CPU tensor (ib.reg_tensor) or a GpuMR over a CUDA
        tensor (ibverbs.cuda.register_tensor). Both have .addr, .rkey, .lkey
        and .sge(length, offset); both keep the tensor alive."""
        if tensor.is_cuda:
            import ibverbs.cuda
            return self.track(ibverbs.cuda.register_tensor(self.pd, tensor, access))
        return self.track(ib.reg_tensor(self.pd, tensor, access))

    # gloo: metadata only ------------------------------------------------------
    def all_gather_bytes(self, blob):
        """Every rank's ``blob`` (all the same length), in rank order."""
        mine = torch.tensor(list(blob), dtype=torch.uint8)
        out = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(out, mine)
        return [bytes(t.tolist()) for t in out]

    def broadcast_remote(self, remote, src):
        """A RemoteBuffer (where to RDMA-write or read: addr, rkey, length)
        from rank ``src`` to every rank, as its 20-byte wire format."""
        if self.rank == src:
            buf = torch.frombuffer(bytearray(remote.to_bytes()), dtype=torch.uint8)
        else:
            buf = torch.empty(20, dtype=torch.uint8)
        dist.broadcast(buf, src=src)
        return ib.RemoteBuffer.from_bytes(buf)       # from_bytes takes the tensor as it is

    def barrier(self):
        dist.barrier()

    # CUDA ordering (no-ops for CPU tensors) -----------------------------------
    @staticmethod
    def before_post(tensor):
        """The NIC reads the tensor's memory directly: the CUDA work that
        produced it must be finished before the work request is posted (or
        before the peer is told it may read it)."""
        if tensor.is_cuda:
            torch.cuda.current_stream(tensor.device).synchronize()

    @staticmethod
    def after_inbound(tensor):
        """After the completion (or notification) of an inbound SEND, RDMA
        write or RDMA read, make the NIC's writes visible to CUDA before any
        CUDA work reads the tensor."""
        if tensor.is_cuda:
            import ibverbs.cuda
            with torch.cuda.device(tensor.device):
                ibverbs.cuda.flush_gpudirect_writes()

    # completions ----------------------------------------------------------------
    @staticmethod
    def poll(cq, n=1, timeout=TIMEOUT):
        """At least one and at most n completions: CQ.wait for the first
        (TimeoutError after ``timeout`` seconds, CompletionError for a failed
        one), then whatever else is already there."""
        wcs = cq.wait(1, timeout)
        if n > 1:
            for wc in cq.poll(n - 1):
                wc.raise_for_status()
                wcs.append(wc)
        return wcs

    @staticmethod
    def poll_all(cq, n, timeout=TIMEOUT):
        """Exactly n completions (CQ.wait raises TimeoutError naming how many
        arrived, and CompletionError for a failed one)."""
        return cq.wait(n, timeout)

    # reporting ------------------------------------------------------------------
    def log(self, msg):
        say(f"[rank {self.rank}] {self.name}: {msg}")

    def check(self, ok, what):
        if not ok:
            self.failures.append(what)
            self.log(f"MISMATCH: {what}")
        return ok

    def report(self, role, nbytes, seconds, detail=""):
        """The line a person reads and the RESULT line the tests parse."""
        rate = nbytes / MIB / seconds if seconds > 0 else float("inf")
        status = "OK" if not self.failures else "FAILED"
        self.log(f"{role}: {nbytes} bytes ({nbytes / MIB:.2f} MiB){detail} in "
                 f"{seconds * 1e3:.1f} ms, {rate:.1f} MiB/s: {status}")
        say(f"RESULT example={self.name} rank={self.rank} role={role} bytes={nbytes} "
            f"seconds={seconds:.6f} ok={int(not self.failures)}")

    # teardown ---------------------------------------------------------------------
    def close(self, clean=True):
        """Close every verbs object, children first. ``clean``: wait for the
        peer first, so that no RDMA operation still targets our memory."""
        if clean:
            self.barrier()
        for obj in reversed(self._objects):
            obj.close()
        self._objects.clear()
        self.pd.close()
        self.ctx.close()
        if self.owns_group:
            dist.destroy_process_group()


def say(line):
    """One line to stdout in a single write, so the two ranks' lines (both
    ranks share torchrun's stdout) do not interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def tensor_desc(t):
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)} on {t.device}"


def pattern(numel, seed, device):
    """Deterministic test data: both ranks can compute what must arrive."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-2**31, 2**31 - 1, (numel,), dtype=torch.int32, generator=g).to(device)


def main(name, body, configure=None):
    """Run ``body(session, args)`` for one example; returns the exit status:
    0 when every check passed, 1 on a mismatch (an exception propagates)."""
    parser = argparse.ArgumentParser(prog=name, description=sys.modules["__main__"].__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    if configure is not None:
        configure(parser)
    args = parser.parse_args()
    s = Session(name)
    try:
        body(s, args)
    except BaseException:
        try:
            s.close(clean=False)     # no barrier: the peer may be gone
        except Exception as exc:     # keep the original error in view
            s.log(f"while closing after an error: {exc!r}")
        raise
    s.close()
    return 1 if s.failures else 0
