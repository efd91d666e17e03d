"""A small headless-Chromium driver for the report tests: the DevTools protocol over a pipe.

Chromium started with ``--remote-debugging-pipe`` reads protocol messages (JSON, each ended by a
NUL byte) on its file descriptor 3 and writes replies and events on 4. That needs no websocket
client, no selenium and no free port: the standard library is enough.

    with Browser.launch(binary, tmp_path) as browser:
        page = browser.open(path_to_html)          # waits for the load event
        page.evaluate("document.title")
        page.console_errors, page.failed_requests  # collected since the page was opened
        page.screenshot(tmp_path / "page.png")

Find the binary with :func:`find_chromium` (``FASTEVAL_CHROMIUM`` or ``chromium`` on PATH); install
it with ``scripts/install_browser.sh``.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-dev-shm-usage", "--mute-audio", "--hide-scrollbars",
         "--autoplay-policy=no-user-gesture-required", "--allow-file-access-from-files")
"""Flags that work as root in a container; each run gets a new, empty ``--user-data-dir``."""


# Page probes shared by the browser tests (evaluated in the page; %s takes a table id).
# ROWS_JS: each body row as [text, data-value, data-low, data-high] per cell; HEADERS_JS: the header texts
# without a sort arrow; LAYOUT_JS: what scrolls sideways, overflows its cell or lies off-screen ([] when clean).
ROWS_JS = """Array.from(document.querySelectorAll('#%s tbody tr')).map(function(tr){
  return Array.from(tr.cells).map(function(td){return [td.textContent.trim(), td.getAttribute('data-value'),
    td.getAttribute('data-low'), td.getAttribute('data-high')];});})"""
HEADERS_JS = "Array.from(document.querySelectorAll('#%s thead th')).map(function(th){return th.textContent.trim().replace(/\\s*[\\u2195\\u2191\\u2193]$/, '');})"
LAYOUT_JS = """(function(){
  var out=[], vw=document.documentElement.clientWidth, doc=document.documentElement;
  if(doc.scrollWidth>vw+1) out.push('the page scrolls sideways: '+doc.scrollWidth+' > '+vw);
  function where(e){return e.tagName.toLowerCase()+(e.id?'#'+e.id:'')+' "'+e.textContent.trim().slice(0,40)+'"';}
  function offscreen(e){var r=e.getBoundingClientRect();return r.width>0&&(r.left<-1||r.right>vw+1);}
  document.querySelectorAll('table').forEach(function(t){
    var box=t.parentElement;
    if(box.scrollWidth>box.clientWidth+1) out.push('#'+t.id+' is wider than its box: '+box.scrollWidth+' > '+box.clientWidth);
    t.querySelectorAll('tbody td').forEach(function(c){
      if(c.scrollWidth>c.clientWidth+1) out.push('#'+t.id+': the content of '+where(c)+' overflows its cell');
      if(offscreen(c)) out.push('#'+t.id+': '+where(c)+' is off-screen');});});
  document.querySelectorAll('.card, figure, video, svg.plot, dl.kv dd, h1, h2, nav a, p.note').forEach(function(e){
    if(offscreen(e)) out.push(where(e)+' is off-screen ('+Math.round(e.getBoundingClientRect().right)+' > '+vw+')');});
  return out;})()"""


def find_chromium() -> str | None:
    given = os.environ.get("FASTEVAL_CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class ProtocolError(RuntimeError):
    pass


class Browser:
    """One Chromium process and the pipe to it."""

    def __init__(self, proc: subprocess.Popen, to_browser: int, from_browser: int, timeout: float):
        self.proc, self.timeout = proc, timeout
        self._out = os.fdopen(to_browser, "wb", buffering=0)
        self._in = os.fdopen(from_browser, "rb", buffering=0)
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @classmethod
    def launch(cls, binary: str, work_dir: str | os.PathLike, timeout: float = 60.0) -> "Browser":
        profile = Path(work_dir) / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=False)  # a new, empty profile every time
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()

        def child_fds() -> None:  # the child's fds 3 (it reads) and 4 (it writes)
            a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)  # out of the way of 3 and 4 first
            b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)
            os.dup2(a, 3)  # dup2's copies are inherited by the exec; every other fd is close-on-exec
            os.dup2(b, 4)

        cmd = [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe", "--window-size=1280,900", "about:blank"]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=child_fds, close_fds=False)  # close_fds would close 3 and 4 after preexec_fn
        os.close(to_child_r)
        os.close(from_child_w)
        return cls(proc, to_child_w, from_child_r, timeout)

    # -- the pipe -----------------------------------------------------------------------------------
    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = self._in.read(65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                with self._cond:
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                    self._cond.notify_all()

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float | None = None) -> dict[str, Any]:
        with self._lock:
            self._next_id += 1
            ident = self._next_id
        msg = {"id": ident, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._out.write(json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cond:
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise ProtocolError(f"{method}: no reply from Chromium (exit code {self.proc.poll()})")
                self._cond.wait(min(left, 0.5))
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise ProtocolError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, session: str | None, since: int = 0, timeout: float | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cond:
            while True:
                for e in self.events[since:]:
                    if e.get("method") == method and e.get("sessionId") == session:
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ProtocolError(f"no {method} event within the timeout")
                self._cond.wait(min(left, 0.5))

    # -- pages --------------------------------------------------------------------------------------
    def open(self, path: str | os.PathLike, width: int = 1280, height: int = 900) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=session)
        page.first_event = len(self.events)
        self.send("Page.navigate", {"url": Path(path).resolve().as_uri()}, session=session)
        self.wait_event("Page.loadEventFired", session, since=page.first_event)
        time.sleep(0.3)  # let late resource errors (videos' metadata) arrive
        return page

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send("Browser.close", timeout=10)
        except (ProtocolError, OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self._out, self._in):
            try:
                f.close()
            except OSError:
                pass

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Page:
    """One tab, attached with its own session."""

    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session
        self.first_event = 0

    def _events(self, *methods: str) -> list[dict[str, Any]]:
        return [e for e in self.browser.events[self.first_event:]
                if e.get("sessionId") == self.session and e.get("method") in methods]

    def evaluate(self, expression: str, await_promise: bool = False, timeout: float | None = None) -> Any:
        result = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                        "awaitPromise": await_promise}, session=self.session, timeout=timeout)
        if "exceptionDetails" in result:
            raise ProtocolError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    @property
    def console_errors(self) -> list[str]:
        """Console errors and assertions, uncaught exceptions, and error-level log entries."""
        out = []
        for e in self._events("Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded"):
            p = e["params"]
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                out.append(str(p.get("exceptionDetails", {}).get("exception", {}).get("description") or p))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"{p['entry'].get('text')} ({p['entry'].get('url', '')})")
        return out

    @property
    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self._events("Network.requestWillBeSent")]

    @property
    def failed_requests(self) -> list[str]:
        """Requests that failed (``Network.loadingFailed``; an HTTP status >= 400)."""
        urls = {e["params"]["requestId"]: e["params"]["request"]["url"] for e in self._events("Network.requestWillBeSent")}
        out = [f"{urls.get(e['params']['requestId'], '?')}: {e['params'].get('errorText')}"
               for e in self._events("Network.loadingFailed") if not e["params"].get("canceled")]
        out += [f"{e['params']['response']['url']}: HTTP {e['params']['response']['status']}"
                for e in self._events("Network.responseReceived") if e["params"]["response"].get("status", 0) >= 400]
        return out

    def click(self, selector: str) -> None:
        """A real mouse click (pressed, released) at the centre of the first element matching ``selector``."""
        box = self.evaluate(f"(function(){{var el=document.querySelector({json.dumps(selector)});el.scrollIntoView({{block:'center'}});"
                            "var r=el.getBoundingClientRect();return [r.left+r.width/2,r.top+r.height/2];})()")
        if box is None:
            raise ProtocolError(f"no element matches {selector!r}")
        x, y = box
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            params = {"type": kind, "x": x, "y": y, "button": "left" if kind != "mouseMoved" else "none", "clickCount": 1}
            self.browser.send("Input.dispatchMouseEvent", params, session=self.session)

    def screenshot(self, path: str | os.PathLike, full_page: bool = True, width: int = 1280, height: int = 900) -> Path:
        """A PNG of the page, ``width`` px wide: the whole page (the viewport grown to its height,
        so that everything, videos included, is painted), or the ``height``-px viewport."""
        send = self.browser.send
        if full_page:
            size = send("Page.getLayoutMetrics", session=self.session)["cssContentSize"]
            send("Emulation.setDeviceMetricsOverride", {"width": width, "height": min(int(size["height"]) + 1, 16000),
                                                        "deviceScaleFactor": 1, "mobile": False}, session=self.session)
            time.sleep(0.5)  # let the newly visible parts (video frames) paint
        try:
            data = send("Page.captureScreenshot", {"format": "png"}, session=self.session)["data"]
        finally:
            if full_page:
                send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                            "mobile": False}, session=self.session)
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path


# -- what every browser test module shares ---------------------------------------------------------------

CHROMIUM = find_chromium()
MISSING = "Chromium is not installed (scripts/install_browser.sh installs it, or set FASTEVAL_CHROMIUM)"
REQUIRED = os.environ.get("FASTEVAL_REQUIRE_BROWSER") == "1"
"""CI can ask for the browser: then a missing Chromium fails these tests instead of skipping them."""
needs_browser = pytest.mark.skipif(CHROMIUM is None and not REQUIRED, reason=MISSING)
"""A browser test module's ``pytestmark``: it skips without Chromium, unless :data:`REQUIRED`."""
WIDTHS = (1400, 400)
"""The page widths every page is checked at (a desktop window, a phone)."""


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One headless Chromium per test module (import this fixture into the module)."""
    if CHROMIUM is None:
        pytest.fail(MISSING + "; FASTEVAL_REQUIRE_BROWSER=1 asks for it")
    with Browser.launch(CHROMIUM, tmp_path_factory.mktemp("chromium")) as b:
        yield b
