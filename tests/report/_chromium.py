"""Headless Chromium for the report tests: launch it offline, load a report, read what the page shows.

Used by the fixtures in conftest.py and, run as a script, to take the screenshot of a report that
the docs show:

    .venv/bin/python tests/report/_chromium.py screenshot PAGE.html OUT.png [--width 1280 --height 1600]
    .venv/bin/python tests/report/_chromium.py demo-shots demo-out docs/images   # the README's five
    .venv/bin/python tests/report/_chromium.py section-shot demo-out/doctor.html m-profile \
        docs/images/doctor-profile.png   # one section of a page (docs/families.md's profile picture)

Nothing here downloads anything: the driver is Debian's chromedriver named by path (so selenium's
manager is never consulted, and a guard makes sure of it), and the browser's host resolver maps
every name to nowhere, so a page that reached for the network would show it as an error.
"""

from __future__ import annotations

import argparse
import base64
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

CHROMIUM_NAMES = ("chromium", "chromium-browser")
CHROMEDRIVER_NAMES = ("chromedriver",)
CHROMIUM_DEFAULT = "/usr/bin/chromium"  # where Debian's packages put them
CHROMEDRIVER_DEFAULT = "/usr/bin/chromedriver"
PAGE_TIMEOUT_S = 30  # loading one report (the largest embed a few MB of data URIs)
MEDIA_TIMEOUT_MS = 8000  # one <audio> reaching its metadata


def _which(names: tuple[str, ...], default: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return default if Path(default).is_file() else None


def find_browser() -> tuple[str, str] | str:
    """(chromium, chromedriver) paths, or the reason the browser tests cannot run."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    chromium = _which(CHROMIUM_NAMES, CHROMIUM_DEFAULT)
    driver = _which(CHROMEDRIVER_NAMES, CHROMEDRIVER_DEFAULT)
    if chromium is None:
        return "chromium is not installed (apt-get install -y chromium)"
    if driver is None:
        return "chromedriver is not installed (apt-get install -y chromium-driver)"
    return chromium, driver


def launch(chromium: str, driver: str, width: int = 1280, height: int = 1600) -> Any:
    """A headless Chromium under chromedriver, console log captured, every step bounded in time."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.selenium_manager import SeleniumManager

    opts = Options()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--hide-scrollbars", "--mute-audio",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--host-resolver-rules=MAP * ~NOTFOUND"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    refuse = AssertionError("selenium's manager was asked for a driver (it would download one)")
    with mock.patch.object(SeleniumManager, "binary_paths", side_effect=refuse):
        browser = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    browser.set_page_load_timeout(PAGE_TIMEOUT_S)
    browser.set_script_timeout(PAGE_TIMEOUT_S)
    return browser


# Runs in the page once it has loaded: each <audio> is asked for its metadata in turn (the reports
# say preload="none", so nothing decodes until asked), each <img> is read, and every reference
# the page makes is listed so the test can tell the page needs nothing outside itself.
_INSPECT = """
const done = arguments[arguments.length - 1];
const limit = arguments[0];
function media(a) {
  return new Promise(resolve => {
    let settled = false;
    const finish = why => {
      if (settled) return;
      settled = true;
      resolve({label: a.title || '', ready: a.readyState, duration: String(a.duration),
               error: a.error ? a.error.code + ' ' + (a.error.message || '') : null, why: why,
               mime: (a.currentSrc || a.src || '').slice(0, 40).split(';')[0]});
    };
    a.addEventListener('loadedmetadata', () => finish('loadedmetadata'), {once: true});
    a.addEventListener('error', () => finish('error'), {once: true});
    setTimeout(() => finish('timeout'), limit);
    if (a.readyState >= 1) { finish('ready'); return; }
    a.preload = 'metadata';
    a.load();
  });
}
(async () => {
  const audio = [];
  for (const a of document.querySelectorAll('audio')) audio.push(await media(a));
  const images = Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete,
                                                         width: i.naturalWidth, height: i.naturalHeight}));
  const refs = [];
  for (const el of document.querySelectorAll('*')) {
    for (const at of el.attributes) {
      if (['src', 'href', 'srcset', 'poster', 'data', 'action', 'formaction'].includes(at.name))
        refs.push(at.value.slice(0, 60));
      if (at.name.startsWith('on')) refs.push('handler ' + at.name);
    }
  }
  const css = Array.from(document.querySelectorAll('style')).map(s => s.textContent).join('');
  for (const m of css.matchAll(/url\\(([^)]*)\\)|@import/g)) refs.push('css ' + m[0].slice(0, 60));
  const fetched = performance.getEntriesByType('resource').map(e => e.name.slice(0, 60));
  done({title: document.title, audio: audio, images: images, refs: refs, fetched: fetched,
        scripts: document.scripts.length,
        pwned: window.__signalchain_pwned === undefined ? null : String(window.__signalchain_pwned),
        text: document.body ? document.body.innerText.slice(0, 200000) : ''});
})();
"""


@dataclass
class Page:
    """What a report showed in the browser."""

    title: str
    audio: list[dict[str, Any]]
    images: list[dict[str, Any]]
    refs: list[str]
    fetched: list[str]
    scripts: int
    pwned: str | None
    text: str
    console: list[dict[str, Any]] = field(default_factory=list)

    @property
    def silent_players(self) -> list[dict[str, Any]]:
        """<audio> elements that did not decode to a finite, positive duration."""
        bad = []
        for a in self.audio:
            try:
                dur = float(a["duration"])
            except ValueError:
                dur = float("nan")
            if not (a["ready"] >= 1 and a["error"] is None and dur == dur and 0 < dur < float("inf")):
                bad.append(a)
        return bad

    @property
    def broken_images(self) -> list[dict[str, Any]]:
        return [i for i in self.images if not (i["complete"] and i["width"] > 0 and i["height"] > 0)]

    @property
    def console_errors(self) -> list[dict[str, Any]]:
        return [e for e in self.console if e.get("level") == "SEVERE"]

    @property
    def outside_refs(self) -> list[str]:
        """References to anything but the page itself or an embedded data: URI."""
        return [r for r in self.refs if not (r.startswith("data:") or r.startswith("#"))] + \
               [f for f in self.fetched if not f.startswith("data:")]

    def durations(self) -> list[float]:
        return [float(a["duration"]) for a in self.audio]

    def problems(self) -> list[str]:
        """Every way the page failed the checks (empty when it passed them all)."""
        out = [f"audio did not decode: {a}" for a in self.silent_players]
        out += [f"image did not load: {i}" for i in self.broken_images]
        out += [f"console error: {e.get('message', '')[:300]}" for e in self.console_errors]
        out += [f"not self-contained: {r}" for r in self.outside_refs]
        if self.scripts:
            out.append(f"{self.scripts} <script> elements (a report carries none)")
        if self.pwned is not None:
            out.append(f"code from the data ran: window.__signalchain_pwned = {self.pwned}")
        return out


def load(browser: Any, path: str | Path) -> Page:
    """Open a report file and inspect it; raises if the file is missing (Chromium would show its own
    error page, whose pictures load fine)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no report at {path}")
    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(path.as_uri())
    res = browser.execute_async_script(_INSPECT, MEDIA_TIMEOUT_MS)
    page = Page(**res)
    page.console = browser.get_log("browser")
    return page


def screenshot(browser: Any, out: str | Path, width: int = 1280, height: int = 1600, full_page: bool = False) -> Path:
    """A PNG of the page the browser shows (after `load`, so players show their durations), at a
    viewport of width x height CSS pixels, or the whole page, by the DevTools protocol."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    browser.execute_script("window.scrollTo(0, 0)")
    params: dict[str, Any] = {"format": "png"}
    if full_page:
        size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        params["captureBeyondViewport"] = True
        params["clip"] = {"x": 0, "y": 0, "width": width, "height": max(height, size["height"]), "scale": 1}
    data = base64.b64decode(browser.execute_cdp_cmd("Page.captureScreenshot", params)["data"])
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return out


#: The README's screenshots: the demo's pages (`make demo`), the top of each at 1400 px.
DEMO_PAGES = ("inspect", "compare-fault", "doctor", "doctor-fault", "symbolic-inspect")
SHOT_WIDTH, SHOT_HEIGHT = 1400, 2000
SHOT_COLOURS = 128  # a palette PNG: a page's few colours, a few hundred KB instead of megabytes


def demo_shots(browser: Any, demo: Path, out: Path) -> list[Path]:
    """The top SHOT_HEIGHT px of each demo page at SHOT_WIDTH px, as palette PNGs named after the page."""
    from PIL import Image

    written = []
    for name in DEMO_PAGES:
        problems = load(browser, demo / f"{name}.html").problems()
        if problems:
            raise RuntimeError(f"{name}.html fails its checks: {problems[:3]}")
        path = screenshot(browser, out / f"{name}.png", SHOT_WIDTH, SHOT_HEIGHT)
        with Image.open(path) as im:
            small = im.convert("RGB").quantize(SHOT_COLOURS, method=Image.Quantize.MEDIANCUT)
        small.save(path, optimize=True)
        written.append(path)
    return written


def section_shot(browser: Any, page: Path, anchor: str, out: Path, width: int = SHOT_WIDTH) -> Path:
    """One section of a report (`<section id=anchor>`: a doctor family's measurements is `m-FAMILY`)
    at `width` px, as a palette PNG."""
    from PIL import Image

    problems = load(browser, page).problems()
    if problems:
        raise RuntimeError(f"{page.name} fails its checks: {problems[:3]}")
    box = browser.execute_script(
        "const e = document.getElementById(arguments[0]); if (!e) return null; const r = e.getBoundingClientRect();"
        "return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height];", anchor)
    if box is None:
        raise RuntimeError(f"{page.name} has no section {anchor!r}")
    path = screenshot(browser, out, width, SHOT_HEIGHT, full_page=True)
    with Image.open(path) as im:
        x, y, w, h = (round(v) for v in box)
        small = im.convert("RGB").crop((0, max(y - 8, 0), width, y + h + 8))
        small = small.quantize(SHOT_COLOURS, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    shot = sub.add_parser("screenshot", help="PNG of a report page")
    shot.add_argument("page")
    shot.add_argument("out")
    shot.add_argument("--width", type=int, default=1280)
    shot.add_argument("--height", type=int, default=1600)
    shot.add_argument("--full-page", action="store_true")
    shots = sub.add_parser("demo-shots", help="the README's screenshots of the demo pages")
    shots.add_argument("demo", type=Path, help="the folder `make demo` wrote (demo-out)")
    shots.add_argument("out", type=Path, help="where the PNGs go (docs/images)")
    part = sub.add_parser("section-shot", help="PNG of one section of a report page (docs/images/doctor-profile.png)")
    part.add_argument("page", type=Path)
    part.add_argument("anchor", help="the section's id: m-FAMILY for a doctor family's measurements")
    part.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    found = find_browser()
    if isinstance(found, str):
        print(f"_chromium: {found}", file=sys.stderr)
        return 2
    if args.cmd == "section-shot":
        browser = launch(*found, width=SHOT_WIDTH, height=SHOT_HEIGHT)
        try:
            path = section_shot(browser, args.page, args.anchor, args.out)
            print(f"{path} {path.stat().st_size // 1024} KB")
        finally:
            browser.quit()
        return 0
    if args.cmd == "demo-shots":
        browser = launch(*found, width=SHOT_WIDTH, height=SHOT_HEIGHT)
        try:
            for path in demo_shots(browser, args.demo, args.out):
                print(f"{path} {path.stat().st_size // 1024} KB")
        finally:
            browser.quit()
        return 0
    browser = launch(*found, width=args.width, height=args.height)
    try:
        problems = load(browser, args.page).problems()
        if problems:
            print("_chromium: the page fails its checks:\n  " + "\n  ".join(problems), file=sys.stderr)
            return 1
        print(screenshot(browser, args.out, args.width, args.height, args.full_page))
    finally:
        browser.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
