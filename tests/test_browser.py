"""The report page in a real browser: Playwright drives Debian's headless Chromium."""

import os
from pathlib import Path

import pytest

from attnscale import __version__
from attnscale.report.render import render_explorer

CHROMIUM = os.environ.get("ATTNSCALE_CHROMIUM", "/usr/bin/chromium-headless-shell")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="install the dev extras: bash scripts/setup.sh --dev")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: bash scripts/setup.sh --dev installs Debian's chromium-headless-shell")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield chromium
        chromium.close()


def open_page(browser, path: Path):
    """Open a file:// page, recording console errors and every request it makes."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors, requests = [], []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    return page, errors, requests


def open_report(browser, out: Path, width: int):
    """The report page of folder ``out`` in a window ``width`` px wide."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto((out / "index.html").resolve().as_uri())
    page.wait_for_load_state("load")
    return page


def set_control(page, name: str, value) -> None:
    page.locator(f".explorer [data-x={name}]").evaluate(
        "(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }", str(value))


def shown_entropy(page) -> float:
    return float(page.locator(".explorer [data-x=entropy]").inner_text())


def entropy_at(page, rule: str, log2_dk: int) -> float:
    set_control(page, "rule", rule)
    set_control(page, "dk", log2_dk)
    return shown_entropy(page)


def check_explorer(page) -> None:
    none_small, none_large = entropy_at(page, "none", 2), entropy_at(page, "none", 10)  # d_k = 4, then 1024
    assert none_large < none_small, (none_small, none_large)
    sqrt_small, sqrt_large = entropy_at(page, "sqrt", 2), entropy_at(page, "sqrt", 10)
    assert abs(sqrt_large - sqrt_small) <= 0.05 * sqrt_small, (sqrt_small, sqrt_large)
    assert page.locator(".explorer [data-x=dk-value]").inner_text() == "1024"


def test_explorer_page_is_offline_and_reacts_like_the_math(browser, tmp_path):
    path = tmp_path / "explore.html"
    path.write_text(render_explorer(__version__), encoding="utf-8")
    page, errors, requests = open_page(browser, path)
    check_explorer(page)
    assert errors == []
    assert all(url.startswith(("file://", "data:")) for url in requests), requests


def test_report_page_in_the_browser(browser, quick_report):
    out, _ = quick_report
    page, errors, requests = open_page(browser, out / "index.html")
    assert page.locator("table.verdicts:not(.statements) tr").count() == 19  # header + C01..C18
    assert page.locator("table.verdicts.statements tr").count() == 5  # header + L1..L4, a table of their own
    check_explorer(page)
    page.locator("#C01").scroll_into_view_if_needed()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=False)
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000
    assert errors == []
    assert all(url.startswith(("file://", "data:")) for url in requests), requests
    # the Chinese renders with the embedded subset (this Chromium has no CJK font of its own)
    loaded = page.evaluate("""async () => { await document.fonts.ready;
        const faces = [...document.fonts].filter(f => f.family.replace(/"/g, '') === 'attnscale CJK');
        await Promise.all(faces.map(f => f.load()));
        return {faces: faces.map(f => f.status), check: document.fonts.check('16px "attnscale CJK"', '注意力')}; }""")
    assert loaded == {"faces": ["loaded"], "check": True}


SETTINGS = [(4, 0.5, 128, 1.0), (1024, 0.0, 128, 1.0), (64, 1.0, 16, 1.0), (256, 0.25, 1024, 2.0), (2, 0.5, 2, 1.0)]


def test_explorer_numbers_agree_with_the_saturation_lab(browser, tmp_path):
    """Same settings, same quantities: the page's sampler and the lab's differ only in their
    random streams, so the means agree within Monte Carlo error (256 rows each side here)."""
    from attnscale.lab.saturation import softmax_row_stats

    path = tmp_path / "explore.html"
    path.write_text(render_explorer(__version__), encoding="utf-8")
    page, errors, _ = open_page(browser, path)
    for d_k, exponent, n, std in SETTINGS:
        shown = page.evaluate("s => window.attnscaleExplorer.simulate(s)",
                              {"dk": d_k, "rule": "power", "exponent": exponent, "n": n, "std": std, "seed": 0})
        lab = softmax_row_stats(d_k, exponent=exponent, n=n, qk_std=std, seed=0, rows=4096)
        setting = (d_k, exponent, n, std)
        assert shown["entropy"] == pytest.approx(lab["normalized_entropy"], abs=0.025), setting
        assert shown["maxP"] == pytest.approx(lab["max_prob"], abs=0.025), setting
        assert shown["jacobian"] == pytest.approx(lab["jacobian_frobenius"], abs=0.025), setting
        assert shown["logitStd"] == pytest.approx(lab["logit_std"], rel=0.05), setting
        assert shown["factor"] == pytest.approx(d_k**-exponent)
    assert errors == []


NEEDLE_SETTINGS = [("sqrt", 64, 256, 8.0), ("sqrt", 64, 4096, 8.0), ("logn", 64, 4096, 8.0), ("logn", 64, 256, 3.0),
                   ("logn", 64, 4096, 3.0)]


def needle_reference(rule: str, base: int, n: int, margin: float, d_k: int = 64, rows: int = 4096) -> float:
    """The needle's mean weight from the sampling the explorer states, in numpy (another random stream)."""
    import numpy as np

    rng = np.random.default_rng(1)
    m = max(1.0, np.log(n) / np.log(base)) if rule == "logn" else 1.0
    q_norm = np.linalg.norm(rng.standard_normal((rows, d_k)), axis=1)
    spread = q_norm / np.sqrt(d_k) * m
    logits = rng.standard_normal((rows, n)) * spread[:, None]
    logits[:, 0] += margin * spread
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return float((weights[:, 0] / weights.sum(axis=1)).mean())


def test_explorer_needle_fades_under_sqrt_and_log_n_keeps_only_a_wide_margin(browser, tmp_path):
    path = tmp_path / "explore.html"
    path.write_text(render_explorer(__version__), encoding="utf-8")
    page, errors, _ = open_page(browser, path)
    shown = {}
    for rule, base, n, margin in NEEDLE_SETTINGS:
        out = page.evaluate("s => window.attnscaleExplorer.simulate(s)",
                            {"dk": 64, "rule": rule, "exponent": 0.5, "n": n, "std": 1.0, "base": base,
                             "margin": margin, "seed": 0})
        shown[(rule, n, margin)] = out["needle"]
        assert out["needle"] == pytest.approx(needle_reference(rule, base, n, margin), abs=0.03), (rule, base, n)
    assert shown[("sqrt", 4096, 8.0)] < 0.5 * shown[("sqrt", 256, 8.0)]   # fades as n grows 16x
    assert shown[("logn", 4096, 8.0)] > shown[("sqrt", 256, 8.0)]         # log-n keeps a wide margin's needle
    assert shown[("logn", 4096, 3.0)] < shown[("logn", 256, 3.0)]         # and amplifies the noise over a narrow one (L2)
    set_control(page, "rule", "logn")
    set_control(page, "margin", 3)
    assert page.locator(".explorer [data-x=needle]").inner_text() != "–"
    assert not page.locator(".explorer [data-x=base]").is_disabled()
    assert errors == []


@pytest.mark.parametrize("width", [390, 1400])
def test_report_page_fits_a_phone_and_a_desktop(browser, quick_report, width):
    """No horizontal scroll of the page: wide tables scroll inside their own box; both screenshots kept."""
    out, _ = quick_report
    page = open_report(browser, out, width)
    for summary in page.locator("details > summary").all()[:40]:  # open folds too: their tables must fit as well
        summary.click()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    sticking_out = page.evaluate("""(w) => [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > w + 1 && !e.closest('.scroll'))
        .map(e => e.tagName + '.' + e.className).slice(0, 5)""", width)
    assert sticking_out == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"report-{width}.png"), full_page=False)
    assert (ARTIFACTS / f"report-{width}.png").stat().st_size > 10_000


def test_diagnose_head_view_page_shows_each_heads_weights_offline(browser, tmp_path):
    import torch

    from attnscale.diagnosis.health import Diagnosis
    from attnscale.diagnosis.page import SCALE, render_page

    tokens = ["[CLS]", "the", "factor", "</script>", "keeps", "it"]  # a token that would end a script tag
    weights = [torch.softmax(torch.randn(3, 6, 6, generator=torch.Generator().manual_seed(layer)), dim=-1)
               for layer in range(2)]
    heads = [{"layer": layer, "head": head, "normalized_entropy": 0.5, "max_prob": 0.4, "sink_share": 0.1,
              "flags": ["sink"] if (layer, head) == (1, 2) else []} for layer in range(2) for head in range(3)]
    diagnosis = Diagnosis("models/tiny", "bert", 2, 3, 8, tokens, [0], heads, {}, None, [], attentions=weights)
    path = tmp_path / "attention.html"
    path.write_text(render_page(diagnosis), encoding="utf-8")
    page, errors, requests = open_page(browser, path)
    page.wait_for_function("window.attnscaleHeads !== undefined")  # the weights are inflated by the browser
    for layer in range(2):
        for head in range(3):
            for q, k in ((0, 0), (4, 2), (5, 5)):
                shown = page.evaluate(f"window.attnscaleHeads.value({layer}, {head}, {q}, {k})")
                assert shown == pytest.approx(float(weights[layer][head, q, k]), abs=0.5 / SCALE + 1e-9)
    page.select_option("#layer", "1")
    page.locator("#heads tbody tr").nth(2).click()
    assert page.locator("#heads tbody tr.chosen td").last.inner_text() == "sink"
    cell, margin = page.evaluate("[window.attnscaleHeads.cell, window.attnscaleHeads.margin]")
    box = page.locator("#map").bounding_box()
    page.mouse.move(box["x"] + margin + 2 * cell + cell / 2, box["y"] + margin + 4 * cell + cell / 2)
    readout = page.locator("#readout").inner_text()
    assert readout.startswith('query 4 "keeps" -> key 2 "factor": ') and \
        float(readout.rsplit(": ", 1)[1]) == pytest.approx(float(weights[1][2, 4, 2]), abs=1e-4)
    assert errors == [] and all(url.startswith(("file://", "data:")) for url in requests), requests


BROKEN_WORDS = """() => { const broken = [];
  for (const td of document.querySelectorAll('table.verdicts td, table.parts td')) {
    const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT); let node;
    while ((node = walker.nextNode())) { const re = /\\S+/g; let m;
      while ((m = re.exec(node.data))) { const range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]); } } }
  return broken; }"""


@pytest.mark.parametrize("width", [390, 1280])
def test_report_page_has_a_map_unbroken_words_and_each_figure_once(browser, quick_report, width):
    out, report = quick_report
    page = open_report(browser, out, width)
    assert page.evaluate(BROKEN_WORDS) == []  # no number or identifier split across lines in a table
    targets = page.evaluate("[...document.querySelectorAll('nav.toc a')].map(a => a.getAttribute('href'))")
    ids = [f"#{c['id']}" for c in report["claims"] + report["statements"]]
    assert set(ids) <= set(targets)
    assert page.evaluate("(hrefs) => hrefs.filter(h => !document.querySelector(h))", targets) == []
    # the way back stays on screen wherever the reader is
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight / 2)")
    box = page.locator("a.totop").bounding_box()
    assert box and 0 <= box["y"] < 900 and 0 <= box["x"] < width
    sources = page.evaluate("[...document.querySelectorAll('img')].map(i => i.src).filter(s => s.startsWith('data:'))")
    assert sources and len(sources) == len(set(sources))  # each figure embedded once
    used = {rel for c in report["claims"] + report["statements"] for rel in c["figures"]}
    assert len(sources) == len(used | {rel for info in report["labs"].values() for rel in info.get("figures", [])})
    assert page.locator("p.figref a").count() > 0  # and linked where it is used again
    figure = page.locator("figure[id] img").first
    figure.scroll_into_view_if_needed()
    figure.click()  # a tap opens it full size; another closes it
    assert page.locator("figure.zoomed").count() == 1
    assert page.locator("figure.zoomed").bounding_box()["width"] == pytest.approx(width, abs=20)
    page.locator("figure.zoomed img").click()
    assert page.locator("figure.zoomed").count() == 0
