"""A small DevTools-protocol client for headless Chromium: open a page, collect its console
errors and uncaught exceptions, evaluate JavaScript, take a screenshot."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_browser() -> str | None:
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


class Browser:
    """One headless Chromium with one page; `errors` lists what the page reported as errors."""

    def __init__(self, executable: str, width=1200, height=800):
        import websocket
        self._profile = tempfile.TemporaryDirectory(ignore_cleanup_errors=True)
        self._proc = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", f"--window-size={width},{height}", "--remote-debugging-port=0",
             f"--user-data-dir={self._profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self._proc.poll() is not None:
                self.close()
                raise RuntimeError("headless Chromium did not start")
            time.sleep(0.05)
        port = port_file.read_text().split()[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t["type"] == "page")
        self._ws = websocket.create_connection(page["webSocketDebuggerUrl"], suppress_origin=True, timeout=30)
        self._id = 0
        self.errors: list[str] = []
        self._events: list[dict] = []
        for domain in ("Runtime", "Log", "Page"):
            self.send(f"{domain}.enable")

    def send(self, method: str, **params) -> dict:
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def _event(self, message: dict):
        method, params = message.get("method"), message.get("params", {})
        self._events.append(message)
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(details.get("exception", {}).get("description") or details.get("text"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(params["entry"]["text"])

    def open(self, path: Path, timeout=30):
        self._events.clear()
        self.send("Page.navigate", url=path.resolve().as_uri())
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self._events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} did not finish loading")
            self._event(json.loads(self._ws.recv()))
        self.evaluate("0")          # let pending console events arrive

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self):
        ws = getattr(self, "_ws", None)
        if ws is not None:
            ws.close()
        self._proc.terminate()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        # Chromium's helper processes can still write into the profile for a moment after the
        # browser process exits (a CI teardown once failed with "Directory not empty"): retry
        for _ in range(20):
            shutil.rmtree(self._profile.name, ignore_errors=True)
            if not os.path.exists(self._profile.name):
                break
            time.sleep(0.1)
        self._profile.cleanup()
