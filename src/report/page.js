/* page.js — draws the scaletrain report from ST_DATA (written by src/report/report.c) with uPlot.
 *
 * Charts (docs/report.md): loss vs tokens (train, validation, spikes), learning rate, gradient
 * norm before/after clipping, tokens/s and MFU, one stacked time decomposition per run, one memory
 * planned-vs-measured chart per run. Several runs overlay in the shared charts.
 *
 * Self-check for tests: after drawing, each chart's box gets data-pixels = the number of
 * saturated (data-coloured) pixels inside its plot area, and #st-status gets data-state
 * ("ok" when every chart has drawn data and no error was recorded), data-charts, data-drawn,
 * data-errors and data-height (page height in CSS pixels); the text of any error goes into
 * #st-status too. Each chart box also gets data-rect = "x,y,w,h", its plot area in page pixels. */
(function () {
  'use strict';
  var D = window.ST_DATA;
  var COMMON = window.ST_COMMON; /* page_common.js */
  var COLORS = COMMON.COLORS, color = COMMON.color, width = COMMON.width, drawnPixels = COMMON.drawnPixels, el = COMMON.el;
  function status() { COMMON.status(charts); }
  var SPIKE = '#e41a1c';
  var TIME_KEYS = ['data', 'forward', 'backward', 'comm', 'optimizer', 'checkpoint'];
  var TIME_COLORS = ['#e6550d', '#3182bd', '#31a354', '#756bb1', '#d6a000', '#c51b8a'];
  var charts = [];
  var finished = false;

  function si(v) {
    if (v == null || !isFinite(v)) return '';
    var a = Math.abs(v);
    if (a >= 1e12) return +(v / 1e12).toPrecision(3) + 'T';
    if (a >= 1e9) return +(v / 1e9).toPrecision(3) + 'G';
    if (a >= 1e6) return +(v / 1e6).toPrecision(3) + 'M';
    if (a >= 1e4) return +(v / 1e3).toPrecision(3) + 'k';
    return +v.toPrecision(4) + '';
  }
  function mib(v) { return v == null || !isFinite(v) ? '-' : (v / 1048576).toFixed(1) + ' MiB'; }
  function finite(a) { for (var i = 0; i < a.length; i++) if (a[i] != null && isFinite(a[i])) return true; return false; }
  function allPositive(a) { for (var i = 0; i < a.length; i++) if (a[i] != null && !(a[i] > 0)) return false; return true; }
  function sortedTable(xs, ys) {
    var idx = xs.map(function (_, i) { return i; }).filter(function (i) { return xs[i] != null && ys[i] != null; });
    idx.sort(function (a, b) { return xs[a] - xs[b]; });
    return [idx.map(function (i) { return xs[i]; }), idx.map(function (i) { return ys[i]; })];
  }
  var xAxisTokens = { label: 'tokens', values: function (u, s) { return s.map(si); } };
  var xAxisSteps = { label: 'step', values: function (u, s) { return s.map(si); } };
  function yAxis(label, fmt) { return { label: label, size: 64, values: function (u, s) { return s.map(fmt || si); } }; }


  function addChart(id, title, note, opts, data) {
    var box = el('div', { 'class': 'chart', 'data-chart': id, 'data-pixels': '0' });
    box.appendChild(el('h2', null, title));
    if (note) box.appendChild(el('p', { 'class': 'note' }, note));
    document.getElementById('st-charts').appendChild(box);
    var entry = { id: id, box: box };
    opts.width = width();
    opts.height = opts.height || 300;
    opts.scales = opts.scales || {};
    opts.scales.x = opts.scales.x || {};
    opts.scales.x.time = false;
    opts.legend = { live: true };
    return COMMON.mount(charts, entry, opts, data, function () { return finished; });
  }


  /* ---- header, warnings, runs table ---- */
  function header() {
    document.getElementById('st-title').textContent = D.title;
    document.getElementById('st-sub').textContent = D.runs.length + (D.runs.length === 1 ? ' run' : ' runs') +
      ': ' + D.runs.map(function (r) { return r.path; }).join(', ');
    var w = document.getElementById('st-warnings');
    D.runs.forEach(function (r) { if (r.warning) w.appendChild(el('div', { 'class': 'warn' }, 'warning: ' + r.warning)); });
    var t = el('table', { 'class': 'runs' });
    var h = el('tr');
    ['', 'run', 'configuration', 'grid', 'precision', 'steps', 'last loss', 'last val', 'spikes', 'resumed from', 'replayed', 'events'].forEach(function (c) { h.appendChild(el('th', null, c)); });
    t.appendChild(h);
    D.runs.forEach(function (r, i) {
      var tr = el('tr');
      var sw = el('td'); sw.appendChild(el('span', { 'class': 'swatch', style: 'background:' + color(i) })); tr.appendChild(sw);
      var n = r.steps.step.length, nv = r.val.loss.length;
      [r.name, r.summary, r.grid || '-', r.precision || '-', n ? String(r.steps.step[n - 1]) : '-', n ? si(r.steps.loss[n - 1]) : '-',
       nv ? si(r.val.loss[nv - 1]) : '-', String(r.spikes.step.length),
       r.resumed_from.length ? r.resumed_from.join(', ') : '-', String(r.replayed),
       r.events + (r.bad_lines ? ' (' + r.bad_lines + ' bad lines)' : '')].forEach(function (c) { tr.appendChild(el('td', null, c)); });
      t.appendChild(tr);
    });
    document.getElementById('st-runs').appendChild(t);
  }

  /* ---- shared charts: one series group per run ---- */
  function lossChart() {
    var tables = [], series = [{ label: 'tokens' }], any = false;
    D.runs.forEach(function (r, i) {
      var c = color(i);
      if (finite(r.steps.loss)) {
        tables.push([r.steps.tokens, r.steps.loss]);
        series.push({ label: r.name + ' train', stroke: c, width: 1.5, spanGaps: false });
        any = true;
      }
      if (finite(r.val.loss)) {
        tables.push(sortedTable(r.val.tokens, r.val.loss));
        series.push({ label: r.name + ' val', stroke: c, width: 2, dash: [6, 4], spanGaps: true,
                      points: { show: true, size: 6, stroke: c, fill: '#fff' } });
        any = true;
      }
      var sx = [], sy = [];
      r.spikes.step.forEach(function (_, k) {
        if (!r.spikes.is_grad_norm[k] && r.spikes.value[k] != null) { sx.push(r.spikes.tokens[k]); sy.push(r.spikes.value[k]); }
      });
      if (sx.length) {
        tables.push(sortedTable(sx, sy));
        series.push({ label: r.name + ' spikes', stroke: SPIKE, paths: function () { return null; },
                      points: { show: true, size: 11, width: 2, stroke: SPIKE, fill: 'rgba(228,26,28,0.35)' } });
      }
    });
    if (!any) return;
    addChart('loss', 'Loss', 'Training loss per step (solid), validation loss (dashed), spikes (red circles), against tokens seen.',
             { series: series, axes: [xAxisTokens, yAxis('loss (nats/token)')] }, uPlot.join(tables));
  }

  function simpleChart(id, title, note, key, label, fmt, log) {
    var tables = [], series = [{ label: 'tokens' }];
    D.runs.forEach(function (r, i) {
      if (!finite(r.steps[key])) return;
      tables.push([r.steps.tokens, r.steps[key]]);
      series.push({ label: r.name, stroke: color(i), width: 1.5 });
    });
    if (!tables.length) return;
    var opts = { series: series, axes: [xAxisTokens, yAxis(label, fmt)] };
    addChart(id, title, note, opts, uPlot.join(tables));
  }

  function gradChart() {
    var tables = [], series = [{ label: 'tokens' }], ys = [];
    D.runs.forEach(function (r, i) {
      var c = color(i);
      if (finite(r.steps.grad_norm)) {
        tables.push([r.steps.tokens, r.steps.grad_norm, r.steps.grad_norm_clipped]);
        ys = ys.concat(r.steps.grad_norm, r.steps.grad_norm_clipped);
        series.push({ label: r.name + ' before clip', stroke: c, width: 1.5 });
        series.push({ label: r.name + ' after clip', stroke: c, width: 1.5, dash: [4, 3] });
      }
      var sx = [], sy = [];
      r.spikes.step.forEach(function (_, k) {
        if (r.spikes.is_grad_norm[k] && r.spikes.value[k] != null) { sx.push(r.spikes.tokens[k]); sy.push(r.spikes.value[k]); }
      });
      if (sx.length) {
        tables.push(sortedTable(sx, sy));
        series.push({ label: r.name + ' spikes', stroke: SPIKE, paths: function () { return null; },
                      points: { show: true, size: 11, width: 2, stroke: SPIKE, fill: 'rgba(228,26,28,0.35)' } });
      }
    });
    if (!tables.length) return;
    var log = allPositive(ys) && finite(ys);
    addChart('grad_norm', 'Gradient norm', 'Global gradient norm before clipping (solid) and after (dashed)' +
             (log ? ', log scale.' : '.'),
             { series: series, scales: { y: log ? { distr: 3 } : {} }, axes: [xAxisTokens, yAxis('norm')] }, uPlot.join(tables));
  }

  /* The gradient noise scale (McCandlish et al. 2018) beside the batch size in use: where the
   * measured B_simple is above the batch, a larger batch would still cut steps nearly linearly. */
  function noiseChart() {
    var tables = [], series = [{ label: 'tokens' }], ys = [];
    D.runs.forEach(function (r, i) {
      if (!finite(r.steps.noise_scale)) return;
      var c = color(i);
      tables.push([r.steps.tokens, r.steps.noise_scale, r.steps.batch_tokens]);
      ys = ys.concat(r.steps.noise_scale, r.steps.batch_tokens);
      series.push({ label: r.name + ' B_simple', stroke: c, width: 1.5 });
      series.push({ label: r.name + ' batch in use', stroke: c, width: 1.5, dash: [4, 3] });
    });
    if (!tables.length) return;
    var log = allPositive(ys) && finite(ys);
    addChart('noise_scale', 'Gradient noise scale', 'Simple noise scale B_simple = tr(Σ)/|G|² in tokens, smoothed ' +
             '(solid), and the batch size in use (dashed): a batch below B_simple still trains nearly linearly faster ' +
             'when enlarged, one above it mostly wastes tokens (the critical batch size signal)' + (log ? '; log scale.' : '.'),
             { series: series, scales: { y: log ? { distr: 3 } : {} }, axes: [xAxisTokens, yAxis('tokens')] }, uPlot.join(tables));
  }

  function throughputChart() {
    var tables = [], series = [{ label: 'step' }];
    D.runs.forEach(function (r, i) {
      var c = color(i);
      if (!finite(r.steps.tokens_per_s)) return;
      var mfu = r.steps.mfu.map(function (v) { return v == null ? null : 100 * v; });
      tables.push([r.steps.step, r.steps.tokens_per_s, mfu]);
      series.push({ label: r.name + ' tokens/s', stroke: c, width: 1.5, scale: 'tps' });
      series.push({ label: r.name + ' MFU %', stroke: c, width: 1.5, dash: [4, 3], scale: 'mfu',
                    value: function (u, v) { return v == null ? '-' : v.toFixed(1) + '%'; } });
    });
    if (!tables.length) return;
    addChart('throughput', 'Throughput and MFU', 'Tokens per second (solid, left axis) and model FLOPs utilization (dashed, right axis) per step.',
             { series: series, scales: { tps: {}, mfu: {} },
               axes: [xAxisSteps, { scale: 'tps', label: 'tokens/s', size: 64, values: function (u, s) { return s.map(si); } },
                      { scale: 'mfu', side: 1, label: 'MFU %', size: 56, grid: { show: false },
                        values: function (u, s) { return s.map(function (v) { return v.toFixed(0) + '%'; }); } }] },
             uPlot.join(tables));
  }

  /* ---- per-run charts ---- */
  function timeChart(r, i) {
    var n = r.steps.step.length;
    if (!n || !TIME_KEYS.some(function (k) { return finite(r.steps[k]); })) return;
    var raw = TIME_KEYS.map(function (k) { return r.steps[k].map(function (v) { return v == null ? 0 : v; }); });
    var cum = [], acc = new Array(n).fill(0);
    raw.forEach(function (col) { acc = acc.map(function (a, j) { return a + col[j]; }); cum.push(acc.slice()); });
    /* Drawn top-down (largest cumulative first) so each lower band paints over the one above. */
    var data = [r.steps.step], series = [{ label: 'step' }];
    for (var k = TIME_KEYS.length - 1; k >= 0; k--) {
      data.push(cum[k]);
      (function (k) {
        series.push({ label: TIME_KEYS[k], stroke: TIME_COLORS[k], fill: TIME_COLORS[k] + 'd0', width: 1,
                      value: function (u, v, si, idx) { return idx == null ? '-' : raw[k][idx].toFixed(1) + ' ms'; } });
      })(k);
    }
    var sums = raw.map(function (col) { return col.reduce(function (a, b) { return a + b; }, 0); });
    var total = sums.reduce(function (a, b) { return a + b; }, 0) || 1;
    var shares = TIME_KEYS.map(function (k, j) { return k + ' ' + (100 * sums[j] / total).toFixed(1) + '% (' + (sums[j] / n).toFixed(1) + ' ms)'; });
    var note = 'Stacked time per step in ms. Share of the step time, mean per step: ' + shares.join(', ') + '.';
    var dataShare = sums[0] / total;
    var e = addChart('time_' + i, 'Time decomposition: ' + r.name, note,
                     { series: series, axes: [xAxisSteps, yAxis('ms per step')] }, data);
    if (dataShare > 0.1) e.box.appendChild(el('p', { 'class': 'warn' }, 'The data loader takes ' + (100 * dataShare).toFixed(1) +
                                         '% of the step: the step is waiting for data.'));
  }

  function memoryChart(r, i) {
    var names = [];
    Object.keys(r.memory.planned).concat(Object.keys(r.memory.measured)).forEach(function (k) { if (names.indexOf(k) < 0) names.push(k); });
    names = names.filter(function (k) { return (r.memory.planned[k] || 0) > 0 || (r.memory.measured[k] || 0) > 0; });
    if (!names.length) return;
    var xs = names.map(function (_, j) { return j; });
    var pl = names.map(function (k) { return k in r.memory.planned ? r.memory.planned[k] / 1048576 : null; });
    var me = names.map(function (k) { return k in r.memory.measured ? r.memory.measured[k] / 1048576 : null; });
    var bars = uPlot.paths.bars;
    var e = addChart('memory_' + i, 'Memory: ' + r.name, 'Bytes per category: planned (start record) vs measured (memory record), MiB.',
      { height: 260,
        series: [{ label: 'category', value: function (u, v) { return v == null ? '-' : names[v]; } },
                 { label: 'planned', stroke: '#3182bd', fill: '#3182bdc0', paths: bars({ size: [0.35, 80], align: -1 }),
                   value: function (u, v) { return v == null ? '-' : v.toFixed(1) + ' MiB'; } },
                 { label: 'measured', stroke: '#e6550d', fill: '#e6550dc0', paths: bars({ size: [0.35, 80], align: 1 }),
                   value: function (u, v) { return v == null ? '-' : v.toFixed(1) + ' MiB'; } }],
        scales: { x: { range: [-0.6, names.length - 0.4] }, y: { range: function (u, lo, hi) { return [0, (hi || 1) * 1.1]; } } },
        axes: [{ splits: function () { return xs; }, values: function (u, s) { return s.map(function (v) { return names[v] || ''; }); }, grid: { show: false } },
               yAxis('MiB')] },
      [xs, pl, me]);
    var t = el('table', { 'class': 'mem' });
    var h = el('tr');
    ['category', 'planned', 'measured', 'measured / planned'].forEach(function (c) { h.appendChild(el('th', null, c)); });
    t.appendChild(h);
    names.forEach(function (k) {
      var tr = el('tr'), p = r.memory.planned[k], m = r.memory.measured[k];
      [k, mib(p), mib(m), p > 0 && m != null ? (m / p).toFixed(3) : '-'].forEach(function (c) { tr.appendChild(el('td', null, c)); });
      t.appendChild(tr);
    });
    e.box.appendChild(t);
  }

  function notes() {
    var s = document.getElementById('st-notes');
    D.runs.forEach(function (r) {
      if (!r.notes.length) return;
      var d = el('details');
      d.appendChild(el('summary', null, r.name + ': ' + r.notes.length + ' other events (checkpoints, skips, rollbacks, stalls, end)' +
                       (r.notes_dropped ? ', ' + r.notes_dropped + ' more not shown' : '')));
      var ul = el('ul');
      r.notes.forEach(function (n) { ul.appendChild(el('li', null, n)); });
      d.appendChild(ul);
      s.appendChild(d);
    });
  }

  try {
    header();
    lossChart();
    simpleChart('lr', 'Learning rate', 'Learning rate of each step.', 'lr', 'learning rate', function (v) { return v.toExponential(1); });
    gradChart();
    noiseChart();
    throughputChart();
    D.runs.forEach(timeChart);
    D.runs.forEach(memoryChart);
    notes();
    if (!charts.length) document.getElementById('st-charts').appendChild(el('p', { 'class': 'warn' }, 'No step records to chart.'));
  } catch (e) {
    window.ST_ERRORS.push(String(e && e.stack || e));
  }
  finished = true;
  status();
  window.addEventListener('load', status);
})();
