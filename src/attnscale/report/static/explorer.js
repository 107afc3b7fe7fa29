// attnscale explorer: the softmax of one attention row, computed in the page.
// Sampling (the same as attnscale.lab.saturation's row sampler): q and the n keys have
// i.i.d. N(0, std^2) components in d_k dimensions; a row's logits are factor * q.k_j.
// Given q, each q.k_j is exactly N(0, std^2 |q|^2), so a row costs d_k + n normal draws.
// Statistics are averaged over ROWS rows drawn from a fixed seed: same settings, same numbers.
// A needle (key 0, margin > 0) sits margin row-logit-stds above the others, the stds counted before
// a length term, which multiplies margin and noise alike (as in attnscale.lab.length); the "logn" rule is 1/sqrt(d_k) * max(1, ln n / ln L).
(function () {
  "use strict";
  var ROWS = 256;

  function mulberry32(seed) {
    return function () {
      seed |= 0; seed = (seed + 0x6D2B79F5) | 0;
      var t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  function normalSampler(seed) {
    var uniform = mulberry32(seed), spare = null;
    return function () {
      if (spare !== null) { var s = spare; spare = null; return s; }
      var u = 0, v = 0;
      while (u === 0) u = uniform();
      v = uniform();
      var r = Math.sqrt(-2 * Math.log(u));
      spare = r * Math.sin(2 * Math.PI * v);
      return r * Math.cos(2 * Math.PI * v);
    };
  }

  function factorFor(rule, exponent, dk, n, base) {
    if (rule === "sqrt") return 1 / Math.sqrt(dk);
    if (rule === "logn") return Math.max(1, Math.log(n) / Math.log(base)) / Math.sqrt(dk);
    if (rule === "inv_d") return 1 / dk;
    if (rule === "none") return 1;
    return Math.pow(dk, -exponent);
  }

  function softmax(logits) {
    var max = -Infinity, i, n = logits.length, p = new Float64Array(n), sum = 0;
    for (i = 0; i < n; i++) if (logits[i] > max) max = logits[i];
    for (i = 0; i < n; i++) { p[i] = Math.exp(logits[i] - max); sum += p[i]; }
    for (i = 0; i < n; i++) p[i] /= sum;
    return p;
  }

  // Normalised entropy, max p and the Frobenius norm of diag(p) - p p^T for one row.
  function rowStats(p) {
    var n = p.length, h = 0, maxP = 0, top = 0, i;
    for (i = 0; i < n; i++) {
      if (p[i] > 0) h -= p[i] * Math.log(p[i]);
      if (p[i] > maxP) { maxP = p[i]; top = i; }
    }
    var rest = 0, othersSq = 0, othersQuad = 0, diag = 0;
    for (i = 0; i < n; i++) {
      if (i === top) continue;
      rest += p[i]; othersSq += p[i] * p[i]; othersQuad += Math.pow(p[i], 4);
      diag += Math.pow(p[i] * (1 - p[i]), 2);
    }
    diag += Math.pow(maxP * rest, 2);
    var off = othersSq * othersSq - othersQuad + 2 * maxP * maxP * othersSq;
    return { entropy: n > 1 ? h / Math.log(n) : NaN, maxP: maxP, jacobian: Math.sqrt(Math.max(diag + off, 0)) };
  }

  function simulate(settings) {
    var normal = normalSampler(settings.seed || 0);
    var factor = factorFor(settings.rule, settings.exponent, settings.dk, settings.n, settings.base || 64);
    var margin = settings.margin || 0;
    var n = settings.n, std = settings.std, firstRow = null, all = [];
    var sums = { entropy: 0, maxP: 0, jacobian: 0, needle: 0 }, sumSq = 0, count = 0;
    for (var r = 0; r < ROWS; r++) {
      var qNormSq = 0;
      for (var d = 0; d < settings.dk; d++) { var x = normal() * std; qNormSq += x * x; }
      var spread = std * Math.sqrt(qNormSq) * factor, logits = new Float64Array(n);
      for (var j = 0; j < n; j++) {
        logits[j] = normal() * spread;
        if (j === 0 && margin > 0) logits[j] += margin * spread;  // a length term multiplies the margin too
        sumSq += logits[j] * logits[j]; count++;
        if (all.length < 20000) all.push(logits[j]);
      }
      var p = softmax(logits), s = rowStats(p);
      sums.entropy += s.entropy; sums.maxP += s.maxP; sums.jacobian += s.jacobian; sums.needle += p[0];
      if (r === 0) firstRow = p;
    }
    return { factor: factor, entropy: sums.entropy / ROWS, maxP: sums.maxP / ROWS, jacobian: sums.jacobian / ROWS,
             needle: margin > 0 ? sums.needle / ROWS : NaN,
             logitStd: Math.sqrt(sumSq / count), logits: all, row: firstRow };
  }

  function drawHistogram(canvas, values) {
    var ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height, bins = 40;
    ctx.clearRect(0, 0, w, h);
    var lo = Infinity, hi = -Infinity, i;
    for (i = 0; i < values.length; i++) { if (values[i] < lo) lo = values[i]; if (values[i] > hi) hi = values[i]; }
    if (!(hi > lo)) { hi = lo + 1; }
    var counts = new Array(bins).fill(0), top = 0;
    for (i = 0; i < values.length; i++) {
      var b = Math.min(bins - 1, Math.floor((values[i] - lo) / (hi - lo) * bins)); counts[b]++;
    }
    for (i = 0; i < bins; i++) top = Math.max(top, counts[i]);
    ctx.fillStyle = "#3a6ea5";
    for (i = 0; i < bins; i++) {
      var bh = (h - 18) * counts[i] / top;
      ctx.fillRect(i * w / bins + 1, h - 16 - bh, w / bins - 2, bh);
    }
    ctx.fillStyle = "#333"; ctx.font = "11px sans-serif";
    ctx.fillText(lo.toPrecision(3), 2, h - 3);
    var label = hi.toPrecision(3); ctx.fillText(label, w - ctx.measureText(label).width - 2, h - 3);
  }

  function drawRow(canvas, p, needle) {
    var ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height, n = p.length, max = 0, i;
    ctx.clearRect(0, 0, w, h);
    for (i = 0; i < n; i++) max = Math.max(max, p[i]);
    ctx.fillStyle = "#c0504d";
    var bw = w / n;
    for (i = 0; i < n; i++) {
      var bh = (h - 16) * p[i] / max;
      ctx.fillStyle = needle && i === 0 ? "#2e7d32" : "#c0504d";
      ctx.fillRect(i * bw, h - 14 - bh, Math.max(bw - (bw > 3 ? 1 : 0), needle && i === 0 ? 2 : 0.5), bh);
    }
    ctx.strokeStyle = "#888"; ctx.setLineDash([4, 3]); ctx.beginPath();
    var uy = h - 14 - (h - 16) * (1 / n) / max; ctx.moveTo(0, uy); ctx.lineTo(w, uy); ctx.stroke(); ctx.setLineDash([]);
    ctx.fillStyle = "#333"; ctx.font = "11px sans-serif";
    ctx.fillText("max p " + max.toPrecision(3) + "   dashed: 1/n" + (needle ? "   green: the needle" : ""), 2, h - 2);
  }

  function init(root) {
    var el = function (name) { return root.querySelector("[data-x=" + name + "]"); };
    function read() {
      var dk = Math.round(Math.pow(2, Number(el("dk").value)));
      var n = Math.round(Math.pow(2, Number(el("n").value)));
      var rule = el("rule").value, exponent = Number(el("exponent").value), std = Number(el("std").value);
      var base = Math.round(Math.pow(2, Number(el("base").value))), margin = Number(el("margin").value);
      el("exponent").disabled = rule !== "power";
      el("base").disabled = rule !== "logn";
      return { dk: dk, n: n, rule: rule, exponent: exponent, std: std, base: base, margin: margin, seed: 0 };
    }
    function update() {
      var s = read(), out = simulate(s);
      el("dk-value").textContent = s.dk;
      el("n-value").textContent = s.n;
      el("exponent-value").textContent = s.exponent.toFixed(2);
      el("std-value").textContent = s.std.toFixed(2);
      el("base-value").textContent = s.base;
      el("margin-value").textContent = s.margin > 0 ? s.margin.toFixed(1) : "no needle";
      el("needle").textContent = s.margin > 0 ? out.needle.toFixed(4) : "–";
      el("factor").textContent = out.factor.toPrecision(4);
      el("entropy").textContent = out.entropy.toFixed(4);
      el("maxp").textContent = out.maxP.toFixed(4);
      el("jacobian").textContent = out.jacobian.toFixed(4);
      el("logitstd").textContent = out.logitStd.toPrecision(4);
      drawHistogram(el("hist"), out.logits);
      drawRow(el("row"), out.row, s.margin > 0);
      root.dataset.entropy = out.entropy;
    }
    root.querySelectorAll("input, select").forEach(function (input) { input.addEventListener("input", update); });
    update();
    root.attnscaleSimulate = simulate;
  }

  window.attnscaleExplorer = { simulate: simulate, factorFor: factorFor, rows: ROWS };
  document.querySelectorAll(".explorer").forEach(init);
})();
