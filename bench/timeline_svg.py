#!/usr/bin/env python3
"""Draws a timeline file (HOROVOD_TIMELINE's Chrome-trace JSON, as hvdrun writes it) as an
SVG picture: one lane per collective (a trace "process"), each phase a bar, phases nested
inside their operation drawn below it, a tick for each rank seen ready during the
negotiation, and a vertical line for each global marker (CYCLE_START). Standard library
only. Usage: bench/timeline_svg.py TIMELINE.json OUT.svg [--from-ms A] [--to-ms B]
[--rows N] (at most N lanes, the first to start; default 12)."""
import argparse
import html
import json
import sys

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295"]
LANE_LABEL = 230  # px for the lane names
WIDTH = 1100
BAR = 14          # px per nesting level


def load(path):
    with open(path) as f:
        events = json.load(f)
    if not isinstance(events, list):
        sys.exit(f"timeline_svg: {path} is not a JSON array of trace events")
    return events


def spans(events):
    """Per lane: its name, bars (start, end, depth, phase) and ticks (ts, label)."""
    lanes = {}
    open_ = {}
    last_ts = 0
    markers = []
    for e in events:
        ph, pid, ts = e.get("ph"), e.get("pid"), e.get("ts", 0)
        last_ts = max(last_ts, ts)
        if ph == "M" and e.get("name") == "process_name":
            lanes.setdefault(pid, {"name": e["args"]["name"], "bars": [], "ticks": []})
        elif ph == "B":
            stack = open_.setdefault(pid, [])
            stack.append((ts, e.get("name", "?")))
        elif ph == "E":
            stack = open_.get(pid)
            if stack:
                start, name = stack.pop()
                lane = lanes.setdefault(pid, {"name": str(pid), "bars": [], "ticks": []})
                lane["bars"].append((start, ts, len(stack), name))
        elif ph == "X":
            lane = lanes.setdefault(pid, {"name": str(pid), "bars": [], "ticks": []})
            lane["ticks"].append((ts, e.get("name", "")))
        elif ph == "i":
            markers.append((ts, e.get("name", "")))
    for pid, stack in open_.items():  # phases still open when the file ended
        for depth, (start, name) in enumerate(stack):
            lanes.setdefault(pid, {"name": str(pid), "bars": [], "ticks": []})["bars"].append(
                (start, last_ts, depth, name))
    return lanes, markers


def render(lanes, markers, lo, hi, max_rows):
    chosen = sorted((lane for lane in lanes.values() if lane["bars"]),
                    key=lambda lane: min(b[0] for b in lane["bars"]))
    chosen = [lane for lane in chosen if any(b[1] >= lo and b[0] <= hi for b in lane["bars"])]
    chosen = chosen[:max_rows]
    span = max(hi - lo, 1)
    scale = (WIDTH - LANE_LABEL - 20) / span
    x = lambda t: LANE_LABEL + (min(max(t, lo), hi) - lo) * scale  # noqa: E731
    colours, legend = {}, []
    out, y = [], 40
    for lane in chosen:
        depth = max(b[2] for b in lane["bars"]) + 1
        h = depth * BAR + 8
        out.append(f'<text x="4" y="{y + 12}" class="lane">{html.escape(lane["name"])}</text>')
        out.append(f'<line x1="0" x2="{WIDTH}" y1="{y + h}" y2="{y + h}" class="sep"/>')
        for start, end, d, name in sorted(lane["bars"], key=lambda b: b[2]):
            if end < lo or start > hi:
                continue
            if name not in colours:
                colours[name] = PALETTE[len(colours) % len(PALETTE)]
                legend.append(name)
            x0, x1 = x(start), x(end)
            out.append(f'<rect x="{x0:.1f}" y="{y + 2 + d * BAR}" width="{max(x1 - x0, 0.8):.1f}" '
                       f'height="{BAR - 2}" fill="{colours[name]}"><title>{html.escape(name)}: '
                       f'{(end - start) / 1000:.3f} ms</title></rect>')
        for ts, label in lane["ticks"]:
            if lo <= ts <= hi:
                out.append(f'<line x1="{x(ts):.1f}" x2="{x(ts):.1f}" y1="{y}" y2="{y + 4}" '
                           f'class="tick"><title>rank {html.escape(label)} ready</title></line>')
        y += h
    for ts, label in markers:
        if lo <= ts <= hi:
            out.append(f'<line x1="{x(ts):.1f}" x2="{x(ts):.1f}" y1="30" y2="{y}" class="mark">'
                       f'<title>{html.escape(label)}</title></line>')
    # The time axis, in milliseconds from the window's start.
    axis = [f'<line x1="{LANE_LABEL}" x2="{WIDTH - 20}" y1="30" y2="30" class="sep"/>']
    for k in range(6):
        t = lo + span * k / 5
        axis.append(f'<text x="{x(t):.1f}" y="24" class="axis">{(t - lo) / 1000:.2f} ms</text>')
    legend_y = y + 24
    items = []
    for i, name in enumerate(legend):
        lx, ly = 4 + (i % 4) * 270, legend_y + (i // 4) * 18
        items.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" '
                     f'fill="{colours[name]}"/><text x="{lx + 16}" y="{ly}" class="lane">'
                     f'{html.escape(name)}</text>')
    height = legend_y + (len(legend) + 3) // 4 * 18 + 10
    style = ("<style>.lane{font:11px sans-serif}.axis{font:10px sans-serif;text-anchor:middle}"
             ".sep{stroke:#ccc}.tick{stroke:#000}.mark{stroke:#c00;stroke-dasharray:3 3}</style>")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}">{style}'
            f'<rect width="100%" height="100%" fill="#fff"/>' + "".join(axis + out + items)
            + "</svg>\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline")
    ap.add_argument("svg")
    ap.add_argument("--from-ms", type=float, default=None)
    ap.add_argument("--to-ms", type=float, default=None)
    ap.add_argument("--rows", type=int, default=12)
    a = ap.parse_args()
    lanes, markers = spans(load(a.timeline))
    stamps = [t for lane in lanes.values() for b in lane["bars"] for t in b[:2]]
    if not stamps:
        sys.exit(f"timeline_svg: {a.timeline} holds no phases to draw")
    lo = min(stamps) if a.from_ms is None else a.from_ms * 1000
    hi = max(stamps) if a.to_ms is None else a.to_ms * 1000
    with open(a.svg, "w") as f:
        f.write(render(lanes, markers, lo, hi, a.rows))


if __name__ == "__main__":
    main()
