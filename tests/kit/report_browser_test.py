#!/usr/bin/env python3
"""`headroom report --html` looked at in a real browser (headless Chromium) at 1280 px.

Real journals (tests/fixtures/journal: a climb sampled every 200 ms, a cgroup born and killed
between two samples). For each page: nothing runs off the page to the right (the document is no
wider than the window, and a screenshot's right edge is bare background), the report's sentence
is said once, and the chart's time axis spans the data it has (the parts fill most of the plot,
not a sliver at its right edge). Chromium is a test dependency (deploy/install-deps.sh).
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SOURCE = os.environ["HEADROOM_SOURCE_DIR"]
HEADROOM = os.environ["HEADROOM_BINARY"]
WIDTH = 1280
FIXTURES = ["linux-6.18-memcg-v1-climb.hrj", "linux-6.18-memcg-v1-brief.hrj"]

# Run in the page once it has laid out: its measurements, put where --dump-dom shows them.
PROBE = """<script>
(function() {
  const d = document.documentElement;
  const summary = document.querySelector('.summary').innerText.trim();
  const svg = document.querySelector('figure svg');
  const svgText = svg ? svg.textContent : '';
  const page = document.body.innerText + svgText;
  let axis = [], parts = null, plot = null;
  if (svg) {
    for (const l of svg.querySelectorAll('#x-axis line')) axis.push(parseFloat(l.getAttribute('x1')));
    const grid = svg.querySelector('#y-axis line');
    if (grid) plot = [parseFloat(grid.getAttribute('x1')), parseFloat(grid.getAttribute('x2'))];
    const g = svg.querySelector('#parts');
    if (g && g.children.length) { const b = g.getBBox(); parts = [b.x, b.x + b.width]; }
  }
  const out = {scrollWidth: d.scrollWidth, clientWidth: d.clientWidth,
               svgRight: svg ? svg.getBoundingClientRect().right : null,
               summaryCount: page.split(summary).length - 1, axis: axis, plot: plot, parts: parts};
  document.body.setAttribute('data-probe', JSON.stringify(out));
})();
</script>"""


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("chromium is not installed: run deploy/install-deps.sh (it is a test dependency)")


def browse(browser, url, *args):
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           f"--window-size={WIDTH},1600", *args, url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit, non-interlaced RGB or RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = ihdr
    assert depth == 8 and colour in (2, 6) and interlace == 0, f"unexpected PNG format {ihdr}"
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def check(browser, journal, work):
    name = os.path.basename(journal)
    html = os.path.join(work, name + ".html")
    r = subprocess.run([HEADROOM, "report", "--journal", journal, "--html", html], capture_output=True, text=True)
    assert r.returncode == 0, f"{name}: headroom report failed: {r.stderr}"
    page = open(html, encoding="utf-8").read()
    assert "<script" not in page, f"{name}: the report itself must hold no script"
    probe = os.path.join(work, name + ".probe.html")
    with open(probe, "w", encoding="utf-8") as f:
        f.write(page.replace("</body>", PROBE + "</body>"))
    dom = browse(browser, "file://" + probe, "--dump-dom", "--virtual-time-budget=2000")
    m = re.search(r"data-probe=\"([^\"]*)\"", dom)
    assert m, f"{name}: the probe did not run:\n{dom[-2000:]}"
    facts = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    print(f"{name}: {facts}")
    assert facts["scrollWidth"] <= facts["clientWidth"], f"{name}: the page is wider than the window: {facts}"
    assert facts["svgRight"] is not None and facts["svgRight"] <= WIDTH, f"{name}: the chart runs off: {facts}"
    assert facts["summaryCount"] == 1, f"{name}: the report's sentence is said {facts['summaryCount']} times"
    axis, parts, plot = facts["axis"], facts["parts"], facts["plot"]
    assert axis and parts and plot, f"{name}: no axis, plot or parts drawn: {facts}"
    span = max(axis) - plot[0]  # from the plot's left edge to the kill (t = 0)
    covered = (parts[1] - parts[0]) / span if span > 0 else 0
    points = len(json.loads(subprocess.run([HEADROOM, "report", "--journal", journal, "--json"], capture_output=True,
                                           text=True).stdout)["flight"]["points"])
    if points > 1:
        assert covered >= 0.8, f"{name}: the data fills {covered:.0%} of the time axis: {facts}"

    shot = os.path.join(work, name + ".png")
    browse(browser, "file://" + html, f"--screenshot={shot}")
    width, height, rows = png_pixels(shot)
    assert width == WIDTH, f"{name}: screenshot {width} px wide"
    background = rows[0][-1]
    edge = [rows[y][x] for y in range(height) for x in range(WIDTH - 12, WIDTH)]
    assert all(p == background for p in edge), f"{name}: something reaches the right edge of the screenshot"
    drawn = sum(1 for y in range(0, height, 4) for x in range(0, WIDTH, 4) if rows[y][x] != background)
    assert drawn > 0.02 * (height // 4) * (WIDTH // 4), f"{name}: the screenshot is nearly empty"
    print(f"{name}: {width}x{height} screenshot, right edge bare, {drawn} drawn samples; axis covered {covered:.0%}")


def main():
    browser = chromium()
    with tempfile.TemporaryDirectory(prefix="headroom-browser-") as work:
        os.environ["HOME"] = work  # Chromium's profile and caches go here, not into the caller's home
        for f in FIXTURES:
            check(browser, os.path.join(SOURCE, "tests", "fixtures", "journal", f), work)
    print("ok")


if __name__ == "__main__":
    main()
