"""Render an HTML report in headless Chromium and check it: no page error, every expected chart is
a plotly figure laid out at a visible size with drawn content and data points, every trace has
hover text, and hovering a point shows it; the page fetched nothing (no remote or local asset); the
table rows drawn highlighted (the winner, or every fleet of a tie) are listed.
Also takes a screenshot (the first screen, or the whole page) for a human to look at.

    python -m benchmarks.browser_check out/report.html [--screenshot out/report.png] [--first-screen]

Needs Debian's `chromium` (apt-get install -y chromium) or $COSTMODEL_CHROMIUM.
"""

from __future__ import annotations

import argparse
import html as htmllib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--disable-default-apps", "--mute-audio")
# Collects page errors from the first script on.
ERRORS = "<script>window.__errors=[];window.addEventListener('error',function(e){window.__errors.push(String(e.message||e))});</script>"
# After load: measures every chart, hovers its first point, lists every resource the page requested, into the DOM.
PROBE = """<script>
window.addEventListener('load', function(){ setTimeout(function(){
  var out = {charts: [], resources: [], errors: window.__errors || []};
  document.querySelectorAll('figure[data-chart]').forEach(function(f){
    var gd = f.querySelector('.js-plotly-plot'), r = f.getBoundingClientRect(), c = {key: f.getAttribute('data-chart'),
      title: f.getAttribute('data-title'), width: r.width, height: r.height, traces: 0, points: 0, drawn: 0, hover_templates: 0, hover_text: ''};
    if (gd && gd.data) {
      c.traces = gd.data.length;
      gd.data.forEach(function(t){ if (t.hovertemplate) c.hover_templates += 1; });
      var lens = (gd.calcdata || []).map(function(cd){ return cd.filter(function(p){ return p.x !== undefined && p.y !== undefined; }).length; });
      lens.forEach(function(n){ c.points += n; });
      c.drawn = gd.querySelectorAll('.main-svg path, .main-svg .point, .main-svg rect').length;
      var first = lens.findIndex(function(n){ return n > 0; });
      try { if (first >= 0) { Plotly.Fx.hover(gd, [{curveNumber: first, pointNumber: 0}]); }
            var hl = gd.querySelector('.hoverlayer'); c.hover_text = hl ? hl.textContent : ''; Plotly.Fx.unhover(gd); }
      catch (e) { out.errors.push('hover: ' + e.message); }
    }
    out.charts.push(c);
  });
  out.highlighted = [];
  document.querySelectorAll('tr.win, tr.tie').forEach(function(tr){
    var bg = getComputedStyle(tr.cells[0]).backgroundColor;
    if (bg && bg !== 'rgba(0, 0, 0, 0)' && bg !== 'transparent') {
      out.highlighted.push({kind: tr.classList.contains('tie') ? 'tie' : 'win', cells: Array.prototype.map.call(tr.cells, function(c){ return c.textContent; })});
    }
  });
  performance.getEntriesByType('resource').forEach(function(e){ out.resources.push(e.name); });
  var pre = document.createElement('pre'); pre.id = 'costmodel-probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 300); });
</script>"""


@dataclass
class BrowserCheck:
    chromium: str
    charts: list[dict] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    highlighted: list[dict] = field(default_factory=list)  # table rows drawn highlighted: {"kind": "win" | "tie", "cells": [text, ...]}

    @property
    def ok(self) -> bool:
        return not self.problems


def find_chromium() -> str | None:
    env = os.environ.get("COSTMODEL_CHROMIUM")
    if env:
        return env if Path(env).exists() or shutil.which(env) else None
    for name in CANDIDATES:
        p = shutil.which(name)
        if p:
            return p
    return None


def _run(chromium: str, args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="costmodel-chromium-") as profile:
        cmd = [chromium, *FLAGS, f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)


def dump_dom(chromium: str, html_path: Path, timeout_s: float = 90) -> str:
    r = _run(chromium, ["--virtual-time-budget=8000", "--dump-dom", html_path.resolve().as_uri()], timeout_s)
    if r.returncode != 0 or "<html" not in r.stdout:
        raise RuntimeError(f"chromium failed (exit {r.returncode}): {r.stderr.strip()[-400:]}")
    return r.stdout


def screenshot(chromium: str, html_path: Path, png_path: Path, width: int = 1280, height: int = 5200, timeout_s: float = 90) -> Path:
    png_path.parent.mkdir(parents=True, exist_ok=True)
    r = _run(chromium, [f"--screenshot={png_path.resolve()}", f"--window-size={width},{height}", "--hide-scrollbars",
                        html_path.resolve().as_uri()], timeout_s)
    if r.returncode != 0 or not png_path.exists():
        raise RuntimeError(f"chromium screenshot failed (exit {r.returncode}): {r.stderr.strip()[-400:]}")
    return png_path


def static_remote_refs(page: str) -> list[str]:
    """Attributes or CSS in the page source that would fetch something (src/href to a URL, @import, url(http...));
    the text of inline scripts (the bundled plotly.js names URLs in strings it never fetches) is left out."""
    page = re.sub(r"(<script\b[^>]*>).*?(</script>)", r"\1\2", page, flags=re.S | re.I)
    hits = re.findall(r'''(?:\bsrc|\bhref)\s*=\s*["']((?:https?:|//|file:)[^"']*)''', page, flags=re.I)
    hits += re.findall(r"url\(\s*['\"]?((?:https?:|//)[^)'\"]*)", page, flags=re.I)
    hits += re.findall(r"@import[^;]*", page, flags=re.I)
    hits += re.findall(r"<link\b[^>]*>", page, flags=re.I)
    hits += re.findall(r"<script\b[^>]*\bsrc=[^>]*>", page, flags=re.I)
    return hits


def check_html(html_path: str | Path, expected=None, chromium: str | None = None,
               min_width: float = 300, min_height: float = 150) -> BrowserCheck:
    """Render `html_path` (a temporary copy with the error collector and the probe added) and check
    the charts: `expected` chart keys (default: every <figure data-chart> in the page) must render."""
    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("chromium not found; apt-get install -y chromium, or set COSTMODEL_CHROMIUM")
    html_path = Path(html_path)
    page = html_path.read_text(encoding="utf-8")
    res = BrowserCheck(chromium)
    for ref in static_remote_refs(page):
        res.problems.append(f"page source references an external resource: {ref[:120]}")
    expected = list(expected) if expected is not None else re.findall(r'<figure data-chart="(\w+)"', page)
    with tempfile.TemporaryDirectory(prefix="costmodel-check-") as d:
        probe_path = Path(d) / html_path.name
        probe_path.write_text(page.replace("<head>", "<head>" + ERRORS, 1).replace("</body>", PROBE + "</body>", 1), encoding="utf-8")
        dom = dump_dom(chromium, probe_path)
    m = re.search(r'<pre id="costmodel-probe">(.*?)</pre>', dom, flags=re.S)
    if not m:
        res.problems.append("the measuring script did not run: the page did not finish rendering")
        return res
    data = json.loads(htmllib.unescape(m.group(1)))
    res.charts, res.resources, res.errors, res.highlighted = data["charts"], data["resources"], data["errors"], data["highlighted"]
    res.problems += [f"page error: {x}" for x in res.errors] + [f"the page requested {r}" for r in res.resources]
    by_key = {c["key"]: c for c in res.charts}
    for k in expected:
        c = by_key.get(k)
        if c is None:
            res.problems.append(f"no chart {k!r} (found {sorted(by_key)})")
        elif c["width"] < min_width or c["height"] < min_height:
            res.problems.append(f"chart {k!r} renders at {c['width']:.0f}x{c['height']:.0f} px, smaller than {min_width:.0f}x{min_height:.0f}")
        elif c["points"] == 0 or c["drawn"] < 10:
            res.problems.append(f"chart {k!r} is empty: {c['points']} data points, {c['drawn']} drawn elements")
        elif c["hover_templates"] < c["traces"] or not c["hover_text"].strip():
            res.problems.append(f"chart {k!r} lacks hover data: {c['hover_templates']} of {c['traces']} traces have hover text, "
                                f"hovering its first point showed {c['hover_text'][:60]!r}")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Render a costmodel HTML report in headless Chromium and check its charts.")
    ap.add_argument("html")
    ap.add_argument("--screenshot", default=None, help="also write a PNG here")
    ap.add_argument("--first-screen", action="store_true", help="the screenshot is the first screen (1280 x 900), not the whole page")
    args = ap.parse_args(argv)
    if not Path(args.html).exists():
        print(f"error: {args.html} does not exist; pass the HTML written by `costmodel report ... -o out.html`", file=sys.stderr)
        return 2
    chromium = find_chromium()
    if chromium is None:
        print("error: chromium not found; apt-get install -y chromium, or set COSTMODEL_CHROMIUM", file=sys.stderr)
        return 2
    res = check_html(args.html, chromium=chromium)
    for c in res.charts:
        print(f"chart {c['key']!r}: {c['width']:.0f}x{c['height']:.0f} px, {c['traces']} traces, {c['points']} points, {c['drawn']} drawn "
              f"elements, hover {c['hover_text'][:70]!r}")
    print(f"resources requested: {len(res.resources)}")
    if args.screenshot:
        print(f"screenshot: {screenshot(chromium, Path(args.html), Path(args.screenshot), height=900 if args.first_screen else 5200)}")
    for p in res.problems:
        print(f"PROBLEM: {p}")
    print("OK" if res.ok else "FAILED")
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
