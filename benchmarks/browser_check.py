"""Render an HTML report in headless Chromium and check it: every expected chart is an <svg> with
its <title>, laid out at a visible size with drawn content, and the page fetched nothing (no
remote or local asset). Also takes a screenshot for a human to look at.

    python -m benchmarks.browser_check out/report.html [--screenshot out/report.png]

Needs Debian's `chromium` (apt-get install -y chromium) or $COSTMODEL_CHROMIUM.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from reports.charts import TITLES

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--disable-default-apps", "--mute-audio")
# Measures every chart as laid out, and lists every resource the page requested, into the DOM.
PROBE = """<script>
(function(){
  var out = {charts: [], resources: []};
  document.querySelectorAll('svg[data-chart]').forEach(function(s){
    var r = s.getBoundingClientRect(), t = s.querySelector('title');
    out.charts.push({key: s.getAttribute('data-chart'), title: t ? t.textContent : null, width: r.width, height: r.height,
                     drawn: s.querySelectorAll('path,line,polyline,rect,use,text').length});
  });
  performance.getEntriesByType('resource').forEach(function(e){ out.resources.push(e.name); });
  var pre = document.createElement('pre'); pre.id = 'costmodel-probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


@dataclass
class BrowserCheck:
    chromium: str
    charts: list[dict] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

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
    r = _run(chromium, ["--virtual-time-budget=5000", "--dump-dom", html_path.resolve().as_uri()], timeout_s)
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
    """Attributes or CSS in the page source that would fetch something (src/href to a URL, @import, url(http...))."""
    hits = re.findall(r'''(?:\bsrc|\bhref)\s*=\s*["']((?:https?:|//|file:)[^"']*)''', page, flags=re.I)
    hits += re.findall(r"url\(\s*['\"]?((?:https?:|//)[^)'\"]*)", page, flags=re.I)
    hits += re.findall(r"@import[^;]*", page, flags=re.I)
    hits += re.findall(r"<link\b[^>]*>", page, flags=re.I)
    hits += re.findall(r"<script\b[^>]*\bsrc=[^>]*>", page, flags=re.I)
    return hits


def check_html(html_path: str | Path, expected=tuple(TITLES.values()), chromium: str | None = None,
               min_width: float = 300, min_height: float = 150) -> BrowserCheck:
    """Render `html_path` (with a measuring script appended to a temporary copy) and check the charts."""
    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("chromium not found; apt-get install -y chromium, or set COSTMODEL_CHROMIUM")
    html_path = Path(html_path)
    page = html_path.read_text(encoding="utf-8")
    res = BrowserCheck(chromium)
    for ref in static_remote_refs(page):
        res.problems.append(f"page source references an external resource: {ref[:120]}")
    with tempfile.TemporaryDirectory(prefix="costmodel-check-") as d:
        probe_path = Path(d) / html_path.name
        probe_path.write_text(page.replace("</body>", PROBE + "</body>", 1), encoding="utf-8")
        dom = dump_dom(chromium, probe_path)
    m = re.search(r'<pre id="costmodel-probe">(.*?)</pre>', dom, flags=re.S)
    if not m:
        res.problems.append("the measuring script did not run: the page did not finish rendering")
        return res
    import html as htmllib

    data = json.loads(htmllib.unescape(m.group(1)))
    res.charts, res.resources = data["charts"], data["resources"]
    for r in res.resources:
        res.problems.append(f"the page requested {r}")
    titles = {c["title"]: c for c in res.charts}
    for t in expected:
        c = titles.get(t)
        if c is None:
            res.problems.append(f"no chart titled {t!r} (found {sorted(x for x in titles if x)})")
        elif c["width"] < min_width or c["height"] < min_height:
            res.problems.append(f"chart {t!r} renders at {c['width']:.0f}x{c['height']:.0f} px, smaller than {min_width:.0f}x{min_height:.0f}")
        elif c["drawn"] < 10:
            res.problems.append(f"chart {t!r} has only {c['drawn']} drawn elements")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Render a costmodel HTML report in headless Chromium and check its charts.")
    ap.add_argument("html")
    ap.add_argument("--screenshot", default=None, help="also write a full-page PNG here")
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
        print(f"chart {c['title']!r}: {c['width']:.0f}x{c['height']:.0f} px, {c['drawn']} drawn elements")
    print(f"resources requested: {len(res.resources)}")
    if args.screenshot:
        print(f"screenshot: {screenshot(chromium, Path(args.html), Path(args.screenshot))}")
    for p in res.problems:
        print(f"PROBLEM: {p}")
    print("OK" if res.ok else "FAILED")
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
