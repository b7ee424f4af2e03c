"""Where a compiled program's values live on the device.

* :class:`Patcher`: the recorded calls get private copies of their
  descriptors; the ones that point into a graph input, a graph output or a
  value an eager step makes are listed with the slot whose address they
  take on every replay (a pool intermediate's address holds).
* :func:`move_out_of_pool`: the capture run's outputs, allocated from the
  program's pool, move to blocks of their own before the replays start
  writing the pool.
"""
from __future__ import annotations

from ..tensor import XPUTensor


def move_out_of_pool(chip, pool, outs) -> None:
    """The capture run's outputs leave the program's pool.  During the run
    they were allocated from it, where a block freed by an earlier value is
    handed out again: an output may sit at the address of an intermediate
    that every replay writes.  Each output Storage held in a pool block is
    copied into a block of its own (device to device, or through the host
    where the runtime has no device copy), and the pool block goes back to
    the pool, which the replays keep writing.  (The inputs were made
    resident before the pool existed, and mappings are not allocator blocks:
    only storages the capture run allocated are in it.)"""
    alloc = chip.allocator
    pool_of = alloc.pool_of
    seen = set()
    rt = chip.runtime
    for t in outs:
        if type(t) is not XPUTensor:
            continue
        st = t._st
        if id(st) in seen or st.fixed or pool_of.get(st.dev) is not pool:
            continue
        seen.add(id(st))
        old, old_size = st.dev, st.dev_size
        if st.dev_valid and rt.can_d2d:
            new, new_size = alloc.alloc(st.nbytes)
            rt.d2d(new, old, st.nbytes)
            chip.stats.d2d_calls += 1
            chip.stats.d2d_bytes += st.nbytes
            st.dev, st.dev_size = new, new_size
            alloc.release(old, old_size)
        else:
            st.ensure_host()
            st.drop_device()


class Patcher:
    """Private copies of recorded descriptors, and where each must be
    re-pointed per call."""

    def __init__(self, rt):
        self.rt = rt
        self.ffi = ffi = rt.ffi
        self.desc_type = rt._desc_ptr
        fields = rt._desc_ptr.item.fields
        self.data_field = fields[rt._field_pos[0]][0]
        self.has_offset = rt._field_pos[5] is not None
        self.size = ffi.sizeof(rt._desc_ptr.item)
        self.keep = []

    def private(self, a, infos, slot_of, seg):
        ffi = self.ffi
        if not isinstance(a, ffi.CData):
            return a
        ct = ffi.typeof(a)
        if ct is self.desc_type:
            return self._desc(a, infos, slot_of, seg)
        if ct.kind == "array" and ct.item is self.desc_type:
            arr = ffi.new(ct, [self._desc(d, infos, slot_of, seg) for d in a])
            self.keep.append(arr)
            return arr
        return a

    def _desc(self, d, infos, slot_of, seg):
        addr = int(getattr(d, self.data_field))
        slot, base = None, 0
        if addr:
            for sid, dev, nbytes in infos:
                s = slot_of.get(sid)
                if s is None or not dev:
                    continue
                if (dev == addr) if self.has_offset else (dev <= addr < dev + max(nbytes, 1)):
                    slot, base = s, dev
                    break
        if slot is None:
            return d             # a pool intermediate, temporary or constant: its address holds
        new = self.ffi.new(self.desc_type)
        self.ffi.memmove(new, d, self.size)
        seg.patches.setdefault(slot, []).append((new, self.data_field, addr - base))
        if slot[0] != "fresh":
            seg.resident.add(slot)
        return new
