#!/usr/bin/env python3
"""write-stages.py: a single-client write's stages from syscall timestamps.

Reads a `perf trace -T -e fdatasync,write,read,pwrite64,sendmsg` of three
coord servers and a loadgen (--clients 1 --wire --mode writes), and a file
of "TID PID" lines naming the servers' threads (anything else is the
client). For each request the client wrote (a write over 300 bytes) it
follows the hops: the leader reading it, sending the appends (sendmsg over
300 bytes), writing and fdatasyncing its WAL; each follower receiving the
append, its fdatasync and the acknowledgement it sends; the leader reading
the first acknowledgement, writing the answer; the client reading it. It
prints the median of each gap. Run by bench/scale/write-stages.sh.

    write-stages.py TRACE TIDS LEADER_PID
"""
import re
import statistics
import sys
tid2p = {}
pids = []
for line in open(sys.argv[2]):
    t, p = line.split(); tid2p[int(t)] = int(p)
    if int(p) not in pids: pids.append(int(p))
leader = int(sys.argv[3])
rx = re.compile(r'^\s*([\d.]+) \(\s*([\d.]*)\s*(?:ms)?\): (\S+)/(\d+) (.*)$')
ev = []
for line in open(sys.argv[1]):
    m = rx.match(line)
    if not m: continue
    ts, dur, comm, tid, rest = float(m[1]), m[2], m[3], int(m[4]), m[5]
    if ts > 1e12: continue
    dur = float(dur) if dur else None
    cont = '[continued]' in rest
    sm = re.search(r'(\w+)\((?:fd: (\d+))?', rest.replace('... [continued]: ', ''))
    if not sm: continue
    sc = sm[1]; fd = int(sm[2]) if sm[2] else None
    rm = re.search(r'= (-?\d+)', rest)
    res = int(rm[1]) if rm else None
    if tid in tid2p:
        who = tid2p[tid]
    elif comm.startswith('loadgen'):
        who = 'C'
    else:
        continue
    if cont and fd is None:
        # continued: find original fd unknown; keep syscall
        pass
    ev.append(dict(ts=ts, dur=dur, who=who, sc=sc, fd=fd, res=res, cont=cont, tid=tid))
ev.sort(key=lambda e: e['ts'])
fol = [p for p in pids if p != leader]
def nxt(t, pred):
    for e in ev:
        if e['ts'] >= t and pred(e): return e
    return None
# fsync events with durations: dedupe by (tid, ts) keeping the one with dur
fs = {}
for e in ev:
    if e['sc'] == 'fdatasync' and e['dur'] is not None:
        fs[(e['who'], e['ts'])] = e
fsl = sorted(fs.values(), key=lambda e: e['ts'])
def fsync_after(who, t):
    for e in fsl:
        if e['who'] == who and e['ts'] >= t: return e
    return None
rows = []
for c in [e for e in ev if e['who'] == 'C' and e['sc'] == 'write' and (e['res'] or 0) > 300]:
    t0 = c['ts']
    r = {}
    a = nxt(t0, lambda e: e['who'] == leader and e['sc'] == 'read' and (e['res'] or 0) > 300); 
    if not a: continue
    r['L read req'] = a['ts']
    s = nxt(a['ts'], lambda e: e['who'] == leader and e['sc'] == 'sendmsg' and (e['res'] or 0) > 300)
    if not s: continue
    r['L send append'] = s['ts']
    w = nxt(a['ts'], lambda e: e['who'] == leader and e['sc'] == 'pwrite64' and (e['res'] or 0) > 300)
    if not w: continue
    r['L pwrite'] = w['ts']
    f = fsync_after(leader, w['ts'])
    if not f: continue
    r['L fsync start'] = f['ts']; r['L fsync end'] = f['ts'] + f['dur']
    ack_ts = []
    for i, F in enumerate(fol):
        fr = nxt(s['ts'], lambda e: e['who'] == F and e['sc'] == 'read' and (e['res'] or 0) > 300)
        if not fr: break
        ff = fsync_after(F, fr['ts'])
        if not ff: break
        fa = nxt(ff['ts'] + ff['dur'], lambda e: e['who'] == F and e['sc'] == 'sendmsg')
        if not fa: break
        r[f'F{i} recv'] = fr['ts']; r[f'F{i} fsync start'] = ff['ts']; r[f'F{i} fsync end'] = ff['ts'] + ff['dur']; r[f'F{i} send ack'] = fa['ts']
        ack_ts.append(fa['ts'])
    if len(ack_ts) < 2: continue
    ans = nxt(a['ts'], lambda e: e['who'] == leader and e['sc'] == 'write' and e['fd'] == a['fd'] and (e['res'] or 0) > 50)
    if not ans: continue
    r['L write answer'] = ans['ts']
    cr = nxt(ans['ts'], lambda e: e['who'] == 'C' and e['sc'] == 'read' and (e['res'] or 0) > 50)
    if not cr: continue
    r['C recv'] = cr['ts']
    r['C send'] = t0
    # first ack to reach leader: leader read small on a peer fd after the first ack send
    first_ack = min(ack_ts)
    la = nxt(first_ack, lambda e: e['who'] == leader and e['sc'] == 'read' and e['fd'] != a['fd'] and 0 < (e['res'] or 0) < 100)
    if la: r['L recv 1st ack'] = la['ts']
    if r['C recv'] - t0 > 50: continue
    rows.append(r)
print('writes matched', len(rows))
keys = ['C send','L read req','L send append','L pwrite','L fsync start','L fsync end','F0 recv','F0 fsync start','F0 fsync end','F0 send ack','F1 recv','F1 fsync start','F1 fsync end','F1 send ack','L recv 1st ack','L write answer','C recv']
def med(xs): return statistics.median(xs) if xs else float('nan')
print('%-28s %8s' % ('stage (from C send)', 'p50 ms'))
for k in keys:
    xs = [r[k]-r['C send'] for r in rows if k in r]
    print('%-28s %8.3f  n=%d' % (k, med(xs), len(xs)))
def gap(name, a, b):
    xs = [b(r)-a(r) for r in rows]
    print('%-44s %8.3f' % (name, med(xs)))
print('--- gaps (medians)')
firstF = lambda r: min(r['F0 send ack'], r['F1 send ack'])
gap('client send -> leader reads request', lambda r: r['C send'], lambda r: r['L read req'])
gap('leader reads request -> sends append', lambda r: r['L read req'], lambda r: r['L send append'])
gap('append sent -> leader fsync start', lambda r: r['L send append'], lambda r: r['L fsync start'])
gap('leader fsync', lambda r: r['L fsync start'], lambda r: r['L fsync end'])
gap('append sent -> follower recv (each)', lambda r: r['L send append'], lambda r: (r['F0 recv']+r['F1 recv'])/2)
gap('follower recv -> fsync start (each)', lambda r: 0, lambda r: ((r['F0 fsync start']-r['F0 recv'])+(r['F1 fsync start']-r['F1 recv']))/2)
gap('follower fsync (each)', lambda r: 0, lambda r: ((r['F0 fsync end']-r['F0 fsync start'])+(r['F1 fsync end']-r['F1 fsync start']))/2)
gap('follower fsync end -> ack sent (each)', lambda r: 0, lambda r: ((r['F0 send ack']-r['F0 fsync end'])+(r['F1 send ack']-r['F1 fsync end']))/2)
gap('append sent -> first ack sent', lambda r: r['L send append'], firstF)
gap('first ack sent -> leader recv it', firstF, lambda r: r.get('L recv 1st ack', float('nan')))
gap('max(L fsync end, 1st ack recv) -> answer write', lambda r: max(r['L fsync end'], r.get('L recv 1st ack', 0)), lambda r: r['L write answer'])
gap('L fsync end -> answer write', lambda r: r['L fsync end'], lambda r: r['L write answer'])
gap('1st ack recv -> answer write', lambda r: r.get('L recv 1st ack', 0), lambda r: r['L write answer'])
gap('answer write -> client recv', lambda r: r['L write answer'], lambda r: r['C recv'])
gap('TOTAL client send -> recv', lambda r: r['C send'], lambda r: r['C recv'])
lf = sum(1 for r in rows if r['L fsync end'] > r.get('L recv 1st ack', 0))
print('writes where the leader fsync ended after the first ack arrived: %d of %d' % (lf, len(rows)))
# The commit rule (issue 15): the core counts the leader's own copy only
# once its write is done (Advance), and the loop does that write inline, so
# two followers' acknowledgements that both come before the leader's
# fdatasync ends still wait for it. How often both were sent first, and by
# how much the leader's fdatasync outlasted the second: the most a commit
# on the followers' two copies alone could gain (less the ack's hop).
secondF = lambda r: max(r['F0 send ack'], r['F1 send ack'])
both = [r['L fsync end'] - secondF(r) for r in rows if secondF(r) < r['L fsync end']]
print('writes where both followers sent their ack before the leader fsync ended: %d of %d, by a median of %.3f ms'
      % (len(both), len(rows), med(both)))
