"""The documentation site: built strictly, then opened in Chromium: no broken internal link, no missing image.

`mkdocs build --strict` fails on a warning, a link to a page or anchor that does not exist, or an
image that is not there; the browser then loads the home page and a generated reference page as a
reader would, and every same-site link and image they hold must answer.
"""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from tests.conftest import free_port

# What this proves is the command's own (parsing, rendering, reports, readers): `make test-kafka4` leaves it out.
pytestmark = [pytest.mark.e2e, pytest.mark.any_broker]

REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built from this checkout, served on a loopback port; its base URL."""
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)], cwd=REPO,
                           capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
                           check=False)  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a loopback URL of this test
            return bool(response.status == 200)
    except urllib.error.URLError:
        return False


@pytest.mark.parametrize("page", ["", "reference/commands/", "how-to/upgrade/"])
def test_a_page_opens_in_a_browser_with_every_image_shown_and_every_link_answering(
    browser: Browser, site: str, page: str
) -> None:
    tab = browser.new_page()
    response = tab.goto(site + page)
    assert response is not None
    assert response.status == 200
    images = tab.eval_on_selector_all("article img", "els => els.map(e => [e.src, e.complete && e.naturalWidth > 0])")
    assert all(shown for _, shown in images), [src for src, shown in images if not shown]
    links = tab.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    internal = sorted({link.split("#")[0] for link in links if link.startswith(site)})
    assert internal, "the page links nowhere on the site"
    broken = [link for link in internal if not _answers(link)]
    assert not broken, broken
    if page == "":
        assert [src for src, _ in images if src.endswith("diagrams/architecture.svg")], "the architecture picture"
    tab.close()
