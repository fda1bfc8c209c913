"""Trace a few kornia functions, print one graph as Python source, and time eager vs traced.

    python examples/demo_kornia.py
"""
import statistics
import time

import kornia
import torch

import lazytrace


def median_us(fn, *args, calls=300):
    for _ in range(20):
        fn(*args)
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn(*args)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def main():
    img = torch.rand(1, 3, 32, 32)
    calls = {
        "color.rgb_to_hsv": (kornia.color.rgb_to_hsv, (img,)),
        "color.rgb_to_lab": (kornia.color.rgb_to_lab, (img,)),
        "filters.gaussian_blur2d": (kornia.filters.gaussian_blur2d, (img, (5, 5), (1.5, 1.5))),
        "filters.sobel": (kornia.filters.sobel, (img,)),
        "enhance.adjust_saturation": (kornia.enhance.adjust_saturation, (img, 1.3)),
        "geometry.transform.rotate": (kornia.geometry.transform.rotate, (img, torch.tensor([30.0]))),
        "morphology.dilation": (kornia.morphology.dilation, (img, torch.ones(3, 3))),
    }
    blur = lazytrace.trace_graph(kornia.filters.gaussian_blur2d)
    blur(img, (5, 5), (1.5, 1.5))
    graph = blur.graph_for(img, (5, 5), (1.5, 1.5))
    print("kornia.filters.gaussian_blur2d traced for a 1x3x32x32 image:\n")
    print(graph.source)
    print(f"dropped: {len(graph.dropped['pruned'])} dead calls, {graph.dropped['folded']} calls folded "
          f"into {sum(isinstance(c, torch.Tensor) for c in graph.constants.values())} cached tensors\n")

    print(f"{'function (1x3x32x32)':32} {'eager us':>10} {'traced us':>10} {'speedup':>8}")
    speedups = []
    for name, (fn, args) in calls.items():
        traced = lazytrace.trace_graph(fn)
        out = traced(*args)                      # first call traces
        assert torch.allclose(out, fn(*args), atol=1e-6)
        eager, fast = median_us(fn, *args), median_us(traced, *args)
        speedups.append(eager / fast)
        print(f"{name:32} {eager:10.1f} {fast:10.1f} {eager / fast:7.2f}x")
    geomean = statistics.geometric_mean(speedups)
    print(f"\ngeometric-mean speedup: {geomean:.2f}x (torch {torch.__version__}, kornia {kornia.__version__}, "
          f"{torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
