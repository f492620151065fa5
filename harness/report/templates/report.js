/* The report's one script (harness/report/interactive.py inlines it; the page's CSP runs it by its
   hash): a #anchor opens the <details> around its target, the drill-down's search box filters the
   sessions of its run, and DataTables (itables' offline bundle, inlined packed) makes every
   table.dt sort on a click and, past a few rows, filter on typing. The page reads the same without it. */
(function () {
  "use strict";
  var root = document.documentElement;

  function reveal() {
    var id;
    try { id = decodeURIComponent(location.hash.slice(1)); } catch (e) { return; }
    var target = id && document.getElementById(id);
    if (!target) return;
    for (var el = target; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") el.open = true;
    }
    target.scrollIntoView();
  }

  /* Every entry of a run's drill-down with the text a search looks in: a session shown turn by
     turn (its id, the user's turns and the queries the arms issued: each turn table's first row),
     or a row of those listed. */
  function entries(run) {
    var out = [];
    run.querySelectorAll("details.session").forEach(function (s) {
      var parts = [s.querySelector("summary").textContent];
      s.querySelectorAll(".user, table.drill > tbody > tr:first-child > td").forEach(function (el) { parts.push(el.textContent); });
      out.push({el: s, page: s.closest("details.page"), text: parts.join(" ").toLowerCase()});
    });
    run.querySelectorAll("details.rest tbody tr").forEach(function (tr) {
      out.push({el: tr, page: tr.closest("details.page"), text: tr.textContent.toLowerCase()});
    });
    return out;
  }

  function search(box) {
    var run = box.closest(".drill-run"), list = null, count = run.querySelector(".drill-count");
    box.addEventListener("input", function () {
      list = list || entries(run);
      var words = box.value.toLowerCase().split(/\s+/).filter(Boolean), pages = new Map(), found = 0;
      list.forEach(function (e) {
        var hit = words.every(function (w) { return e.text.indexOf(w) >= 0; });
        e.el.hidden = !hit;
        found += hit ? 1 : 0;
        if (e.page) pages.set(e.page, pages.get(e.page) || hit);
      });
      pages.forEach(function (hit, page) {
        page.hidden = words.length > 0 && !hit;
        if (words.length && hit) page.open = true;
      });
      count.textContent = words.length ? found + " of " + list.length + " sessions match" : "";
      if (words.length && found === 1) {  // the one session found is shown open
        list.forEach(function (e) { if (!e.el.hidden && e.el.tagName === "DETAILS") e.el.open = true; });
      }
    });
  }

  /* The number a cell starts with (its sort key), else its text: "+0.012 [..]", "<0.001", "12/40". */
  function key(html) {
    var text = String(html).replace(/<[^>]*>/g, " ").replace(/&nbsp;|&#160;/g, " ").trim();
    var m = text.match(/^[\[(<≤~]?\s*([-−+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?)/i);
    if (m) return parseFloat(m[1].replace("−", "-").replace(/,/g, ""));
    return text === "—" || text === "n/a" || text === "" ? null : text.toLowerCase();
  }

  async function unpack(id) {
    var bytes = Uint8Array.from(atob(document.getElementById(id).textContent), function (c) {
      return c.charCodeAt(0);
    });
    return new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
  }

  async function tables() {
    var style = document.createElement("style");
    style.textContent = await unpack("dt-css");
    document.head.insertBefore(style, document.head.querySelector("style"));  // the report's own style wins
    var url = URL.createObjectURL(new Blob([await unpack("dt-js")], {type: "text/javascript"}));
    var DataTable = (await import(url)).default;
    URL.revokeObjectURL(url);
    document.querySelectorAll("table.dt").forEach(function (t) {
      var many = t.tBodies.length && t.tBodies[0].rows.length > 8;
      t.classList.add("compact");
      new DataTable(t, {
        paging: false, info: false, order: [], autoWidth: false,
        layout: {topStart: many ? "search" : null, topEnd: null, bottomStart: null, bottomEnd: null},
        language: {search: "Filter rows:"},
        columnDefs: [{targets: "_all", render: function (data, type) {
          return type === "sort" || type === "type" ? key(data) : data;
        }}]
      });
    });
    root.setAttribute("data-tables", "ready");
  }

  /* A session opened by a click names itself in the address bar: its link can be copied. */
  document.addEventListener("click", function (e) {
    var summary = e.target.closest && e.target.closest("details.session > summary");
    var session = summary && summary.parentElement;
    if (session && !session.open && session.id) history.replaceState(null, "", "#" + session.id);
  });

  window.addEventListener("hashchange", reveal);
  reveal();
  var at = window.scrollY;
  document.querySelectorAll("input.drill-search").forEach(search);
  tables().then(function () {
    if (window.scrollY === at) reveal();  // the tables' layout moved the anchor, and nobody scrolled since
  }, function (e) {
    root.setAttribute("data-tables", "failed: " + e);
  });
})();
