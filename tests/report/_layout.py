"""Does anything on a report lie over anything else? Read in headless Chromium at a given width.

The blocks a reader looks at (tables, players, pictures, preformatted text, example cards, the
banner, headings and paragraphs) are measured with `getBoundingClientRect`, each clipped to every
ancestor that clips its overflow (a wide table scrolling inside its own box is not over its
neighbour, the part scrolled out of sight is nowhere). Two blocks are compared only when neither
holds the other: a player inside a table cell lies inside that table by design, but never over
another table, player or picture. Also reported: a page wider than the window (something sticks
out past its right edge).

    from _layout import overlaps
    overlaps(browser, 1400)  # [] when nothing overlaps
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: What is measured: the page's blocks, not inline text or table cells (cells of one table touch).
BLOCKS = "table, audio, video, img, canvas, pre, figure, .example, .banner, nav, h1, h2, h3, p"
TOLERANCE_PX = 1.0  # sub-pixel rounding where two boxes only touch

_MEASURE = """
const selector = arguments[0], tol = arguments[1];
function clipped(el) {
  const r = el.getBoundingClientRect();
  let box = {left: r.left, top: r.top, right: r.right, bottom: r.bottom};
  for (let a = el.parentElement; a && a !== document.documentElement; a = a.parentElement) {
    const cs = getComputedStyle(a);
    if (cs.overflowX !== 'visible' || cs.overflowY !== 'visible') {
      const c = a.getBoundingClientRect();
      box = {left: Math.max(box.left, c.left), top: Math.max(box.top, c.top),
             right: Math.min(box.right, c.right), bottom: Math.min(box.bottom, c.bottom)};
    }
  }
  return box;
}
function shown(el) {
  const cs = getComputedStyle(el);
  return cs.display !== 'none' && cs.visibility !== 'hidden' && el.getClientRects().length > 0;
}
function name(el) {
  const text = (el.getAttribute('title') || el.getAttribute('alt') || el.textContent || '').trim();
  return el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).split(' ')[0] : '') +
         ' "' + text.slice(0, 50).replace(/\\s+/g, ' ') + '"';
}
const els = Array.from(document.querySelectorAll(selector)).filter(shown);
const boxes = els.map(clipped);
const found = [];
for (let i = 0; i < els.length; i++) {
  const a = boxes[i];
  if (a.right - a.left <= tol || a.bottom - a.top <= tol) continue;
  for (let j = i + 1; j < els.length; j++) {
    if (els[i].contains(els[j]) || els[j].contains(els[i])) continue;
    const b = boxes[j];
    const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
    const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (w > tol && h > tol && found.length < 50)
      found.push({a: name(els[i]), b: name(els[j]), width: w, height: h,
                  a_box: [a.left, a.top, a.right, a.bottom].map(Math.round),
                  b_box: [b.left, b.top, b.right, b.bottom].map(Math.round)});
  }
}
return {overlaps: found, blocks: els.length, page_width: document.documentElement.scrollWidth,
        window_width: window.innerWidth};
"""


@dataclass
class Layout:
    """What one page measured at one width."""

    width: int
    blocks: int
    page_width: int
    overlaps: list[dict[str, Any]]

    def problems(self) -> list[str]:
        out = [f"at {self.width} px: {o['a']} {o['a_box']} overlaps {o['b']} {o['b_box']} "
               f"by {o['width']:.0f}×{o['height']:.0f} px" for o in self.overlaps]
        if self.page_width > self.width + TOLERANCE_PX:
            out.append(f"at {self.width} px: the page is {self.page_width} px wide (something sticks out)")
        return out


def measure(browser: Any, width: int, height: int = 1000) -> Layout:
    """The page the browser shows (after `_chromium.load`), laid out at `width` CSS pixels."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    try:
        res = browser.execute_script(_MEASURE, BLOCKS, TOLERANCE_PX)
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return Layout(width, int(res["blocks"]), int(res["page_width"]), list(res["overlaps"]))


def overlaps(browser: Any, width: int) -> list[str]:
    """Every overlap (and page overflow) at `width`, as one line each; empty when the layout is clean."""
    return measure(browser, width).problems()
