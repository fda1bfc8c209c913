#!/usr/bin/env python
"""What lowering torch's Python wrappers to their C calls saves a graph (backends/torch_lowering.py).

    python benchmarks/bench_lowering.py                 # wrappers alone, then kornia at 32 and 512
    python benchmarks/bench_lowering.py --sizes 32 --only pad resize

Each function is traced twice in this one process, with lowering off and on, and the two
generated functions (graph.fn, no signature lookup) are timed on the same inputs, taking turns
in short blocks; the table gives the median and the minimum per call of each and their ratio
(on/off: below 1 is faster). Calls go through one thread (torch.set_num_threads(1), unless
--threads) so that load from other processes disturbs the small sizes less.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import lazytrace
from lazytrace.backends import get_backend
from lazytrace.backends.torch_lowering import Lowering


def _args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[32, 512], help="H=W of the kornia inputs")
    p.add_argument("--calls", type=int, default=400, help="timed calls per mode (fewer above 64 px)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--only", nargs="+", default=None, help="cases whose name contains one of these")
    return p.parse_args()


def _wrappers():
    """name -> (function, inputs) of one wrapper call on 1x3x32x32 float32."""
    x = torch.rand(1, 3, 32, 32)
    theta = torch.eye(2, 3).unsqueeze(0)
    grid = torch.rand(1, 32, 32, 2) * 2 - 1
    return {
        "F.pad constant": (lambda x: F.pad(x, [1, 1, 1, 1], mode="constant", value=0.0), (x,)),
        "F.pad reflect": (lambda x: F.pad(x, [2, 2, 2, 2], mode="reflect"), (x,)),
        "F.interpolate bilinear": (lambda x: F.interpolate(x, size=(16, 16), mode="bilinear"), (x,)),
        "F.interpolate nearest": (lambda x: F.interpolate(x, scale_factor=0.5), (x,)),
        "F.grid_sample": (lambda x, g: F.grid_sample(x, g, align_corners=False), (x, grid)),
        "F.affine_grid": (lambda t: F.affine_grid(t, [1, 3, 32, 32], False), (theta,)),
        "F.max_pool2d": (lambda x: F.max_pool2d(x, 3, 1, 1), (x,)),
        "F.unfold": (lambda x: F.unfold(x, 3, padding=1), (x,)),
        "F.group_norm": (lambda x: F.group_norm(x, 3), (x,)),
        "F.layer_norm": (lambda x: F.layer_norm(x, [32]), (x,)),
        "torch.einsum (2 operands)": (lambda x, y: torch.einsum("bchw,bc->bhw", x, y), (x, x[:, :, 0, 0])),
        "F.dropout eval": (lambda x: F.dropout(x, 0.5, training=False), (x,)),
        "F.relu": (lambda x: F.relu(x), (x,)),
        "F.leaky_relu": (lambda x: F.leaky_relu(x, 0.2), (x,)),
        "F.adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 4), (x,)),
    }


def _kornia(size):
    import kornia as K
    x = torch.rand(1, 3, size, size)
    s = size
    affine = torch.tensor([[[0.9, 0.1, 2.0], [-0.1, 0.9, 1.0]]])
    return {
        "filters.gaussian_blur2d": (K.filters.gaussian_blur2d, (x, (5, 5), (1.5, 1.5))),
        "filters.box_blur": (K.filters.box_blur, (x, (5, 5))),
        "filters.sobel": (K.filters.sobel, (x,)),
        "filters.median_blur": (K.filters.median_blur, (x, (3, 3))),
        "geometry.resize": (K.geometry.transform.resize, (x, (s // 2, s // 2))),
        "geometry.pyrdown": (K.geometry.transform.pyrdown, (x,)),
        "geometry.pyrup": (K.geometry.transform.pyrup, (x,)),
        "geometry.rotate": (K.geometry.transform.rotate, (x, torch.tensor([30.0]))),
        "geometry.warp_affine": (K.geometry.transform.warp_affine, (x, affine, (s, s))),
        "morphology.dilation": (K.morphology.dilation, (x, torch.ones(3, 3))),
        "morphology.opening": (K.morphology.opening, (x, torch.ones(3, 3))),
    }


def _graph_fn(fn, inputs, lowering):
    backend = get_backend("torch")
    saved, backend._lowering = backend._lowering, lowering
    try:
        graph = lazytrace.trace_graph(fn, args=inputs)
    finally:
        backend._lowering = saved
    leaves = [x for x in inputs if isinstance(x, torch.Tensor)]
    graph.fn(*leaves)
    return graph, leaves


def _lowered_count(graph):
    return sum(n.wrapper is not None for n in graph._plan.nodes)


def _time(modes, calls, block=8):
    samples = {name: [] for name in modes}
    for r in range(max(1, calls // block)):
        for name in (list(modes) if r % 2 == 0 else list(modes)[::-1]):
            fn, args = modes[name]
            fn(*args)
            for _ in range(block):
                t0 = time.perf_counter_ns()
                fn(*args)
                samples[name].append(time.perf_counter_ns() - t0)
    return {name: (statistics.median(v) / 1e3, min(v) / 1e3) for name, v in samples.items()}


def _table(title, cases, calls, only):
    print(f"\n{title}\n{'':28s} {'off median':>10s} {'on median':>10s} {'on/off':>7s}   {'off min':>8s} {'on min':>8s}"
          f" {'on/off':>7s}  lowered")
    ratios = []
    for name, (fn, inputs) in cases.items():
        if only and not any(o in name for o in only):
            continue
        off, leaves = _graph_fn(fn, inputs, Lowering(enabled=False))
        on, _ = _graph_fn(fn, inputs, Lowering())
        t = _time({"off": (off.fn, leaves), "on": (on.fn, leaves)}, calls)
        (off_med, off_min), (on_med, on_min) = t["off"], t["on"]
        ratios.append(on_med / off_med)
        print(f"{name:28s} {off_med:10.2f} {on_med:10.2f} {on_med / off_med:7.3f}   {off_min:8.2f} {on_min:8.2f}"
              f" {on_min / off_min:7.3f}  {_lowered_count(on)}")
    if ratios:
        print(f"{'geomean of on/off medians':28s} {statistics.geometric_mean(ratios):.3f}")


def main():
    args = _args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s); times in us per call of graph.fn")
    _table("wrappers alone, 1x3x32x32 float32", _wrappers(), args.calls, args.only)
    for size in args.sizes:
        _table(f"kornia, 1x3x{size}x{size} float32", _kornia(size), args.calls if size <= 64 else args.calls // 8,
               args.only)


if __name__ == "__main__":
    main()
