"""Host memory at scale: what training a model on a chip costs in host RAM,
beside the same training on the CPU.

    python bench/bench_memory.py [--model mlp100m|linear8] [--steps 2]

Each run is a process of its own (so its peak RSS is its own): the CPU, then
each chip with flbridge's host-copy policy (FLBRIDGE_HOST_COPY_LIMIT, default
1 MiB) and, beside it, with every host copy kept (`inf`: the behaviour before
the policy).  Per run: peak and final process RSS; device memory (allocated,
peak); host buffers flbridge holds; bytes moved per step after the first.

The simulated chips keep their "device" memory in the same process, so a
chip run's RSS includes it; "host side" subtracts the device memory the
runtime holds, which a real chip keeps off the host.  x1 maps host memory
into the device (zero-copy), so its host buffers *are* its device memory.

Models: `linear8` is 8 Linear(1024) layers (32 MiB of parameters) with SGD;
`mlp100m` is 6 Linear(4096) layers (100.7M parameters, 384 MiB) with SGD.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _model(name: str):
    import torch
    width, depth = {"linear8": (1024, 8), "mlp100m": (4096, 6)}[name]
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]), width


def run(model_name: str, device: str, steps: int) -> dict:
    import torch
    model, width = _model(model_name)
    chip = None
    if device != "cpu":
        import flbridge
        from flbridge.tensor import Storage
        flbridge.init()
        chip = flbridge.devices.chip_for(device)
        model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, width)
    moved = []
    for step in range(steps):
        if chip is not None:
            flbridge.reset_stats(device)
        opt.zero_grad(set_to_none=True)
        loss = model(x.to(device)).square().mean()
        loss.backward()
        opt.step()
        loss.item()
        if chip is not None:
            s = flbridge.stats(device)
            moved.append(s["h2d_bytes"] + s["d2h_bytes"] + s["mapped_bytes"])
    gc.collect()
    out = {"rss_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "rss_mib": _rss_kib() / 1024,
           "params_mib": sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20}
    if chip is not None:
        host = sum(o.host.numel() for o in gc.get_objects() if isinstance(o, Storage) and o.host is not None)
        a = chip.allocator
        out.update(device_mib=a.allocated / 2**20, device_peak_mib=a.peak_reserved / 2**20,
                   host_buffers_mib=host / 2**20, moved_per_step=moved[-1],
                   maps=chip.runtime.can_map)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("linear8", "mlp100m"), default="mlp100m")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--child", nargs=2, metavar=("DEVICE", "LIMIT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        os.environ.setdefault("FLBRIDGE_WARN", "off")
        if args.child[1] != "-":
            os.environ["FLBRIDGE_HOST_COPY_LIMIT"] = args.child[1]
        print(json.dumps(run(args.model, args.child[0], args.steps)))
        return
    rows = []
    for device, limit in (("cpu", "-"), ("fl:0", "-"), ("fl:0", "inf"), ("fl:1", "-"), ("fl:1", "inf")):
        r = subprocess.run([sys.executable, __file__, "--model", args.model, "--steps", str(args.steps),
                            "--child", device, limit], capture_output=True, text=True, check=True)
        rows.append((device, limit, json.loads(r.stdout.strip().splitlines()[-1])))
    cpu = rows[0][2]
    print(f"{args.model}: {cpu['params_mib']:.0f} MiB of parameters, SGD, {args.steps} steps; "
          f"process RSS in MiB (host side = RSS minus the simulated device memory)")
    print(f"  {'run':22s} {'RSS peak':>9s} {'RSS':>7s} {'device':>8s} {'host side':>10s} {'x CPU':>6s} "
          f"{'host bufs':>10s} {'moved/step':>11s}")
    for device, limit, r in rows:
        name = device if device == "cpu" else f"{device} " + ("policy (1M)" if limit == "-" else "keep all")
        dev = r.get("device_mib", 0.0) if not r.get("maps") else 0.0
        host_side = r["rss_mib"] - dev
        print(f"  {name:22s} {r['rss_peak_mib']:9.0f} {r['rss_mib']:7.0f} {r.get('device_mib', 0):8.0f} "
              f"{host_side:10.0f} {host_side / cpu['rss_mib']:6.2f} {r.get('host_buffers_mib', 0):10.1f} "
              f"{r.get('moved_per_step', 0):11d}")


if __name__ == "__main__":
    main()
