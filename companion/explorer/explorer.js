/* The course's attention explorer (companion.explorer): no dependencies, nothing downloaded.
   Defined once per page; window.companionExplorer.render(root) draws the view whose data
   sits in root's <script type="application/json" class="ax-data">. Every element lives
   inside root, so several views share a page. */
(function () {
  "use strict";
  if (window.companionExplorer) return;
  var ROW = 24;      // px per token row (the lines' end points follow from it)
  var GAP = 150;     // px between the query and the key column
  var TEXT = {
    en: {layer: "Layer", attention: "Attention", heads: "Heads", head: "head", queries: "Query tokens",
         keys: "Key tokens", grid: "Every head of every layer: click one to open it",
         layerHead: function (l, h) { return "layer " + l + ", head " + h; },
         open: "open", pick: "Hover or focus a key token to read its weights.",
         try_: "Click a query token (left) or tab to it and use the arrow keys; switch heads on and off.",
         kinds: {}},
    zh: {layer: "层", attention: "注意力", heads: "注意力头", head: "头", queries: "查询词元",
         keys: "键词元", grid: "每一层的每个头：点击一个即可打开",
         layerHead: function (l, h) { return "第 " + l + " 层，头 " + h; },
         open: "打开", pick: "把鼠标移到某个键词元上（或用键盘聚焦），即可读出它的权重。",
         try_: "点击左侧的查询词元，或用 Tab 键选中后按方向键移动；可以开关各个头。",
         kinds: {self: "自注意力", encoder: "编码器自注意力", decoder: "解码器自注意力", cross: "交叉注意力"}}
  };
  var SVGNS = "http://www.w3.org/2000/svg";

  function el(tag, attrs, text) {
    var e = tag.indexOf("svg:") === 0 ? document.createElementNS(SVGNS, tag.slice(4)) : document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmt(milli) { return (milli / 1000).toFixed(3); }
  function shown(token) { return token.trim() === "" ? "\u2423" : token; }  // a space shows as ␣

  function render(root) {
    if (!root || root.getAttribute("data-rendered")) return;
    var data = JSON.parse(root.querySelector("script.ax-data").textContent);
    var lang = (document.documentElement.lang || "en").toLowerCase().indexOf("zh") === 0 ? "zh" : "en";
    var T = TEXT[lang];
    var id = root.id;
    var state = {kind: 0, layer: data.layer, on: {}, query: data.query, key: -1};
    data.on.forEach(function (h) { state.on[h] = true; });
    var fallback = root.querySelector(".ax-fallback");
    if (fallback) fallback.remove();
    root.setAttribute("data-rendered", "1");

    if (data.title) root.appendChild(el("div", {"class": "ax-title"}, data.title));
    var controls = el("div", {"class": "ax-controls"});
    root.appendChild(controls);
    var kindSelect = null;
    if (data.kinds.length > 1) {
      var kl = el("label", {"for": id + "-kind"}, T.attention + " ");
      kindSelect = el("select", {id: id + "-kind", "class": "ax-kind"});
      data.kinds.forEach(function (k, i) { kindSelect.appendChild(el("option", {value: i}, T.kinds[k.name] || k.label)); });
      kl.appendChild(kindSelect);
      controls.appendChild(kl);
      kindSelect.addEventListener("change", function () {
        state.kind = +kindSelect.value; state.query = 0; state.key = -1; build(); });
    }
    var ll = el("label", {"for": id + "-layer"}, T.layer + " ");
    var layerSelect = el("select", {id: id + "-layer", "class": "ax-layer"});
    data.layers.forEach(function (l, i) { layerSelect.appendChild(el("option", {value: i}, String(l))); });
    layerSelect.value = String(state.layer);
    ll.appendChild(layerSelect);
    controls.appendChild(ll);
    layerSelect.addEventListener("change", function () { state.layer = +layerSelect.value; draw(); });
    var headBox = el("div", {"class": "ax-heads", role: "group", "aria-label": T.heads});
    headBox.appendChild(el("span", {"class": "ax-heads-label"}, T.heads + ":"));
    var headButtons = [];
    for (var h = 0; h < data.heads; h++) {
      var b = el("button", {type: "button", "class": "ax-head-toggle", "data-head": h, id: id + "-head-" + h});
      var sw = el("span", {"class": "ax-swatch", "aria-hidden": "true"});
      sw.style.background = data.palette[h % data.palette.length];
      b.appendChild(sw);
      b.appendChild(document.createTextNode(" " + (h + 1)));
      b.setAttribute("aria-label", T.head + " " + (h + 1));
      b.addEventListener("click", (function (hh) { return function () {
        state.on[hh] = !state.on[hh]; draw(); }; })(h));
      headButtons.push(b);
      headBox.appendChild(b);
    }
    controls.appendChild(headBox);

    var grid = null;
    if (data.mode === "model") {
      root.appendChild(el("div", {"class": "ax-caption", id: id + "-grid-caption"}, T.grid));
      grid = el("div", {"class": "ax-grid", role: "group", "aria-labelledby": id + "-grid-caption"});
      root.appendChild(grid);
    }
    var panel = el("div", {"class": "ax-panel"});
    root.appendChild(panel);
    var hint = el("div", {"class": "ax-hint"}, T.try_);
    root.appendChild(hint);
    var readout = el("div", {"class": "ax-readout", "aria-live": "polite", id: id + "-readout"});
    root.appendChild(readout);

    var qCol, kCol, svg, qButtons, kItems;

    function kind() { return data.kinds[state.kind]; }
    function W() { return kind().w[state.layer]; }  // (heads, Q, K) in thousandths

    function build() {  // the token columns and the thumbnails of the current attention
      panel.textContent = "";
      var k = kind();
      qCol = el("div", {"class": "ax-col ax-queries", role: "listbox", "aria-label": T.queries,
                        "aria-orientation": "vertical", id: id + "-queries"});
      kCol = el("div", {"class": "ax-col ax-keys", role: "listbox", "aria-label": T.keys, id: id + "-keys"});
      var rows = Math.max(k.q.length, k.k.length);
      svg = el("svg:svg", {"class": "ax-lines", width: GAP, height: rows * ROW, "aria-hidden": "true",
                           viewBox: "0 0 " + GAP + " " + (rows * ROW)});
      qButtons = k.q.map(function (t, i) {
        var b = el("div", {"class": "ax-token ax-query", role: "option", tabindex: "-1", "data-index": i,
                           id: id + "-q-" + i}, shown(t));
        b.addEventListener("click", function () { select(i, true); });
        b.addEventListener("mouseenter", function () { select(i, false); });
        b.addEventListener("keydown", onQueryKey);
        qCol.appendChild(b);
        return b;
      });
      kItems = k.k.map(function (t, j) {
        var e = el("div", {"class": "ax-token ax-key", role: "option", tabindex: "-1", "data-index": j,
                           id: id + "-k-" + j}, shown(t));
        e.addEventListener("mouseenter", function () { state.key = j; showKey(); });
        e.addEventListener("focus", function () { state.key = j; showKey(); });
        e.addEventListener("mouseleave", function () { state.key = -1; showKey(); });
        e.addEventListener("keydown", onKeyKey);
        kCol.appendChild(e);
        return e;
      });
      if (kItems.length) kItems[0].setAttribute("tabindex", "0");
      var body = el("div", {"class": "ax-body"});
      body.appendChild(qCol); body.appendChild(svg); body.appendChild(kCol);
      panel.appendChild(body);
      if (grid) buildGrid();
      draw();
    }

    function buildGrid() {
      grid.textContent = "";
      var k = kind();
      var cell = Math.max(2, Math.floor(64 / Math.max(k.q.length, k.k.length)));
      grid.style.gridTemplateColumns = "auto repeat(" + data.heads + ", auto)";
      data.layers.forEach(function (l, li) {
        grid.appendChild(el("div", {"class": "ax-grid-label"}, T.layer + " " + l));
        for (var h = 0; h < data.heads; h++) {
          var b = el("button", {type: "button", "class": "ax-thumb", "data-layer": li, "data-head": h,
                                id: id + "-thumb-" + li + "-" + h,
                                "aria-label": T.open + " " + T.layerHead(l, h + 1), title: T.layerHead(l, h + 1)});
          var c = el("canvas", {width: k.k.length * cell, height: k.q.length * cell});
          var g = c.getContext && c.getContext("2d");
          if (g) {
            g.fillStyle = data.palette[h % data.palette.length];
            var m = k.w[li][h];
            for (var i = 0; i < m.length; i++) for (var j = 0; j < m[i].length; j++) {
              g.globalAlpha = m[i][j] / 1000; g.fillRect(j * cell, i * cell, cell, cell);
            }
          }
          b.appendChild(c);
          b.addEventListener("click", (function (li2, h2) { return function () { openHead(li2, h2); }; })(li, h));
          grid.appendChild(b);
        }
      });
    }

    function openHead(li, h) {
      state.layer = li; layerSelect.value = String(li);
      state.on = {}; state.on[h] = true;
      draw();
      if (qButtons[state.query]) qButtons[state.query].focus({preventScroll: true});
      if (panel.scrollIntoView) panel.scrollIntoView({block: "nearest"});
    }

    function select(i, focus) {
      if (i < 0 || i >= qButtons.length) return;
      state.query = i; draw();
      if (focus) qButtons[i].focus();
    }
    function onQueryKey(ev) {
      var i = state.query, n = qButtons.length;
      var to = {ArrowDown: i + 1, ArrowRight: i + 1, ArrowUp: i - 1, ArrowLeft: i - 1, Home: 0, End: n - 1}[ev.key];
      if (to === undefined) {
        if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); select(i, true); }
        return;
      }
      ev.preventDefault();
      select(Math.max(0, Math.min(n - 1, to)), true);
    }
    function onKeyKey(ev) {
      var j = +ev.currentTarget.getAttribute("data-index"), n = kItems.length;
      var to = {ArrowDown: j + 1, ArrowRight: j + 1, ArrowUp: j - 1, ArrowLeft: j - 1, Home: 0, End: n - 1}[ev.key];
      if (to === undefined) return;
      ev.preventDefault();
      to = Math.max(0, Math.min(n - 1, to));
      kItems[j].setAttribute("tabindex", "-1"); kItems[to].setAttribute("tabindex", "0"); kItems[to].focus();
    }

    function activeHeads() {
      var out = [];
      for (var h = 0; h < data.heads; h++) if (state.on[h]) out.push(h);
      return out;
    }

    function draw() {
      var k = kind(), w = W(), q = state.query, heads = activeHeads();
      headButtons.forEach(function (b, h) { b.setAttribute("aria-pressed", state.on[h] ? "true" : "false"); });
      qButtons.forEach(function (b, i) {
        var sel = i === q;
        b.setAttribute("aria-selected", sel ? "true" : "false");
        b.setAttribute("tabindex", sel ? "0" : "-1");
        b.classList.toggle("ax-selected", sel);
      });
      qCol.setAttribute("aria-activedescendant", id + "-q-" + q);
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      var y0 = (q + 0.5) * ROW;
      heads.forEach(function (h) {
        var colour = data.palette[h % data.palette.length];
        for (var j = 0; j < k.k.length; j++) {
          var m = w[h][q][j];
          var line = el("svg:line", {"class": "ax-line", x1: 2, y1: y0, x2: GAP - 2, y2: (j + 0.5) * ROW,
                                     stroke: colour, "stroke-opacity": (m / 1000).toFixed(3),
                                     "stroke-width": (1 + 3 * m / 1000).toFixed(2),
                                     "data-head": h, "data-key": j, "data-weight": fmt(m)});
          line.appendChild(el("svg:title", {}, T.head + " " + (h + 1) + ": " + k.q[q] + " → " + k.k[j] + " " + fmt(m)));
          svg.appendChild(line);
        }
      });
      kItems.forEach(function (e, j) {
        var best = 0, parts = [];
        heads.forEach(function (h) { best = Math.max(best, w[h][q][j]); parts.push(T.head + " " + (h + 1) + " " + fmt(w[h][q][j])); });
        e.style.setProperty("--ax-strength", (best / 1000).toFixed(3));
        var label = k.k[j] + (parts.length ? ": " + parts.join(", ") : "");
        e.setAttribute("aria-label", label);
        e.setAttribute("title", label);
        e.setAttribute("data-weights", heads.map(function (h) { return fmt(w[h][q][j]); }).join(" "));
      });
      if (grid) grid.querySelectorAll(".ax-thumb").forEach(function (b) {
        var on = +b.getAttribute("data-layer") === state.layer && state.on[+b.getAttribute("data-head")];
        b.classList.toggle("ax-current", !!on);
        b.setAttribute("aria-pressed", on ? "true" : "false");
      });
      showKey();
    }

    function showKey() {
      var k = kind(), w = W(), q = state.query, j = state.key, heads = activeHeads();
      if (j < 0 || j >= k.k.length) { readout.textContent = "“" + k.q[q] + "” (" + T.layer + " " + data.layers[state.layer] + "). " + T.pick; return; }
      readout.textContent = "“" + k.q[q] + "” → “" + k.k[j] + "”: " +
        heads.map(function (h) { return T.head + " " + (h + 1) + " " + fmt(w[h][q][j]); }).join(", ");
    }

    if (kindSelect) kindSelect.value = "0";
    build();
  }

  window.companionExplorer = {render: render, version: 1};
})();
