"""Graph views: DOT, images, and the HTML view checked in headless Chromium."""
import re
import shutil

import numpy as np
import pytest
import torch

import lazytrace
from lazytrace import view

from chromium import Browser, find_browser

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz 'dot' not installed (.ci/run installs it: apt-get install graphviz)")


def blur_graph(size=32):
    import kornia
    return lazytrace.trace_graph(kornia.filters.gaussian_blur2d, args=(torch.rand(1, 3, size, size), (5, 5), (1.5, 1.5)))


class Counter:
    def __init__(self):
        self.n = torch.zeros(2)


def everything(x, counter):
    """Uses every kind of box: input, op, constant, generator, guard, stateful read/write, output."""
    kernel = torch.ones(3) / 3                  # folded into a constant
    positive = bool(x.sum() > 0)                # a guard (before any visible effect)
    noise = torch.rand_like(x)                  # a random generator
    y = x * kernel + noise if positive else x - noise
    counter.n = counter.n + y.sum()             # a stateful read and write
    return y


def test_dot_shows_every_kind_of_node_with_shapes_on_hover(monkeypatch):
    counter = Counter()
    graph = lazytrace.trace_graph(everything, arg_stateful_idxs=[[1]], args=(torch.rand(3), counter))
    monkeypatch.setenv("PATH", "")              # to_dot needs no Graphviz program
    dot = graph.to_dot()
    classes = set(re.findall(r'class="?lt-(\w+)', dot))
    assert {"input", "op", "constant", "generator", "guard", "getattr", "setattr", "output"} <= classes
    assert "torch.Tensor.rand_like" in dot or "torch.rand_like" in dot
    assert "read .n" in dot and "write .n" in dot
    assert re.search(r'tooltip="op: torch\.Tensor\.add\nv4 = v3\.add\(v2\)\nin  v3: 3 float32\n'
                     r'in  v2: 3 float32\nout v4: 3 float32"', dot)
    assert re.search(r"c\d+ \(cached\)\n3 float32", dot) and "made by torch.Tensor.div" in dot
    assert "args[0]\n3 float32" in dot and "args[1]\nCounter" in dot


def test_in_place_writes_are_drawn_as_write_edges():
    def f(x, y):
        y.mul_(2)
        return x + y

    dot = lazytrace.trace_graph(f, args=(torch.rand(3), torch.rand(3))).to_dot()
    assert re.search(r'n\d+ -> in1 \[[^]]*style=dashed tooltip="writes a1"\]', dot)


@needs_dot
def test_show_displays_inline_in_a_notebook(monkeypatch, tmp_path):
    import sys
    import types
    shown = []
    shell = types.SimpleNamespace(config={"IPKernelApp": {}})
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: shell
    display = types.ModuleType("IPython.display")
    display.HTML = lambda text: ("html", text)
    display.display = shown.append
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", display)
    path = blur_graph().show(tmp_path / "nb.html")
    [(kind, text)] = shown
    assert kind == "html" and text.startswith("<iframe srcdoc=") and "torch.conv2d" in text
    assert path.read_text().count("torch.conv2d") >= 2


def test_drawing_without_graphviz_names_what_to_install(monkeypatch, tmp_path):
    graph = blur_graph()
    monkeypatch.setenv("PATH", "")
    with pytest.raises(view.GraphvizMissing, match="apt-get install graphviz"):
        graph.render(tmp_path / "g.svg")
    with pytest.raises(view.GraphvizMissing, match="install Graphviz"):
        graph.show(tmp_path / "g.html")


@needs_dot
def test_images_by_suffix(tmp_path):
    graph = blur_graph()
    assert graph.render(tmp_path / "g.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    assert graph.render(tmp_path / "g.png").read_bytes().startswith(b"\x89PNG")
    assert graph.render(tmp_path / "picture", format="pdf").read_bytes().startswith(b"%PDF")
    with pytest.raises(ValueError, match=r"\.svg, \.png or \.pdf"):
        graph.render(tmp_path / "g.jpg")


@needs_dot
def test_numpy_graph_html_without_browser(tmp_path):
    graph = lazytrace.trace_graph(lambda a: np.sin(a) * 2 + a.sum(), args=(np.ones((2, 3), np.float32),))
    page = graph.show(tmp_path / "np.html").read_text()
    assert "numpy.sin" in page and "2x3 float32" in page
    assert "http://" not in page.replace("http://www.w3.org", "")   # nothing fetched from the network
    default = graph.show()                                          # a new file in the temp directory
    assert default.exists() and default.suffix == ".html"
    default.unlink()


browser_path = find_browser()
needs_browser = pytest.mark.skipif(browser_path is None or shutil.which("dot") is None,
                                   reason="headless Chromium or Graphviz not installed (.ci/run installs "
                                          "both: apt-get install chromium graphviz)")


@pytest.fixture(scope="module")
def browser():
    b = Browser(browser_path, width=1280, height=800)
    yield b
    b.close()


@needs_browser
def test_browser_client_sees_page_errors(browser, tmp_path):
    """The check below is only worth something if a broken page is noticed."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>console.error('boom'); notDefined();</script></body></html>")
    browser.errors.clear()
    browser.open(page)
    assert any("boom" in e for e in browser.errors)
    assert any("notDefined" in e for e in browser.errors)


@needs_browser
def test_html_view_in_headless_chromium(browser, tmp_path):
    graph = blur_graph()
    page = graph.show(tmp_path / "blur.html")
    browser.errors.clear()
    browser.open(page)
    assert browser.errors == []
    assert browser.evaluate("document.body.dataset.ready") == "true"
    labels = browser.evaluate("Array.from(document.querySelectorAll('g.node')).map(g => g.textContent.trim())")
    assert labels.count("torch.conv2d") == 2 and labels.count("torch._C._nn.pad") == 2   # F.pad, lowered
    assert "args[0]\n1x3x32x32 float32" in labels and "out\n1x3x32x32 float32" in labels
    assert sum(" (cached)\n" in label for label in labels) == 2             # the two kernels
    assert "global _KORNIA_CHECKS_ENABLED" in labels       # kornia's switch, checked at every call
    tip = browser.evaluate("""(() => {
        const g = Array.from(document.querySelectorAll('g.node')).find(g => g.textContent.trim() === 'torch.conv2d');
        const r = g.getBoundingClientRect();
        g.dispatchEvent(new MouseEvent('mousemove', {clientX: r.x + 4, clientY: r.y + 4, bubbles: true}));
        return document.getElementById('tip').hidden ? null : document.getElementById('tip').textContent; })()""")
    assert tip.startswith("op: torch.conv2d") and "1x3x32x36 float32" in tip
    edge_tips = browser.evaluate("""(() => Array.from(document.querySelectorAll('[id^=e]')).filter(
        g => /^e[0-9]+$/.test(g.id)).map(g => { const r = g.getBoundingClientRect();
        g.dispatchEvent(new MouseEvent('mousemove', {clientX: r.x + 2, clientY: r.y + 2, bubbles: true}));
        return document.getElementById('tip').textContent; }))()""")
    assert "a0 1x3x32x32 float32" in edge_tips
    found = browser.evaluate("""(() => { const s = document.getElementById('search'); s.value = '_nn.pad';
        s.dispatchEvent(new Event('input')); return [document.querySelectorAll('g.node.match').length,
        document.getElementById('matches').textContent]; })()""")
    assert found == [2, "2 found"]
    shot = browser.screenshot(tmp_path / "blur.png")
    assert shot.stat().st_size > 10_000
    assert browser.errors == []


@needs_browser
def test_large_graph_opens_readable(browser, tmp_path):
    def deep(x):
        for _ in range(100):
            x = torch.sin(x) * 1.01 + x.mean()
        return x

    graph = lazytrace.trace_graph(deep, args=(torch.rand(4, 4),))
    assert len(graph.nodes) == 401          # and the check that `range` is no global of this module
    browser.errors.clear()
    browser.open(graph.show(tmp_path / "deep.html"))
    assert browser.errors == []
    assert browser.evaluate("document.querySelectorAll('g.node').length") == 404     # input, output, globals
    # opened at about one screen pixel per layout unit, not shrunk to fit 400 nodes in one screen
    scale = browser.evaluate("""(() => { const svg = document.querySelector('#canvas svg');
        return svg.getBoundingClientRect().width / svg.viewBox.baseVal.width; })()""")
    assert scale == pytest.approx(1.0, rel=0.05)
