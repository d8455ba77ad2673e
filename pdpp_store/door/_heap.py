"""The serving process's C heap, kept for the next body instead of given back after each one.

Rules:
1. A process that serves (`pdpp-store serve`, each of its workers) asks glibc's allocator to
   keep `HEAP_PAD_BYTES` of free heap at its top (`mallopt(M_TOP_PAD)`), instead of handing
   memory back to the kernel as soon as a large buffer is freed. A request body is read in
   buffers of up to 256 KiB (the socket read, uvicorn's body buffer, the message handed to the
   app), each freed a moment later; with the default policy the heap's top was given back and
   taken again for every body, and each taken page was faulted in and zeroed anew: about 1,000
   page faults per 4 MiB body, half of the server's CPU for it (4.7 ms a body, 2.1 ms kept).
   A hostile client sending 1 GB bodies makes the server read 4 MiB of each before refusing,
   and that CPU is what the well-behaved clients beside it wait for.
2. The pad is resident only once touched, and is bounded: the process's memory grows by at
   most `HEAP_PAD_BYTES` over what it would hold at its peak anyway.
3. Only the process's owner calls it (`serve.run`, a worker): a library embedding the store in
   its own process keeps its allocator's policy. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["HEAP_PAD_BYTES", "keep_heap"]

HEAP_PAD_BYTES = 16 * 1024 * 1024
"""Four of the largest MCP bodies: enough for a body's buffers with room for requests beside."""

_M_TOP_PAD = -2  # glibc's malloc.h


def keep_heap(pad_bytes: int = HEAP_PAD_BYTES) -> bool:
    """Keep `pad_bytes` of freed heap for reuse (rule 1); whether the allocator took it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_TOP_PAD, pad_bytes))
