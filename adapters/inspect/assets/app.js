// loopchart inspector. Every text that comes from the log (model and tool
// text included) is set with textContent: nothing from the data is ever
// parsed as markup.
'use strict';

(() => {
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };

  const getJSON = async (url) => {
    const r = await fetch(url, { headers: { Accept: 'application/json' } });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  };

  const when = (s) => {
    const d = new Date(s);
    return isNaN(d) || d.getUTCFullYear() < 1971 ? '' : d.toLocaleString();
  };

  const clock = (s) => {
    const d = new Date(s);
    return isNaN(d) || d.getUTCFullYear() < 1971 ? '' : d.toISOString().slice(11, 23);
  };

  const cell = (tr, content, cls) => {
    const td = el('td', cls);
    if (content instanceof Node) td.append(content);
    else td.textContent = content === undefined || content === null ? '' : String(content);
    tr.append(td);
    return td;
  };

  // ---- the session list ----

  function list() {
    const input = document.getElementById('search');
    const rows = document.getElementById('session-rows');
    const more = document.getElementById('sessions-more');
    const message = document.getElementById('message');
    const limit = 100;
    let offset = 0;
    let generation = 0;

    const row = (s) => {
      const tr = el('tr');
      tr.dataset.session = s.id;
      const a = el('a', null, s.id);
      a.href = 's/' + encodeURIComponent(s.id);
      cell(tr, a, 'id');
      let status = s.status || '';
      if (s.closed) status += status ? ' · closed' : 'closed';
      else if (s.claimed) status += status ? ' · open' : 'open';
      cell(tr, status, 'status');
      cell(tr, s.turns, 'num');
      cell(tr, s.events, 'num');
      const t = cell(tr, when(s.updated), 'time');
      t.title = s.updated;
      cell(tr, s.result || '', 'result');
      return tr;
    };

    const load = async (append) => {
      const mine = ++generation;
      const u = new URL('api/sessions', document.baseURI);
      u.searchParams.set('q', input.value.trim());
      u.searchParams.set('limit', String(limit));
      u.searchParams.set('offset', String(offset));
      try {
        const data = await getJSON(u);
        if (mine !== generation) return;
        if (!append) rows.replaceChildren();
        for (const s of data.sessions) rows.append(row(s));
        more.hidden = !data.more;
        message.textContent = rows.children.length ? '' : 'No session matches.';
      } catch (e) {
        if (mine === generation) message.textContent = 'Could not list the sessions: ' + e.message;
      }
    };

    const q = new URLSearchParams(location.search).get('q');
    if (q) input.value = q;
    input.addEventListener('input', () => {
      offset = 0;
      const u = new URL(location.href);
      if (input.value.trim()) u.searchParams.set('q', input.value.trim());
      else u.searchParams.delete('q');
      history.replaceState(null, '', u);
      load(false);
    });
    document.getElementById('search-form').addEventListener('submit', (e) => {
      e.preventDefault();
      offset = 0;
      load(false);
    });
    document.getElementById('more').addEventListener('click', () => {
      offset += limit;
      load(true);
    });
    load(false);
  }

  // ---- a session ----

  function session() {
    const body = document.body;
    const id = body.dataset.session;
    const api = new URL('../api/sessions/' + encodeURIComponent(id) + '/', document.baseURI);
    const url = (path, params) => {
      const u = new URL(path, api);
      for (const [k, v] of Object.entries(params || {})) {
        if (v !== '' && v !== null && v !== undefined && v !== 0) u.searchParams.set(k, String(v));
      }
      return u;
    };
    const rowsEl = document.getElementById('timeline-rows');
    const detail = document.getElementById('detail');
    const position = document.getElementById('position');
    const live = document.getElementById('live');
    const follow = document.getElementById('follow');
    // A click on a diagram shows it at its natural size (scrolled to the
    // lit state); another click fits it again.
    for (const d of document.querySelectorAll('.diagram')) {
      d.title = 'click to zoom';
      d.addEventListener('click', () => {
        d.classList.toggle('zoomed');
        const cur = d.querySelector('g.state.current.leaf');
        if (cur && d.classList.contains('zoomed')) cur.scrollIntoView({ block: 'center', inline: 'center' });
      });
    }
    const callsEl = document.getElementById('calls');
    const turnInput = document.getElementById('filter-turn');
    const kindInput = document.getElementById('filter-kind');
    const pageSize = 100;
    const maxRows = 1000;

    const st = {
      head: Number(body.dataset.head) || 0,
      selected: 0, // the selected event, 0: none (the head)
      call: '', // the tool call the tool machine shows, '': the latest
      first: 0,
      last: 0,
      moreAfter: false,
      turns: [],
      kinds: [],
    };

    // The diagrams' elements, by state name and transition index.
    const machines = {};
    for (const sec of document.querySelectorAll('section.machine')) {
      const m = sec.dataset.machine;
      const states = new Map();
      const transitions = new Map();
      for (const g of sec.querySelectorAll('[data-state]')) states.set(g.dataset.state, g);
      for (const g of sec.querySelectorAll('[data-transition]')) transitions.set(g.dataset.transition, g);
      machines[m] = {
        states,
        transitions,
        name: document.getElementById('state-' + m),
        taken: document.getElementById('transition-' + m),
      };
    }

    const paint = (s) => {
      for (const ms of s.machines) {
        const m = machines[ms.machine];
        if (!m) continue;
        for (const g of m.states.values()) g.classList.remove('current', 'leaf');
        for (const g of m.transitions.values()) g.classList.remove('taken', 'just');
        (ms.path || []).forEach((name, i) => {
          const g = m.states.get(name);
          if (!g) return;
          g.classList.add('current');
          if (i === 0) g.classList.add('leaf');
        });
        if (ms.last && ms.last.index >= 0) {
          const g = m.transitions.get(String(ms.last.index));
          if (g) {
            g.classList.add('taken');
            if (ms.last.seq === s.at) g.classList.add('just');
          }
        }
        let name = ms.state || '—';
        if (ms.instance) name = ms.instance + ': ' + name;
        if (ms.turn) name = 'turn ' + ms.turn + ': ' + name;
        m.name.textContent = name;
        const t = ms.last;
        m.taken.textContent = t
          ? 'last: ' + t.from + (t.internal ? ' (internal) ' : ' → ' + t.to + ' ') + 'on ' + t.trigger + (t.guard ? ' [' + t.guard + ']' : '') + ' at event ' + t.seq
          : '';
      }
      if (callsEl) {
        const shown = (s.machines.find((m) => m.machine === 'tool') || {}).instance || '';
        callsEl.replaceChildren(...s.calls.map((c) => {
          const li = el('li', c.id === shown ? 'shown' : '', c.id + ' ' + (c.name || '') + ': ' + (c.state || '—'));
          li.dataset.call = c.id;
          li.tabIndex = 0;
          return li;
        }));
      }
      position.textContent = 'event ' + s.at + ' of ' + s.head + (st.selected ? '' : ' (the head)');
    };

    // States: one request at a time, the last one asked wins.
    let statesBusy = false;
    let statesNext = null;
    const loadStates = async (at) => {
      if (statesBusy) {
        statesNext = at;
        return;
      }
      statesBusy = true;
      try {
        paint(await getJSON(url('states', { at, call: st.call })));
      } catch (e) {
        position.textContent = 'Could not load the states: ' + e.message;
      } finally {
        statesBusy = false;
      }
      if (statesNext !== null) {
        const n = statesNext;
        statesNext = null;
        loadStates(n);
      }
    };

    const rowEl = (r) => {
      const tr = el('tr');
      tr.dataset.seq = String(r.seq);
      tr.dataset.kind = r.kind;
      tr.dataset.turn = String(r.turn || 0);
      if (r.machine) tr.dataset.machine = r.machine;
      if (r.call) tr.dataset.call = r.call;
      if (r.error) tr.classList.add('error');
      if (r.kind === 'machine/transition') tr.classList.add('transition');
      cell(tr, r.seq, 'num');
      cell(tr, clock(r.at), 'time');
      cell(tr, r.turn || '', 'num');
      cell(tr, r.step || '', 'num');
      cell(tr, r.kind, 'kind');
      cell(tr, r.summary, 'summary');
      return tr;
    };

    // latest is the page of the last events.
    const latest = () => (st.head ? { before: st.head + 1 } : { from: 1 });

    const matches = (r) =>
      (st.turns.length === 0 || st.turns.includes(r.turn || 0)) &&
      (st.kinds.length === 0 || st.kinds.some((k) => r.kind.startsWith(k)));

    const markSelected = () => {
      for (const tr of rowsEl.querySelectorAll('tr.selected')) tr.classList.remove('selected');
      if (!st.selected) return;
      const tr = rowsEl.querySelector('tr[data-seq="' + st.selected + '"]');
      if (tr) {
        tr.classList.add('selected');
        tr.scrollIntoView({ block: 'nearest' });
      }
    };

    const showPage = (data, params) => {
      rowsEl.replaceChildren(...data.events.map(rowEl));
      st.head = Math.max(st.head, data.head);
      st.first = data.events.length ? data.events[0].seq : 0;
      st.last = data.events.length ? data.events[data.events.length - 1].seq : 0;
      st.moreAfter = params.before ? params.before <= data.head : data.more;
      markSelected();
    };

    const loadPage = async (params) => {
      const data = await getJSON(url('events', {
        ...params,
        limit: pageSize,
        turn: st.turns.join(','),
        kind: st.kinds.join(','),
      }));
      showPage(data, params);
      return data;
    };

    const loadDetail = async (seq) => {
      try {
        const d = await getJSON(url('events/' + seq));
        if (st.selected !== seq) return;
        const e = d.event;
        detail.textContent = '#' + e.seq + ' ' + e.kind + (e.turn ? ' turn ' + e.turn : '') + (e.step ? ' step ' + e.step : '') +
          '\n' + e.summary + '\n\n' + JSON.stringify(d.payload, null, 2);
      } catch (e) {
        detail.textContent = 'Could not load event ' + seq + ': ' + e.message;
      }
    };

    const select = (seq) => {
      seq = Number(seq);
      if (!seq) return;
      st.selected = seq;
      follow.checked = false;
      history.replaceState(null, '', '#seq=' + seq);
      markSelected();
      loadStates(seq);
      loadDetail(seq);
    };

    // jump shows event seq in the timeline (loading its page) and selects it.
    const jump = async (seq) => {
      if (!rowsEl.querySelector('tr[data-seq="' + seq + '"]')) {
        try {
          await loadPage({ from: Math.max(1, seq - Math.floor(pageSize / 2)) });
        } catch (e) {
          position.textContent = 'Could not load the events: ' + e.message;
          return;
        }
      }
      select(seq);
    };

    const step = async (d) => {
      const rows = Array.from(rowsEl.children);
      let i = rows.findIndex((tr) => Number(tr.dataset.seq) === st.selected);
      i = i < 0 ? (d > 0 ? 0 : rows.length - 1) : i + d;
      if (i >= 0 && i < rows.length) {
        select(rows[i].dataset.seq);
        return;
      }
      try {
        if (d > 0 && st.moreAfter) {
          const data = await loadPage({ from: st.last + 1 });
          if (data.events.length) select(data.events[0].seq);
        } else if (d < 0 && st.first > 1) {
          const data = await loadPage({ before: st.first });
          if (data.events.length) select(data.events[data.events.length - 1].seq);
        }
      } catch (e) {
        position.textContent = 'Could not load the events: ' + e.message;
      }
    };

    const seqFromURL = () => {
      const m = /^#seq=(\d+)$/.exec(location.hash);
      if (m) return Number(m[1]);
      const at = new URLSearchParams(location.search).get('at');
      return at && /^\d+$/.test(at) ? Number(at) : 0;
    };

    rowsEl.addEventListener('click', (e) => {
      const tr = e.target.closest('tr[data-seq]');
      if (tr) select(tr.dataset.seq);
    });
    if (callsEl) {
      const pick = (e) => {
        const li = e.target.closest('li[data-call]');
        if (!li) return;
        st.call = st.call === li.dataset.call ? '' : li.dataset.call;
        loadStates(st.selected);
      };
      callsEl.addEventListener('click', pick);
      callsEl.addEventListener('keydown', (e) => {
        if (e.key === 'Enter') pick(e);
      });
    }
    document.addEventListener('keydown', (e) => {
      if (e.target.closest && e.target.closest('input, textarea, select')) return;
      if (e.altKey || e.ctrlKey || e.metaKey) return;
      if (e.key === 'j' || e.key === 'ArrowDown') {
        e.preventDefault();
        step(1);
      } else if (e.key === 'k' || e.key === 'ArrowUp') {
        e.preventDefault();
        step(-1);
      }
    });
    window.addEventListener('hashchange', () => {
      const seq = seqFromURL();
      if (seq && seq !== st.selected) jump(seq);
    });
    follow.addEventListener('change', () => {
      if (!follow.checked) return;
      st.selected = 0;
      // Following the head: the link no longer names an event (neither
      // #seq=N nor ?at=N), so a reload or a shared link follows too.
      const u = new URL(location.href);
      u.searchParams.delete('at');
      u.hash = '';
      history.replaceState(null, '', u.pathname + u.search);
      markSelected();
      loadStates(0);
      loadPage(latest()).catch(() => {});
    });

    const parseTurns = (s) => s.split(',').map((x) => x.trim()).filter((x) => /^\d+$/.test(x)).map(Number);
    document.getElementById('filters').addEventListener('submit', (e) => {
      e.preventDefault();
      st.turns = parseTurns(turnInput.value);
      st.kinds = kindInput.value.split(',').map((x) => x.trim()).filter(Boolean);
      const p = st.selected ? { from: Math.max(1, st.selected - Math.floor(pageSize / 2)) } : latest();
      loadPage(p).catch((err) => { position.textContent = err.message; });
    });
    document.getElementById('filter-clear').addEventListener('click', () => {
      turnInput.value = '';
      kindInput.value = '';
      st.turns = [];
      st.kinds = [];
      const p = st.selected ? { from: Math.max(1, st.selected - Math.floor(pageSize / 2)) } : latest();
      loadPage(p).catch((err) => { position.textContent = err.message; });
    });
    const pager = (idName, params) => document.getElementById(idName).addEventListener('click', () => {
      loadPage(params()).catch((err) => { position.textContent = err.message; });
    });
    pager('page-first', () => ({ from: 1 }));
    pager('page-prev', () => ({ before: Math.max(2, st.first) }));
    pager('page-next', () => ({ from: st.last + 1 }));
    pager('page-last', latest);

    // Live: new events arrive over server-sent events; the event's seq is
    // the message id, so a reconnection resumes after the last one seen.
    // A closed session writes nothing more that matters: say so rather
    // than "live" (the stream stays open for the stragglers of a close).
    let closed = false;
    const liveText = () => (closed ? 'closed · ' : 'live · ') + st.head + ' events';
    getJSON(new URL('../api/sessions/' + encodeURIComponent(id), document.baseURI)).then((s) => {
      if (s && s.closed) {
        closed = true;
        live.textContent = liveText();
      }
    }).catch(() => {});
    const stream = () => {
      const es = new EventSource(url('stream', { from: st.head + 1 }));
      es.onopen = () => { live.textContent = closed ? liveText() : 'live'; };
      es.onerror = () => { live.textContent = 'reconnecting…'; };
      es.addEventListener('failure', (ev) => {
        let msg = 'stream failed';
        try { msg = JSON.parse(ev.data).error; } catch (_) { /* keep the default */ }
        live.textContent = msg;
        es.close();
      });
      es.onmessage = (ev) => {
        const r = JSON.parse(ev.data);
        st.head = Math.max(st.head, r.seq);
        if (r.kind === 'input/close') closed = true;
        live.textContent = liveText();
        if (!st.moreAfter && matches(r) && r.seq > st.last) {
          rowsEl.append(rowEl(r));
          st.last = r.seq;
          if (!st.first) st.first = r.seq;
          while (rowsEl.children.length > maxRows) {
            rowsEl.firstElementChild.remove();
            st.first = Number(rowsEl.firstElementChild.dataset.seq);
          }
          if (follow.checked) rowsEl.lastElementChild.scrollIntoView({ block: 'nearest' });
        }
        if (follow.checked) loadStates(0);
      };
    };

    const start = seqFromURL();
    (start ? jump(start) : Promise.all([loadPage(latest()), loadStates(0)]))
      .catch((e) => { position.textContent = e.message; })
      .finally(stream);
  }

  if (document.body.dataset.page === 'list') list();
  else if (document.body.dataset.page === 'session') session();
})();
