"""Pictures of a Graph: DOT text, SVG/PNG images (Graphviz) and a self-contained HTML view.

`layout(graph)` turns a graph into boxes and arrows (inputs, framework calls,
cached constants, random generators, guards, stateful reads and writes,
outputs) with a tooltip text each; `to_dot` writes them as Graphviz DOT with
the python `graphviz` package (no `dot` binary needed); `render` and
`to_html` run Graphviz's `dot` to lay them out. The HTML page embeds that SVG,
the generated source and a small script (pan, zoom, search, hover details,
highlight of what a node depends on and feeds): it fetches nothing.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .graph.codegen import node_lines
from .graph.ir import Kind, Source, Value
from .graph.stateful import read_attribute

#: how each kind of box looks: (shape, fill colour, border colour, legend text)
STYLES = {
    "input": ("box", "#d9f2d9", "#3d8b3d", "input"),
    "output": ("box", "#d9f2d9", "#3d8b3d", "output"),
    "op": ("box", "#e3ecfa", "#4a6fa5", "framework call"),
    "constant": ("cylinder", "#fff1c2", "#b38f00", "cached constant"),
    "external": ("cylinder", "#f2e6d9", "#8c6239", "external array"),
    "generator": ("box", "#f5dcf5", "#9b3d9b", "random generator"),
    "guard": ("diamond", "#fde0dc", "#c0392b", "guard (value read back)"),
    "state": ("box", "#eeeeee", "#666666", "global state change"),
    "getattr": ("box", "#d6f0f0", "#2e8585", "stateful read"),
    "setattr": ("box", "#cfe3ef", "#1f5f8b", "stateful write"),
}
_NODE_KINDS = {Kind.OP: "op", Kind.GENERATOR: "generator", Kind.GUARD: "guard", Kind.STATE: "state",
               Kind.GETATTR: "getattr", Kind.SETATTR: "setattr"}


class GraphvizMissing(RuntimeError):
    """Drawing needs Graphviz's `dot` program (or the python `graphviz` package)."""


@dataclass
class Box:
    id: str
    kind: str
    label: str
    details: list = field(default_factory=list)     # lines shown on hover


@dataclass
class Layout:
    name: str
    boxes: list
    edges: list                  # (from id, to id, text, is_write)
    source: str
    summary: dict


def layout(graph) -> Layout:
    """The boxes and arrows of a graph, with what each shows on hover."""
    source = graph.source                  # names values (a0, v3, c1) as in the generated code
    backend, plan = graph.backend, graph._plan
    lines = node_lines(backend, plan, plan.inputs)
    meta = _meta_text(backend)
    boxes, edges, home = [], [], {}

    for i, v in enumerate(plan.inputs):
        home[id(v)] = f"in{i}"
        boxes.append(Box(f"in{i}", "input", f"{v.path or v.name}\n{meta(v)}",
                         [f"input {v.name} ({v.path})" if v.path else f"input {v.name}", meta(v)]))
    for v in plan.constants:
        external = v.source is Source.EXTERNAL
        home[id(v)] = f"const_{v.name}"
        what = "array" if isinstance(v.obj, backend.array_types) else "object"
        boxes.append(Box(home[id(v)], "external" if external else "constant",
                         f"{v.name}{' (external)' if external else ' (cached)'}\n{meta(v)}",
                         [f"external {what} {v.name}: reached by the function itself, referenced, not copied"
                          if external else f"constant {v.name}: computed once when traced, made by "
                          f"{_call_name(backend, v.node)}" if v.node is not None else
                          f"constant {v.name}: computed once when traced (loaded from the persistent cache, "
                          f"which keeps no call that made it)", meta(v)]))
    for node, line in zip(plan.nodes, lines):
        box_id = f"n{node.position}"
        kind = _NODE_KINDS[node.kind]
        name = _call_name(backend, node)
        outs = [f"{v.name}: {meta(v)}" for v in node.outputs if v.name != "_"]
        ins = [f"{v.name}: {meta(v)}" for v in node.inputs]
        boxes.append(Box(box_id, kind, name, [f"{kind}: {name}", line.strip()] + ["in  " + x for x in ins]
                         + ["out " + x for x in outs] + (["writes " + ", ".join(m.name for m in node.mutated)]
                                                         if node.mutated else [])))
        for v in node.outputs:
            home.setdefault(id(v), box_id)
        for v in dict.fromkeys(node.inputs):
            if id(v) in home:
                edges.append((home[id(v)], box_id, f"{v.name} {meta(v)}", False))
        for m in node.mutated:
            if id(m) in home and home[id(m)] != box_id:
                edges.append((box_id, home[id(m)], f"writes {m.name}", True))
    for i, (path, v) in enumerate(_output_paths(plan.output_structure)):
        box_id = f"out{i}"
        boxes.append(Box(box_id, "output", f"{path}\n{meta(v)}", [f"output {path} = {v.name}", meta(v)]))
        if id(v) in home:
            edges.append((home[id(v)], box_id, f"{v.name} {meta(v)}", False))
    dropped = graph.dropped
    summary = {"call": len(plan.nodes), "input": len(plan.inputs), "constant": len(plan.constants),
               "folded call": dropped["folded"], "pruned call": len(dropped["pruned"]),
               "guard": sum(n.kind is Kind.GUARD for n in plan.nodes)}
    return Layout(graph.__name__, boxes, edges, source, summary)


def _meta_text(backend):
    def meta(v: Value) -> str:
        return backend.format_brief(v.meta) if isinstance(v.meta, tuple) else str(v.meta or "")
    return meta


def _call_name(backend, node) -> str:
    if node.kind in (Kind.GETATTR, Kind.SETATTR) or node.target in (getattr, setattr, read_attribute) \
            and len(node.args) > 1:
        verb = "read" if node.kind is not Kind.SETATTR else "delete" if node.target is delattr else "write"
        return f"{verb} .{node.args[1]}"
    if hasattr(node.target, "label"):       # a check of a global or closure variable (graph/reads.py)
        return node.target.label(node)
    return backend.qualified_name(node.target)


def _output_paths(structure, path="out"):
    if isinstance(structure, Value):
        yield path, structure
    elif isinstance(structure, (tuple, list)):
        for i, x in enumerate(structure):
            yield from _output_paths(x, f"{path}[{i}]")
    elif isinstance(structure, dict):
        for k, x in structure.items():
            yield from _output_paths(x, f"{path}[{k!r}]")


# ---- DOT and images ---------------------------------------------------------------------

def _digraph(lay: Layout, background="transparent"):
    try:
        import graphviz
    except ImportError:
        raise GraphvizMissing("drawing graphs needs the python 'graphviz' package: "
                              "pip install 'lazytrace[view]'") from None
    dot = graphviz.Digraph(lay.name, graph_attr={"rankdir": "TB", "nodesep": "0.25", "ranksep": "0.35",
                                                 "fontname": "Helvetica", "bgcolor": background},
                           node_attr={"fontname": "Helvetica", "fontsize": "11", "style": "rounded,filled",
                                      "penwidth": "1.2", "height": "0.3", "margin": "0.12,0.05"},
                           edge_attr={"color": "#7a869a", "arrowsize": "0.6", "penwidth": "1.0"})
    for box in lay.boxes:
        shape, fill, border, _ = STYLES[box.kind]
        style = "filled" if shape in ("cylinder", "diamond") else "rounded,filled"
        dot.node(box.id, box.label, shape=shape, fillcolor=fill, color=border, style=style,
                 tooltip="\n".join(box.details), id=box.id,
                 **{"class": f"lt-{box.kind}"})
    for i, (a, b, text, write) in enumerate(lay.edges):
        extra = {"style": "dashed", "color": "#c0392b", "constraint": "false"} if write else {}
        dot.edge(a, b, id=f"e{i}", tooltip=text, **extra)
    return dot


def to_dot(graph) -> str:
    """Graphviz DOT source of the graph (needs no `dot` program)."""
    return _digraph(layout(graph)).source


def _require_dot():
    if shutil.which("dot") is None:
        raise GraphvizMissing("drawing graphs needs Graphviz's 'dot' program, which is not on PATH: "
                              "install Graphviz (Debian/Ubuntu: apt-get install graphviz; "
                              "macOS: brew install graphviz; conda: conda install graphviz)")


def _pipe(lay: Layout, fmt: str, background="transparent") -> bytes:
    _require_dot()
    return _digraph(lay, background=background).pipe(format=fmt)


def render(graph, path, format: str | None = None) -> Path:
    """Write a picture of the graph; the format comes from the suffix (.svg, .png, .pdf) unless given."""
    path = Path(path)
    fmt = (format or path.suffix.lstrip(".")).lower()
    if fmt not in ("svg", "png", "pdf"):
        raise ValueError(f"cannot tell the image format of {str(path)!r}: use a .svg, .png or .pdf name "
                         f"or format='svg'/'png'/'pdf'")
    path.write_bytes(_pipe(layout(graph), fmt, background="white"))
    return path


# ---- HTML ---------------------------------------------------------------------------------

def to_html(graph) -> str:
    """A self-contained interactive page: the laid-out SVG, the source, a legend; no network."""
    lay = layout(graph)
    svg = _pipe(lay, "svg").decode()
    svg = svg[svg.index("<svg"):]                   # drop the XML prolog and doctype
    data = {"boxes": {b.id: {"kind": b.kind, "details": b.details} for b in lay.boxes},
            "edges": [[f"e{i}", a, b, text] for i, (a, b, text, _) in enumerate(lay.edges)]}
    legend = "".join(f'<span class="key"><i style="background:{fill};border-color:{border}"></i>{html.escape(text)}'
                     f'</span>' for kind, (_, fill, border, text) in STYLES.items()
                     if any(b.kind == kind for b in lay.boxes))
    summary = " · ".join(f"{n} {what}{'' if n == 1 else 's'}" for what, n in lay.summary.items())
    page = resources.files("lazytrace").joinpath("view.html").read_text()
    replacements = {"TITLE": html.escape(lay.name), "SUMMARY": html.escape(summary), "LEGEND": legend,
                    "SOURCE": html.escape(lay.source), "SVG": svg,
                    "DATA": json.dumps(data).replace("</", "<\\/")}
    return re.sub(r"\{\{(\w+)\}\}", lambda m: replacements[m[1]], page)   # one pass: values stay as they are


def show(graph, path=None) -> Path:
    """Write the HTML view (to `path`, or a file in the temp directory); in a notebook, display it."""
    page = to_html(graph)
    if path is None:
        folder = Path(tempfile.gettempdir()) / "lazytrace"
        folder.mkdir(exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f"{_file_stem(graph.__name__)}-", suffix=".html", dir=folder)
        os.close(fd)
        path = name
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    _display_in_notebook(page)
    return path


def _file_stem(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name) or "graph"


def _display_in_notebook(page: str) -> None:
    import sys
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or "IPKernelApp" not in getattr(shell, "config", {}):
        return
    from IPython.display import HTML, display
    display(HTML(f'<iframe srcdoc="{html.escape(page)}" style="width:100%;height:640px;border:1px solid #ccc">'
                 f'</iframe>'))
