// The coord cluster page: it reads GET /v1/dashboard?stream=true from one
// node (server-sent events, read with fetch so that the token can travel
// in the Authorization header, which EventSource cannot send) and draws
// each document. When that node stops answering it moves to another member,
// the leader first. No framework, no build step: this file is served as it
// is written.
'use strict';
(() => {
  const TOKEN_KEY = 'coord.token';
  const SILENCE_MS = 3000; // the server sends at least every 500 ms
  const WRITE_SECONDS = 60; // the server keeps a minute of write rates
  const $ = (sel) => document.querySelector(sel);

  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  let current = location.origin; // the node this page talks to
  let origins = [location.origin]; // every member's API, as last seen
  let last = null; // the last dashboard
  let lastAt = 0; // performance.now() when it came
  let loginDone = null;

  class AuthError extends Error {}

  const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  function setConn(text, ok) {
    const c = $('#conn');
    c.textContent = text;
    c.className = 'conn ' + (ok ? 'ok' : 'bad');
  }

  // follow reads one node's stream until it fails or falls silent.
  async function follow(origin) {
    const ctl = new AbortController();
    let watchdog = setTimeout(() => ctl.abort(), SILENCE_MS);
    try {
      const resp = await fetch(origin + '/v1/dashboard?stream=true', {
        headers: token ? { Authorization: 'Bearer ' + token } : {},
        signal: ctl.signal,
        cache: 'no-store',
      });
      if (resp.status === 401) throw new AuthError('the cluster does not know this token');
      if (resp.status === 403) throw new AuthError('this token may not read the dashboard');
      if (!resp.ok) throw new Error('HTTP ' + resp.status);
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) throw new Error('the stream ended');
        buf += value;
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
          if (!data) continue;
          clearTimeout(watchdog);
          watchdog = setTimeout(() => ctl.abort(), SILENCE_MS);
          show(JSON.parse(data), origin);
        }
      }
    } catch (e) {
      if (e.name === 'AbortError') throw new Error('no word for ' + SILENCE_MS / 1000 + ' s');
      throw e;
    } finally {
      clearTimeout(watchdog);
      ctl.abort();
    }
  }

  // next picks the node to try after origin failed: the leader, if another
  // node leads, else the next member in turn.
  function next(failed) {
    if (last) {
      const leader = last.nodes.find((n) => n.id === last.leader && n.http);
      const url = leader && last.scheme + '://' + leader.http;
      if (url && url !== failed && leader.reachable) return url;
    }
    const i = origins.indexOf(failed);
    return origins[(i + 1) % origins.length];
  }

  async function run() {
    let failures = 0;
    for (;;) {
      try {
        await follow(current);
      } catch (e) {
        if (e instanceof AuthError) {
          await askToken(e.message);
          failures = 0;
          continue;
        }
        setConn('lost ' + current + ' (' + e.message + '); trying another node', false);
        const failed = current;
        current = next(current);
        if (last) markDown(failed);
        failures++;
        await delay(Math.min(100 * failures, 1000));
      }
    }
  }

  function askToken(message) {
    $('#main').hidden = true;
    $('#login').hidden = false;
    $('#login-error').textContent = token ? message : '';
    setConn('needs a token', false);
    $('#token').focus();
    return new Promise((resolve) => { loginDone = resolve; });
  }

  $('#login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = $('#token').value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    $('#token').value = '';
    $('#login').hidden = true;
    if (loginDone) loginDone();
  });

  $('#forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    token = '';
    location.reload();
  });

  // markDown shows the node that stopped answering as down at once,
  // before another node's view arrives.
  function markDown(origin) {
    const row = [...document.querySelectorAll('#nodes tbody tr')].find((r) => r.dataset.origin === origin);
    if (row) {
      row.dataset.reachable = 'false';
      row.dataset.role = 'down';
      row.classList.add('down');
    }
  }

  function show(d, origin) {
    last = d;
    lastAt = performance.now();
    current = origin;
    const seen = d.nodes.filter((n) => n.http).map((n) => d.scheme + '://' + n.http);
    origins = [...new Set([origin, ...seen, location.origin])];
    $('#login').hidden = true;
    $('#main').hidden = false;
    $('#forget').hidden = !token;
    $('#cluster').textContent = d.cluster_id ? 'cluster ' + d.cluster_id : '';
    const own = origin === location.origin ? 'the node that served this page' : 'failed over from ' + location.host;
    setConn('talking to node ' + d.node + ' at ' + (d.http || origin) + ' (' + own + ')', true);
    $('#conn').dataset.node = d.node;
    const summary = $('#summary');
    summary.textContent = d.leader ? 'leader: node ' + d.leader + ', term ' + d.term : 'no leader (term ' + d.term + ')';
    summary.dataset.leader = d.leader;
    drawNodes(d);
    drawLeases();
    drawWrites(d.writes_per_second);
    drawElections(d.elections);
  }

  function fmtMs(ms) {
    if (ms === undefined || ms === null) return '';
    if (ms < 1000) return ms + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    return Math.round(ms / 60000) + ' min';
  }

  function drawNodes(d) {
    const body = $('#nodes tbody');
    body.replaceChildren(...d.nodes.map((n) => {
      const role = n.reachable ? n.role : 'down';
      const cls = role === 'leader' ? 'leader' : role === 'candidate' ? 'candidate' : role === 'down' ? 'down' : '';
      const name = 'node ' + n.id + (n.id === d.node ? ' (answering)' : '') + (n.voter ? '' : ' (learner)');
      const tr = el('tr', { 'data-node': n.id, 'data-role': role, 'data-reachable': n.reachable, 'data-origin': d.scheme + '://' + n.http, class: n.reachable ? '' : 'down' },
        el('td', {}, name),
        el('td', { title: n.error || '' }, el('span', { class: 'role ' + cls }, role), n.reachable ? '' : ' ' + (n.error || '')),
        el('td', { class: 'num' }, n.reachable ? n.term : ''),
        el('td', { class: 'num' }, n.reachable ? n.commit : ''),
        el('td', { class: 'num' }, n.reachable ? n.applied : ''),
        el('td', { class: 'num' }, n.lag_entries ?? ''),
        el('td', { class: 'num' }, fmtMs(n.last_contact_ms)),
        el('td', {}, n.http || '?'),
        el('td', {}, n.peer));
      return tr;
    }));
  }

  // drawLeases counts each lease down from the last document, so that the
  // time left moves between events.
  function drawLeases() {
    if (!last) return;
    const since = Math.round(performance.now() - lastAt);
    $('#leases-count').textContent = last.leases_held ? '(' + last.leases_held + ' held' + (last.leases.length < last.leases_held ? ', first ' + last.leases.length + ' shown' : '') + ')' : '';
    $('#leases-none').hidden = last.leases.length > 0;
    $('#leases tbody').replaceChildren(...last.leases.map((l) => el('tr', { 'data-lease': l.name, 'data-token': l.token, 'data-holder': l.holder },
      el('td', {}, l.name),
      el('td', {}, l.holder),
      el('td', { class: 'num' }, l.token),
      el('td', { class: 'num' }, fmtMs(l.ttl_ms)),
      el('td', { class: 'num' }, l.remaining_ms === undefined ? '' : fmtMs(Math.max(0, l.remaining_ms - since))))));
  }

  function drawWrites(series) {
    const svg = $('#writes');
    // A fixed minute wide, the newest second at the right edge.
    const n = series.length;
    const top = Math.max(1, ...series);
    const points = series.map((v, i) => ((300 * (WRITE_SECONDS - n + i)) / (WRITE_SECONDS - 1)).toFixed(1) + ',' + (78 - (74 * v) / top).toFixed(1)).join(' ');
    const line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
    line.setAttribute('points', points);
    svg.replaceChildren(line);
    $('#writes-now').textContent = n ? '(now ' + series[n - 1] + '/s, peak ' + Math.max(...series) + '/s)' : '';
  }

  function drawElections(list) {
    $('#elections-none').hidden = list.length > 0;
    $('#elections').replaceChildren(...list.map((e) => {
      const when = new Date(e.elected_unix_ms).toLocaleTimeString();
      const silence = e.silence_ms === undefined ? '' : '; no word from leader ' + e.previous + ' for ' + fmtMs(e.silence_ms);
      return el('li', { 'data-term': e.term, 'data-leader': e.leader },
        when + ': node ' + e.leader + ' elected in term ' + e.term + ', ' + fmtMs(e.took_ms) + ' after the election began' + silence + '. Why: ' + e.reason);
    }));
  }

  setInterval(drawLeases, 250);
  run();
})();
